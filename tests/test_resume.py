"""Surviving a crash: a training run killed with SIGKILL resumes, with the same command, from its
last checkpoint; a half-written checkpoint is never used. SIGTERM and SIGINT (preemption, Ctrl-C)
checkpoint the step in flight before the run ends; the same command then resumes each training
workflow (fine-tuning, a vocabulary update, multilingual sources, subword sampling) with its state.

The models have one layer each side (`--num-layers 1`): surviving a crash does not depend on depth,
and a layer less halves the trace that every process pays before its first step."""

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, FIXTURE, TINY_TRAINING

TIMEOUT_S = 600
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def latest_step(model_dir):
    latest = tf.train.latest_checkpoint(os.path.join(model_dir, "checkpoints"))
    return int(re.search(r"ckpt-(\d+)$", latest).group(1)) if latest else None


@pytest.mark.slow
def test_kill_9_then_the_same_command_resumes_from_the_last_checkpoint(tmp_path):
    """With the training workflows' options too: a recipe file, weighted sources, a moving average
    of the weights and early stopping."""
    model_dir = str(tmp_path / "model")
    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"data: {FIXTURE}:0.7,software-en-de:0.3\nema_decay: 0.9\nearly_stopping: 3\n", encoding="utf-8")
    command = [
        sys.executable, "-m", "keras_transformer", "train", "--config", str(recipe), "--model-dir", model_dir,
        "--preset", "tiny", "--num-layers", "1", "--vocab-size", "300", "--batch-tokens", "512", "--warmup-steps", "10",
        "--steps-per-epoch", "40", "--max-steps", "40", "--checkpoint-every", "2",
    ]  # fmt: skip
    first = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while (latest_step(model_dir) or 0) < 6:  # mid-run, between or during checkpoint writes
            assert first.poll() is None and time.monotonic() < deadline, "the run ended before it could be killed"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL
    killed_at = latest_step(model_dir)
    assert 6 <= killed_at < 40

    second = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert second.returncode == 0, second.stderr[-3000:]
    print(f"killed; resumed from step {killed_at}")
    assert f"resumed from step {killed_at}" in second.stderr
    assert "trained to step 40" in second.stderr
    assert latest_step(model_dir) == 40
    assert tf.train.latest_checkpoint(os.path.join(model_dir, "ema")).endswith("ckpt-40")
    assert os.path.isfile(os.path.join(model_dir, "early_stopping.json"))


class Training:
    """A `train` subprocess whose output lines (stderr's log, stdout's progress) are collected as they come."""

    def __init__(self, command):
        self.process = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.reader = threading.Thread(target=lambda: self.lines.extend(self.process.stdout), daemon=True)
        self.reader.start()

    def wait_for(self, text):
        deadline = time.monotonic() + TIMEOUT_S
        while not any(text in line for line in self.lines):
            assert self.process.poll() is None and time.monotonic() < deadline, "".join(self.lines)[-3000:]
            time.sleep(0.1)

    def stop(self, number):
        self.process.send_signal(number)
        self.process.wait(timeout=120)
        self.reader.join(timeout=10)
        return self.process.returncode, "".join(self.lines)


@pytest.mark.slow
def test_sigterm_and_sigint_checkpoint_the_step_and_the_same_command_resumes(tmp_path):
    model_dir = str(tmp_path / "model")
    command = [
        sys.executable,
        "-m",
        "keras_transformer",
        "train",
        "--data",
        str(FIXTURE),
        "--model-dir",
        model_dir,
        *TINY_TRAINING,
        "--num-layers",
        "1",
        "--ema-decay",
        "0.99",
        # no --checkpoint-every, and no epoch end: only the signal can save
        "--steps-per-epoch",
        "100000",
        "--max-steps",
        "100000",
    ]
    first = Training(command)
    try:
        first.wait_for("training on")
        time.sleep(2)  # a step or more (the step in flight at the signal is checkpointed)
        status, stderr = first.stop(signal.SIGTERM)
    finally:
        first.process.kill()
    stopped = latest_step(model_dir)
    assert status == 128 + signal.SIGTERM, stderr[-3000:]
    assert stopped >= 1 and f"interrupted by SIGTERM: stopped at step {stopped}; checkpoint " in stderr
    assert "Traceback" not in stderr

    second = Training(command)  # the same command
    try:
        second.wait_for(f"resumed from step {stopped}")
        second.wait_for("training on")
        time.sleep(2)
        status, stderr = second.stop(signal.SIGINT)
    finally:
        second.process.kill()
    assert status == 128 + signal.SIGINT, stderr[-3000:]
    assert latest_step(model_dir) > stopped
    assert f"interrupted by SIGINT: stopped at step {latest_step(model_dir)}; checkpoint " in stderr


def test_a_checkpoint_whose_write_was_cut_short_is_not_used(tmp_path):
    """ModelDir's CheckpointManager (the one `train` saves with) names a checkpoint in its index
    file only once all its files are written: files of an unfinished save (no index entry) are
    ignored by ModelDir's resume and `load_model`'s choice."""
    from keras_transformer.model_dir import ModelDir
    from keras_transformer.model_dir.checkpoints import restore_newest, save_checkpoint

    model_dir = ModelDir(str(tmp_path))
    variable = tf.Variable(1.0)
    save_checkpoint(model_dir.checkpoint_manager(tf.train.Checkpoint(v=variable), keep=3), 2)
    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "ckpt-4.index").write_bytes(b"truncated")  # a save killed before its index update
    (checkpoints / "ckpt-4_temp").mkdir()
    variable.assign(5.0)
    assert model_dir.checkpoints() == [str(checkpoints / "ckpt-2")]
    assert restore_newest(tf.train.Checkpoint(v=variable), model_dir.checkpoints()).endswith("ckpt-2")
    assert float(variable.numpy()) == 1.0


def catches(pid: int, number: int) -> bool:
    """Whether process `pid` has a handler of its own for signal `number` (Linux: /proc's SigCgt mask)."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        mask = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    return bool(int(mask, 16) >> (number - 1) & 1)


def train_command(model_dir, *flags):
    return [sys.executable, "-m", "keras_transformer", "train", "--data", str(FIXTURE), "--model-dir", model_dir,
            *TINY_TRAINING, "--num-layers", "1", "--max-steps", "100000", *flags]  # fmt: skip


@pytest.mark.slow
def test_a_second_signal_ends_the_process_at_once(tmp_path):
    """The first SIGTERM asks for a checkpoint after the step in flight; a second one, before that
    is done, gets the default action: the process ends at once, killed, with nothing more written."""
    run = Training(train_command(str(tmp_path / "model"), "--steps-per-epoch", "100000"))
    try:
        run.wait_for("step 1/")  # the progress line of the first step: the handlers are in place
        run.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + TIMEOUT_S
        while catches(run.process.pid, signal.SIGTERM):  # until the Python handler has run (it may wait for an op)
            assert time.monotonic() < deadline, "".join(run.lines)[-3000:]
            time.sleep(0.001)
        run.process.send_signal(signal.SIGTERM)
        status = run.process.wait(timeout=30)
    finally:
        run.process.kill()
    run.reader.join(timeout=10)
    assert status == -signal.SIGTERM  # killed by the signal, not exit status 128 + 15 after a checkpoint
    assert "interrupted by SIGTERM" not in "".join(run.lines)


@pytest.mark.slow
def test_a_time_budget_ends_with_a_checkpoint_and_the_same_command_trains_for_another(tmp_path, capsys):
    """In this process (`main`): a budget is wall-clock time whatever the process."""
    from keras_transformer.cli.main import main

    model_dir = str(tmp_path / "model")
    argv = train_command(model_dir, "--steps-per-epoch", "20", "--time-budget", "4s")[3:]  # after `python -m kt`
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    first = capsys.readouterr().err
    stopped = latest_step(model_dir)
    assert stopped and "time budget of 4s used up at step" in first
    assert f"trained to step {stopped}; checkpoint " in first  # the final checkpoint is the last step
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    second = capsys.readouterr().err
    assert f"resumed from step {stopped}" in second and latest_step(model_dir) > stopped


class TerminateAt(keras.callbacks.Callback):
    """Sends this process SIGTERM at the end of optimizer step `step` (after the first checkpoint,
    at step 2 with `--checkpoint-every 2`), as a preemption would: `train`'s handler takes it."""

    def __init__(self, step):
        super().__init__()
        self.step = step

    def on_train_batch_end(self, batch, logs=None):
        if int(self.model.optimizer.iterations.numpy()) == self.step:
            os.kill(os.getpid(), signal.SIGTERM)


class WeightsAtStart(keras.callbacks.Callback):
    def on_train_begin(self, logs=None):
        self.weights = [w.numpy() for w in self.model.weights]


FIXTURE_FR = DATA / "fixture_bible.en-fr.tsv"
# The flags of every run below: a 1-layer tiny model, as `one_pair_run`'s parent (ONE_PAIR_FLAGS), 5 steps.
WORKFLOW_FLAGS = ["--preset", "tiny", "--num-layers", "1", "--dropout", "0", "--batch-tokens", "512"]
WORKFLOW_FLAGS += ["--warmup-steps", "2", "--max-steps", "5", "--steps-per-epoch", "5", "--checkpoint-every", "2"]
WORKFLOW_FLAGS += ["--tokenizer-sample", "200", "--shuffle-buffer", "200"]
WORKFLOWS = {  # name: the workflow's own flags ({parent}: the parent model dir, whose vocabulary has 60 pieces)
    "fine-tuning": ["--data", str(FIXTURE), "--init-from", "{parent}", "--vocab-size", "60"],
    "vocabulary-update": ["--data", str(FIXTURE_FR), "--init-from", "{parent}", "--vocabulary", "update"]
    + ["--vocab-size", "120"],
    "multilingual": ["--data", f"{FIXTURE}:0.5,{FIXTURE_FR}:0.5", "--vocab-size", "100"],
    "subword-sampling": ["--data", str(FIXTURE), "--subword-alpha", "0.1", "--vocab-size", "100"],
}


@pytest.mark.slow
@pytest.mark.parametrize("workflow", WORKFLOWS)
def test_each_workflow_resumes_after_sigterm_with_its_state(workflow, one_pair_run, tmp_path, monkeypatch, capsys):
    """The README's training workflows each survive a SIGTERM: a run stopped at step 3 (after its
    first checkpoint, at step 2) exits 143 with a checkpoint, and the same command resumes from step
    3, from that checkpoint's weights (fine-tuning: not the parent's again; a vocabulary update: not
    the parent's rows mapped again), with the workflow's state kept: config.json (the parent, the
    vocabulary, the target languages, the subword alpha) and the vocabulary byte for byte, and the
    training batches made as before (multilingual: each source led by its language's piece;
    subword sampling: segmentations sampled). Each run is `main` in this process, sent a real
    SIGTERM, so that the 8 runs do not pay TensorFlow's start 8 times (kill -9 and SIGTERM sent to
    processes of their own: the tests above)."""
    from keras_transformer.cli.main import main
    from keras_transformer.model_dir import ModelDir, load_model
    from keras_transformer.training import trainer

    model_dir = str(tmp_path / "model")
    flags = [flag.format(parent=one_pair_run.model_dir) for flag in WORKFLOWS[workflow]]
    argv = ["train", "--model-dir", model_dir, *flags, *WORKFLOW_FLAGS]
    added, batches, run = [], [], trainer.train
    monkeypatch.setattr(trainer, "train", lambda *a, callbacks=(), **k: run(*a, callbacks=[*callbacks, *added], **k))
    make_batches = trainer.make_batches

    def training_batches_kept(pairs, tokenizer, **settings):
        made = make_batches(pairs, tokenizer, **settings)
        if settings["training"]:
            batches.append((made, settings))
        return made

    monkeypatch.setattr(trainer, "make_batches", training_batches_kept)

    added[:] = [TerminateAt(3)]
    assert main(argv) == 128 + signal.SIGTERM, capsys.readouterr().err[-3000:]
    assert "interrupted by SIGTERM: stopped at step 3; checkpoint " in capsys.readouterr().err
    assert latest_step(model_dir) == 3
    config, vocabulary = (
        open(os.path.join(model_dir, name), "rb").read() for name in ("config.json", "tokenizer.model")
    )
    stopped = load_model(model_dir)[0]  # ckpt-3's weights

    at_start, batches[:] = WeightsAtStart(), []
    added[:] = [at_start]
    assert main(argv) == 0, capsys.readouterr().err[-3000:]
    err = capsys.readouterr().err
    assert "resumed from step 3" in err and "trained to step 5" in err
    assert open(os.path.join(model_dir, "config.json"), "rb").read() == config
    assert open(os.path.join(model_dir, "tokenizer.model"), "rb").read() == vocabulary
    for weight, kept in zip(at_start.weights, stopped.weights, strict=True):
        np.testing.assert_array_equal(weight, kept.numpy())
    stored = json.loads(config)
    tokenizer = ModelDir(model_dir).tokenizer()
    if "--init-from" in flags:
        parent = load_model(one_pair_run.model_dir)[0]
        same_shape = [(a, b.numpy()) for a, b in zip(at_start.weights, parent.weights) if a.shape == b.shape]
        assert not all(np.array_equal(a, b) for a, b in same_shape)  # trained on, not the parent's again
        assert stored["parent"]["dir"] == os.path.abspath(one_pair_run.model_dir)
    if workflow == "vocabulary-update":
        assert stored["parent"]["vocabulary"] == "update" and tokenizer.vocab_size == 120 != parent.config.vocab_size
    [(training_batches, settings)] = batches
    if workflow == "multilingual":
        assert stored["target_langs"] == ["de", "fr"] and tokenizer.lang_ids == {"de": 4, "fr": 5}
        sources = tf.nest.flatten(next(iter(training_batches)))[0].numpy()  # [B, S]
        assert set(sources[:, 0]) == {4, 5}  # every source led by its target language's piece
    if workflow == "subword-sampling":
        assert stored["data_config"]["subword_alpha"] == 0.1 and settings["subword_alpha"] == 0.1
