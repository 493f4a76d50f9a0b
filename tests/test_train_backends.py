"""`keras-transformer train --backend jax|torch` (issue 38): a run on JAX stops cleanly on SIGTERM,
survives `kill -9`, resumes with the same command, and hands its model dir to the TensorFlow tools,
whose `translate` gives the greedy tokens of JAX's own forward passes and whose `export` and
`export --check` pass; a run on PyTorch translates alike. Each backend runs in processes of its own
(Keras fixes its backend when imported); tests/backend_parity.py decodes there.

Slow: every JAX or PyTorch process imports TensorFlow too (the `tf.data` pipeline) and JAX compiles
its steps (~10-20 CPU-s a process)."""

import json
import os
import signal
import subprocess
import sys
import time

import backend_parity
import pytest
from conftest import FIXTURE, run_cli
from test_backends import installed

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.model_dir import checkpoint_step

TIMEOUT_S = 600
MAX_STEPS = 120
# The tiny model, without dropout, on the fixture's short pairs: after 120 steps its greedy outputs
# vary (memorised verses), so that equal tokens on two backends say something.
FLAGS = ["--data", str(FIXTURE), "--preset", "tiny", "--vocab-size", "300", "--batch-tokens", "256"]
FLAGS += ["--max-length", "24", "--dropout", "0", "--warmup-steps", "30", "--max-steps", str(MAX_STEPS)]
FLAGS += ["--steps-per-epoch", "40", "--checkpoint-every", "10"]
ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def command(backend: str, model_dir: str) -> list[str]:
    return [sys.executable, "-m", "keras_transformer", "train", "--backend", backend, "--model-dir", model_dir, *FLAGS]


def latest_step(model_dir: str) -> int:
    latest = kt.ModelDir(model_dir).latest_checkpoint()
    return checkpoint_step(latest) if latest else 0


def run_until(model_dir: str, backend: str, step: int, number: int) -> tuple[int, str]:
    """Start `train`, send it signal `number` once a checkpoint past `step` is on disk; (its exit
    status, its stderr)."""
    process = subprocess.Popen(command(backend, model_dir), env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + TIMEOUT_S
        while latest_step(model_dir) <= step:
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
    assert main(["translate", "--model-dir", model_dir, *greedy, *backend_parity.SOURCES]) == 0
    width = max(len(tokens) for tokens in decoded["greedy"])
    padded = [tokens + [0] * (width - len(tokens)) for tokens in decoded["greedy"]]
    expected = [text.decode() for text in tokenizer.detokenize(padded).numpy()]
    assert capsys.readouterr().out.splitlines() == expected


@pytest.mark.slow
@installed("jax")
def test_jax_training_stops_survives_kill_9_resumes_and_ships_through_tensorflow(tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    status, stderr = run_until(model_dir, "jax", 0, signal.SIGTERM)
    assert status == 128 + signal.SIGTERM, stderr[-3000:]
    stopped = latest_step(model_dir)
    assert f"interrupted by SIGTERM: stopped at step {stopped}; checkpoint" in stderr
    assert os.path.isfile(os.path.join(model_dir, "checkpoints", f"ckpt-{stopped}.weights.h5"))

    status, stderr = run_until(model_dir, "jax", stopped, signal.SIGKILL)
    assert status == -signal.SIGKILL and f"resumed from step {stopped}" in stderr
    killed_at = latest_step(model_dir)
    assert stopped < killed_at < MAX_STEPS

    result = subprocess.run(command("jax", model_dir), capture_output=True, text=True, env=ENV, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"resumed from step {killed_at}" in result.stderr and f"trained to step {MAX_STEPS}" in result.stderr

    assert_translated_alike(model_dir, decode_there("jax", model_dir), capsys)
    out = str(tmp_path / "export")
    assert main(["export", "--model-dir", model_dir, "--out", out, "--no-tflite"]) == 0
    assert main(["export", "--check", out, "--sample", "5"]) == 0


@pytest.mark.slow
@installed("torch")
def test_a_model_trained_on_torch_translates_alike_with_the_tensorflow_tools(tmp_path, capsys):
    model_dir = str(tmp_path / "model")
    result = run_cli("train", "--backend", "torch", "--model-dir", model_dir, *FLAGS, "--checkpoint-every", "0")
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"trained to step {MAX_STEPS}" in result.stderr
    assert_translated_alike(model_dir, decode_there("torch", model_dir), capsys)


@pytest.mark.slow
@installed("jax")
def test_jax_refuses_the_validation_bleu_at_the_start_in_one_line(tmp_path):
    model_dir = str(tmp_path / "model")
    result = run_cli("train", "--backend", "jax", "--model-dir", model_dir, *FLAGS, "--bleu-every-epochs", "1")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "keras-transformer: error: --bleu-every-epochs translates with the TensorFlow search, which a jax model "
        "cannot run: drop it (--early-stopping then watches the validation loss), or train with --backend tensorflow"
    ]
    assert not os.path.exists(model_dir)


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
