"""`keras-transformer train --backend jax|torch` (issue 38). One JAX run, with the validation BLEU
every epoch, is stopped by SIGTERM, killed with `kill -9` after its first BLEU and resumed with the same
command; its model dir goes to the TensorFlow tools: `translate` gives the greedy tokens of JAX's own
forward passes, `evaluate` the BLEU the run logged, `average` the mean of its checkpoints, `train
--init-from` on TensorFlow starts from its weights, and its exports (SavedModels and TFLite, passing
`export --check`; CTranslate2) translate as the checkpoint does. A run on PyTorch, with a BLEU,
translates alike; a JAX run on 2 CPU devices splits every batch across both and resumes. On JAX and on
PyTorch, a TensorFlow parent is fine-tuned within a time budget with a moving average of the weights,
resumed with early stopping, and a run accumulates gradients in mixed precision. Each backend
runs in processes of its own (Keras fixes its backend when imported); tests/backend_parity.py decodes
there.

Slow: every JAX or PyTorch process imports TensorFlow too (the `tf.data` pipeline) and JAX compiles
its steps (~10-20 CPU-s a process); the BLEU's TensorFlow process traces the beam search (~15 CPU-s)."""

import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

import backend_parity
import keras
import numpy as np
import pytest
from conftest import FIXTURE, run_cli
from test_backends import installed
from test_ctranslate2 import Exported as CTranslate2Export
from test_ctranslate2 import greedy_translations
from test_export import kit_module

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.data.sources import read_pairs
from keras_transformer.model_dir.checkpoints import checkpoint_paths, checkpoint_step
from keras_transformer.training import trainer
from keras_transformer.training.tensorflow_translator import TEMPORARY_PREFIX

TIMEOUT_S = 600
MAX_STEPS = 120
# The tiny model, without dropout, on the fixture's short pairs: after 120 steps its greedy outputs
# vary (memorised verses), so that equal tokens on two backends say something.
FLAGS = ["--data", str(FIXTURE), "--preset", "tiny", "--vocab-size", "300", "--batch-tokens", "256"]
FLAGS += ["--max-length", "24", "--dropout", "0", "--warmup-steps", "30", "--max-steps", str(MAX_STEPS)]
FLAGS += ["--steps-per-epoch", "40", "--checkpoint-every", "10"]
BLEU_SENTENCES = 8
BLEU = ["--bleu-every-epochs", "1", "--bleu-sentences", str(BLEU_SENTENCES)]  # every 40 steps of a run, and at 120
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def command(backend: str, model_dir: str, *more: str) -> list[str]:
    train = [sys.executable, "-m", "keras_transformer", "train", "--backend", backend, "--model-dir", model_dir]
    return [*train, *FLAGS, *more]


def latest_step(model_dir: str) -> int:
    latest = kt.ModelDir(model_dir).latest_checkpoint()
    return checkpoint_step(latest) if latest else 0


def run_until(argv: list[str], env: dict, ready, number: int) -> tuple[int, str]:
    """Start `argv`, send it signal `number` once `ready()`; (its exit status, its stderr)."""
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while not ready():
            assert process.poll() is None and time.monotonic() < deadline, process.stderr.read().decode()[-3000:]
            time.sleep(0.05)
        process.send_signal(number)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    return process.returncode, stderr.decode()


def decode_there(backend: str, model_dir: str) -> dict:
    """tests/backend_parity.py's greedy decoding by full forward passes with the model dir, on `backend`."""
    env = {**ENV, "KERAS_BACKEND": backend}
    script = [sys.executable, backend_parity.__file__, model_dir, "--model-dir"]
    result = subprocess.run(script, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.splitlines()[-1])


def assert_translated_alike(model_dir: str, decoded: dict, capsys) -> None:
    """`translate` (greedy, on TensorFlow) prints the text of the tokens decoded on the other backend,
    and TensorFlow's cached greedy search gives those very tokens."""
    model, tokenizer, values = kt.load_model(model_dir)
    assert values["checkpoint_path"] == decoded["checkpoint"]
    ids = tokenizer.source_ids(backend_parity.SOURCES, model.config.max_length)[0]
    result = kt.greedy_search(model, ids, max_decode_length=backend_parity.DECODE_LENGTH)
    tensorflow = [[int(t) for t in row if t != 0] for row in result.ids.numpy()[:, 0]]
    assert tensorflow == decoded["greedy"]
    assert all(len(set(tokens)) >= 3 for tokens in decoded["greedy"])  # varied outputs, not one token repeated
    greedy = ["--beam-size", "1", "--alpha", "0", "--max-decode-length", str(backend_parity.DECODE_LENGTH)]
    capsys.readouterr()
    assert main(["translate", "--model-dir", model_dir, "--no-split", *greedy, *backend_parity.SOURCES]) == 0
    width = max(len(tokens) for tokens in decoded["greedy"])
    padded = [tokens + [0] * (width - len(tokens)) for tokens in decoded["greedy"]]
    expected = [text.decode() for text in tokenizer.detokenize(padded).numpy()]
    assert capsys.readouterr().out.splitlines() == expected


def best_bleu(model_dir: str) -> dict | None:
    """best/bleu.json, once written whole."""
    try:
        with open(os.path.join(model_dir, "best", "bleu.json")) as f:
            return json.load(f)
    except (FileNotFoundError, ValueError):
        return None


def logged_bleus(stderr: str) -> list[tuple[int, float]]:
    """(step, BLEU) of each `BleuCallback` line."""
    found = []
    for line in stderr.splitlines():
        if ": validation BLEU " in line:
            step, rest = line.split(": validation BLEU ")
            found.append((int(step.split()[-1]), float(rest.split()[0])))
    return found


@dataclasses.dataclass
class JaxRun:
    model_dir: str
    temporary: pathlib.Path  # TMPDIR of the runs: the BLEU's TensorFlow processes put their files there
    statuses: list[int]  # of the 3 runs: stopped by SIGTERM, killed, resumed to the end
    stderrs: list[str]
    steps: list[int]  # the latest checkpoint's step after each
    stopped_files: list[str]  # checkpoints/ after the first run (the next ones prune it)


@pytest.fixture(scope="module")
def jax_run(tmp_path_factory) -> JaxRun:
    """`train --backend jax` with the validation BLEU every epoch (40 steps of a run, and at its last
    step): stopped by SIGTERM once its first checkpoint is written, resumed and killed with `kill -9`
    once its first BLEU is logged (a checkpoint newer than best/bleu.json's step written), resumed to
    step 120 with `--build-shortlist`; the tests below read its model dir."""
    root = tmp_path_factory.mktemp("jax")
    model_dir, temporary = str(root / "model"), root / "tmp"
    temporary.mkdir()
    env = {**ENV, "TMPDIR": str(temporary)}
    argv = command("jax", model_dir, *BLEU)
    run = JaxRun(model_dir, temporary, [], [], [], [])
    bleu_logged = lambda: (best := best_bleu(model_dir)) is not None and latest_step(model_dir) > best["step"]
    for ready, number in ((lambda: latest_step(model_dir) > 0, signal.SIGTERM), (bleu_logged, signal.SIGKILL)):
        status, stderr = run_until(argv, env, ready, number)
        run.statuses.append(status)
        run.stderrs.append(stderr)
        run.steps.append(latest_step(model_dir))
        run.stopped_files = run.stopped_files or sorted(os.listdir(os.path.join(model_dir, "checkpoints")))
    result = subprocess.run([*argv, "--build-shortlist"], capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    run.statuses.append(result.returncode)
    run.stderrs.append(result.stderr)
    run.steps.append(latest_step(model_dir))
    return run


@pytest.mark.slow
@installed("jax")
def test_jax_training_stops_survives_kill_9_resumes_and_translates_with_tensorflow(jax_run, capsys):
    stopped, killed_at, last = jax_run.steps
    assert jax_run.statuses == [128 + signal.SIGTERM, -signal.SIGKILL, 0], jax_run.stderrs[0][-3000:]
    assert f"interrupted by SIGTERM: stopped at step {stopped}; checkpoint" in jax_run.stderrs[0]
    assert f"ckpt-{stopped}.weights.h5" in jax_run.stopped_files
    assert f"resumed from step {stopped}" in jax_run.stderrs[1]
    assert 0 < stopped < killed_at < last == MAX_STEPS
    assert f"resumed from step {killed_at}" in jax_run.stderrs[2]
    assert f"trained to step {MAX_STEPS}" in jax_run.stderrs[2]
    assert os.path.exists(os.path.join(jax_run.model_dir, "shortlist.npz"))  # --build-shortlist, on JAX too
    assert_translated_alike(jax_run.model_dir, decode_there("jax", jax_run.model_dir), capsys)


@pytest.mark.slow
@installed("jax")
def test_the_validation_bleu_on_jax_is_the_bleu_evaluate_gives_the_best_checkpoint(jax_run, capsys):
    """Every epoch's BLEU is logged, by the killed run too and after the resume (a resumed run's
    epochs count 40 steps from its first); best/ holds the weights of the best BLEU (a Keras
    checkpoint), whose `evaluate` on the same validation sentences with the same beam search gives
    that BLEU; the TensorFlow processes that translated removed their files, the killed run's
    included (its stdin closed)."""
    stopped, killed_at, _ = jax_run.steps
    killed, resumed = logged_bleus(jax_run.stderrs[1]), logged_bleus(jax_run.stderrs[2])
    assert [step for step, _ in killed] == [stopped + 40]
    assert [step for step, _ in resumed] == [*range(killed_at + 40, MAX_STEPS, 40), MAX_STEPS]
    best = best_bleu(jax_run.model_dir)
    scores = killed + resumed
    assert best == {"step": max(scores, key=lambda score: (score[1], -score[0]))[0], "bleu": max(b for _, b in scores)}
    assert best["bleu"] > 0
    assert os.path.isfile(os.path.join(jax_run.model_dir, "best", f"ckpt-{best['step']}.weights.h5"))
    capsys.readouterr()
    # The run's BLEU searched the full vocabulary; the shortlist.npz it built at its end would not.
    held_out = ["--split", "validation", "--limit", str(BLEU_SENTENCES), "--show", "0", "--no-shortlist"]
    assert main(["evaluate", "--model-dir", jax_run.model_dir, "--checkpoint", "best", *held_out]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["bleu"] == best["bleu"]
    left = lambda: [name for name in os.listdir(jax_run.temporary) if name.startswith(TEMPORARY_PREFIX)]
    deadline = time.monotonic() + 60
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert left() == []


@pytest.mark.slow
@installed("jax")
def test_the_tensorflow_tools_average_fine_tune_and_export_a_jax_model_dir(jax_run, tmp_path, capsys, monkeypatch):
    """`average` writes the mean of the last 3 Keras checkpoints (read by Keras' own `load_weights`);
    `train --init-from` on TensorFlow starts from the JAX model's weights (its logits at step 0);
    `export` writes SavedModels that pass `export --check` and TFLite models that translate as the
    checkpoint does (export/'s LiteRT client), and CTranslate2's greedy search on its export gives the
    checkpoint's greedy tokens."""
    model_dir = jax_run.model_dir
    model, tokenizer, _ = kt.load_model(model_dir)

    assert main(["average", "--model-dir", model_dir, "--last", "3"]) == 0
    reference = kt.Transformer(model.config)
    reference.build()
    saved = []
    for path in list(reversed(checkpoint_paths(os.path.join(model_dir, "checkpoints"))))[-3:]:
        reference.load_weights(path + ".weights.h5")
        saved.append(reference.get_weights())
    averaged = kt.load_model(model_dir, "averaged")[0].get_weights()
    for got, *values in zip(averaged, *saved):
        np.testing.assert_allclose(got, np.mean(values, axis=0), atol=1e-6)

    ids = (np.array([[5, 6, 7, 2]], np.int32), np.array([[1, 8, 9, 10]], np.int32))
    at_step_0 = []

    def resume(directory, child, *args, **kwargs):  # the run's model, restored, before its first step
        manager = resume.original(directory, child, *args, **kwargs)
        at_step_0.append(keras.ops.convert_to_numpy(child(ids, training=False)))
        return manager

    resume.original = trainer._resume
    monkeypatch.setattr(trainer, "_resume", resume)
    child = str(tmp_path / "child")
    flags = ["--init-from", model_dir, "--data", str(FIXTURE), "--max-steps", "2", "--steps-per-epoch", "2"]
    assert main(["train", "--backend", "tensorflow", "--model-dir", child, *flags, "--batch-tokens", "256"]) == 0
    latest = os.path.join(model_dir, "checkpoints", f"ckpt-{MAX_STEPS}")
    assert f"fine-tuning from {latest} (step {MAX_STEPS}) with its tokenizer" in capsys.readouterr().err
    np.testing.assert_allclose(at_step_0[0], model(ids, training=False).numpy(), atol=1e-6)
    assert latest_step(child) == 2

    out = str(tmp_path / "export")
    assert main(["export", "--model-dir", model_dir, "--out", out]) == 0
    assert main(["export", "--check", out, "--sample", "4"]) == 0
    sentences = read_pairs(str(FIXTURE), "validation")[0][:4] + backend_parity.SOURCES
    translated = [text for text, _ in kit_module("litert_client").translate(sentences, out)]
    assert translated == kt.Translator(model, tokenizer).translate(sentences)

    ours, theirs = greedy_translations(CTranslate2Export(model, tokenizer, tmp_path / "ctranslate2"), sentences)
    assert theirs == ours
    assert len({token for hypothesis in theirs for token in hypothesis}) > 5  # not one token repeated


@pytest.mark.slow
@installed("torch")
def test_a_model_trained_on_torch_with_a_bleu_translates_alike_with_the_tensorflow_tools(tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    bleu = ["--bleu-every-epochs", "3", "--bleu-sentences", str(BLEU_SENTENCES)]  # once, at step 120
    result = run_cli("train", "--backend", "torch", "--model-dir", model_dir, *FLAGS, "--checkpoint-every", "0", *bleu)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"trained to step {MAX_STEPS}" in result.stderr
    [(step, bleu_score)] = logged_bleus(result.stderr)
    assert step == MAX_STEPS
    with open(os.path.join(model_dir, "best", "bleu.json")) as f:
        assert json.load(f) == {"step": MAX_STEPS, "bleu": bleu_score}
    assert_translated_alike(model_dir, decode_there("torch", model_dir), capsys)


# On 2 CPU devices (XLA_FLAGS), `kt.train` with the strategy auto, then resumed with mirrored: the
# arrays Keras hands the jitted step (recorded where its JAX trainer splits them: a private module,
# no public hook shows them) and the model's variables.
DATA_PARALLEL = """
import json, sys
from keras.src.backend.jax import distribution_lib
import keras_transformer as kt

splits = []  # per array fed to a step: [its rows, [[device, rows] of each shard]]
distribute = distribution_lib.distribute_data_input

def recorded(batch, layout, batch_dim_name):
    array = distribute(batch, layout, batch_dim_name)
    shards = sorted([shard.device.id, shard.data.shape[0]] for shard in array.addressable_shards)
    splits.append([array.shape[0], shards])
    return array

distribution_lib.distribute_data_input = recorded
config = kt.TransformerConfig.tiny(vocab_size=300, max_length=24, dropout=0.0)
log = []
for strategy, steps in (("auto", 4), ("mirrored", 8)):
    training = kt.TrainingConfig(batch_tokens=256, warmup_steps=30, max_steps=steps, steps_per_epoch=4)
    model = kt.train(sys.argv[1], config, training, sys.argv[2], strategy=strategy, verbose=0, log=log.append)
devices = sorted({len(weight.value.sharding.device_set) for weight in model.weights})
print(json.dumps({"log": log, "splits": splits, "devices": devices}))
"""


@pytest.mark.slow
@installed("jax")
def test_jax_trains_on_two_devices_with_keras_data_parallel_and_resumes(tmp_path):
    model_dir = str(tmp_path / "model")
    env = {
        **ENV,
        "KERAS_BACKEND": "jax",
        "JAX_PLATFORMS": "cpu",
        "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
    }
    argv = [sys.executable, "-c", DATA_PARALLEL, model_dir, str(FIXTURE)]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-4000:]
    run = json.loads(result.stdout.splitlines()[-1])
    assert run["log"].count("training on jax, 2 devices with keras.distribution.DataParallel") == 2
    assert "resumed from step 4" in run["log"] and any(line.startswith("trained to step 8") for line in run["log"])
    assert os.path.isfile(os.path.join(model_dir, "checkpoints", "ckpt-8.weights.h5"))
    assert run["devices"] == [2]  # every variable on both devices
    assert len(run["splits"]) >= 3 * 8  # source, target in and target out of 8 steps at least
    for rows, shards in run["splits"]:
        assert rows % 2 == 0 and shards == [[0, rows // 2], [1, rows // 2]]


# On JAX, 3 steps of `fit`; after the first, a callback sets the step budget to 1 step, so that the
# schedule's cool-down makes the learning rate 0: the weights must not move after it.
BUDGET_CUT = """
import json, numpy as np, keras, keras_transformer as kt
from keras_transformer.training.optimization import compile_model
from keras_transformer.training.schedules import StepBudgetSchedule, trained_steps
config = kt.TransformerConfig.tiny(vocab_size=50, num_layers=1, dropout=0.0)
schedule = StepBudgetSchedule(config.d_model, total_steps=1000)
model = compile_model(kt.Transformer(config), kt.TrainingConfig(), schedule)

class Cut(keras.callbacks.Callback):
    moved = []
    def on_train_batch_end(self, batch, logs=None):
        trained_steps(self.model)  # as TimeBudget does: the state of the step just run
        weight = self.model.embedding.embeddings.numpy().copy()
        if batch:
            self.moved.append(float(np.abs(weight - self.last).max()))
        self.last = weight
        schedule.total_steps.assign(1.0)

ids = np.random.default_rng(0).integers(3, 50, size=(3, 6, 6)).astype("int32")
model.fit((ids[0], ids[1]), ids[2], batch_size=2, epochs=1, verbose=0, callbacks=[Cut()])
print(json.dumps(Cut.moved))
"""


@pytest.mark.slow
@installed("jax")
def test_a_step_budget_refitted_during_training_reaches_the_jitted_jax_step():
    """The time budget re-fits `StepBudgetSchedule.total_steps` while `fit` runs; JAX's jitted step
    saw the value of its first trace until the budget became one of the optimizer's variables."""
    env = {**ENV, "KERAS_BACKEND": "jax"}
    result = subprocess.run([sys.executable, "-c", BUDGET_CUT], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert json.loads(result.stdout.splitlines()[-1]) == [0.0, 0.0]


# On JAX or PyTorch, in one process: conftest's TensorFlow-trained model dir fine-tuned into a new
# one (`init_from`) with a moving average of the weights and a time budget of `BUDGET_S` (the first
# step, which JAX compiles, included; epochs of 1000 steps: none ends before the budget does);
# resumed with early stopping (patience 2) on validation losses scripted per evaluation, every 2
# steps; then a new model dir with gradient accumulation (2 micro-batches a step) and mixed
# precision. `Recorded` keeps the model's weights as the first run begins and, after every step, the
# moving average computed by hand (float64).
WORKFLOWS = """
import json, os, sys
import keras, numpy as np
import keras_transformer as kt

parent, root, data, backend, budget_s = sys.argv[1:6]
DECAY = 0.5
assert keras.backend.backend() == backend


class Recorded(keras.callbacks.Callback):
    start = average = None
    micro_batches = 0

    def on_train_begin(self, logs=None):
        if self.start is None:
            self.start = self.model.get_weights()

    def on_train_batch_end(self, batch, logs=None):
        self.micro_batches += 1
        weights = [np.asarray(v.numpy(), np.float64) for v in self.model.trainable_variables]
        if self.average is None:  # average_1 = w_1; average_t = D average_{t-1} + (1 - D) w_t
            self.average = weights
        else:
            self.average = [DECAY * a + (1 - DECAY) * w for a, w in zip(self.average, weights)]


class ScriptedLosses(keras.callbacks.Callback):
    scores = [5.0, 4.0, 4.5, 4.6]  # the 4th evaluation is the 2nd without a better loss; then 1.0

    def on_epoch_end(self, epoch, logs=None):
        logs["val_loss"] = self.scores.pop(0) if self.scores else 1.0


def trained_to(model_dir, training, callbacks, config=kt.TransformerConfig.tiny(vocab_size=300, dropout=0.0)):
    log = []
    model = kt.train(model_dir, config, training, data, verbose=0, callbacks=callbacks, log=log.append)
    return model, log


child, recorded = os.path.join(root, "child"), Recorded()
fine_tuning = dict(batch_tokens=256, warmup_steps=30, max_steps=1000, ema_decay=DECAY, init_from=parent)
budgeted = kt.TrainingConfig(**fine_tuning, steps_per_epoch=1000, time_budget_s=float(budget_s))
_, budget_log = trained_to(child, budgeted, [recorded])
after_budget = sorted(os.listdir(os.path.join(child, "checkpoints")))
np.savez(os.path.join(root, "start.npz"), *recorded.start)
np.savez(os.path.join(root, "ema_after_budget.npz"), *recorded.average)
stopping = kt.TrainingConfig(**fine_tuning, steps_per_epoch=2, early_stopping=2)
model, stopping_log = trained_to(child, stopping, [recorded, ScriptedLosses()])
np.savez(os.path.join(root, "ema.npz"), *recorded.average)
np.savez(os.path.join(root, "returned.npz"), *model.get_weights())

counted = Recorded()
accumulating = kt.TrainingConfig(
    batch_tokens=256, warmup_steps=30, max_steps=2, steps_per_epoch=2, grad_accumulation=2, mixed_precision=True
)
config = kt.TransformerConfig.tiny(vocab_size=300, max_length=24, dropout=0.0)
model, accumulation_log = trained_to(os.path.join(root, "accumulated"), accumulating, [counted], config)
print(json.dumps({
    "logs": [budget_log, stopping_log, accumulation_log],
    "checkpoints_after_budget": after_budget,
    "micro_batches": counted.micro_batches,
    "compute_dtype": model.encoder.compute_dtype,
}))
"""


def npz(path) -> list:
    with np.load(path) as arrays:
        return [arrays[f"arr_{i}"] for i in range(len(arrays.files))]


def assert_weights(model, expected) -> None:
    for variable, value in zip(model.trainable_variables, expected, strict=True):
        np.testing.assert_allclose(variable.numpy(), value, rtol=1e-5, atol=1e-6)


def line_with(lines: list[str], start: str) -> str:
    [line] = [line for line in lines if line.startswith(start)]
    return line


BUDGET_S = 10


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend", [pytest.param("jax", marks=installed("jax")), pytest.param("torch", marks=installed("torch"))]
)
def test_a_tensorflow_parent_fine_tunes_within_a_time_budget_with_ema_stops_early_and_accumulates(
    trained, tmp_path, backend
):
    """The fine-tuning run starts from the TensorFlow parent's weights (converted by a TensorFlow
    process), stops when its time budget is used up, with its last step checkpointed; its ema/ holds
    the moving average of the weights, which the resumed run goes on averaging, while checkpoints/
    and the model `train` returns hold the raw weights, as on TensorFlow (tests/test_workflows.py);
    the resumed run stops at the 4th evaluation, the 2nd without a better loss, best/ holding the
    2nd's weights. A run with 2 micro-batches a step and mixed precision takes 4 micro-batches for 2
    steps in bfloat16 and writes float32 checkpoints that the TensorFlow tools read."""
    root = str(tmp_path)
    env = {**ENV, "KERAS_BACKEND": backend}
    argv = [sys.executable, "-c", WORKFLOWS, trained.model_dir, root, str(FIXTURE), backend, str(BUDGET_S)]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-4000:]
    run = json.loads(result.stdout.splitlines()[-1])
    budget_log, stopping_log, accumulation_log = run["logs"]
    child = os.path.join(root, "child")

    parent_checkpoint = kt.ModelDir(trained.model_dir).latest_checkpoint()
    assert f"fine-tuning from {parent_checkpoint} (step 30) with its tokenizer" in budget_log
    for got, expected in zip(
        npz(tmp_path / "start.npz"), kt.load_model(trained.model_dir)[0].get_weights(), strict=True
    ):
        np.testing.assert_array_equal(got, expected)

    stopped = int(line_with(budget_log, f"time budget of {BUDGET_S}s used up at step ").split()[-1])
    assert 0 < stopped < 1000
    assert line_with(budget_log, "trained to step ") == (
        f"trained to step {stopped}; checkpoint {os.path.join(child, 'checkpoints', f'ckpt-{stopped}')}"
    )
    assert f"ckpt-{stopped}.weights.h5" in run["checkpoints_after_budget"]

    assert f"resumed from step {stopped}" in stopping_log
    assert (
        f"early stopping at step {stopped + 8}: no better val_loss in 2 evaluation(s) (best 4 at step {stopped + 4})"
        in stopping_log
    )
    assert latest_step(child) == stopped + 8
    assert os.path.isfile(os.path.join(child, "best", f"ckpt-{stopped + 4}.weights.h5"))
    ema_at_budget = kt.load_model(child, os.path.join(child, "ema", f"ckpt-{stopped}"))[0]  # kept: 5 in all
    assert_weights(ema_at_budget, npz(tmp_path / "ema_after_budget.npz"))
    ema, latest = kt.load_model(child, "ema")[0], kt.load_model(child)[0]
    assert_weights(ema, npz(tmp_path / "ema.npz"))
    assert_weights(latest, npz(tmp_path / "returned.npz"))  # the raw weights
    assert not np.allclose(ema.trainable_variables[0].numpy(), latest.trainable_variables[0].numpy())

    accumulated = os.path.join(root, "accumulated")
    assert line_with(accumulation_log, "trained to step ").startswith("trained to step 2; ")
    assert run["micro_batches"] == 4 and run["compute_dtype"] == "bfloat16"
    model = kt.load_model(accumulated)[0]
    assert model.encoder.compute_dtype == "float32"
    assert all(np.isfinite(weight).all() for weight in model.get_weights())
