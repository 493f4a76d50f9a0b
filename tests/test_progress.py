"""Training progress against time or steps: plain lines in a file, one line in place on a terminal."""

import io
import re

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TrainingConfig, Transformer, TransformerConfig
from keras_transformer.training.callbacks.progress import Progress, clock_time
from keras_transformer.training.optimization import compile_model

STEPS = 6
TARGET_TOKENS = 2 * 5 + 2 * 3  # per batch: two rows of 5 non-pad targets, two of 3


class Tick(keras.callbacks.Callback):
    """Advances a fake clock by 2 seconds per step (it runs before Progress)."""

    def __init__(self, now):
        super().__init__()
        self.now = now

    def on_train_batch_end(self, batch, logs=None):
        self.now[0] += 2.0


@pytest.fixture(scope="module")
def model():
    """One model for every test: `fit` traces its step once."""
    return compile_model(Transformer(TransformerConfig.tiny(vocab_size=50, num_layers=1)), TrainingConfig())


@pytest.fixture
def fit(model):
    ids = np.array([[5, 6, 7, 8, 2], [5, 6, 7, 8, 2], [5, 6, 2, 0, 0], [5, 6, 2, 0, 0]], np.int32)
    batches = tf.data.Dataset.from_tensors(((ids, ids), ids)).repeat()

    def fit(progress, now, epochs=1, verbose="auto"):
        model.optimizer.iterations.assign(0)
        callbacks = [Tick(now), progress]
        steps = STEPS // epochs
        model.fit(batches, epochs=epochs, steps_per_epoch=steps, callbacks=callbacks, verbose=verbose, shuffle=False)

    return fit


def test_clock_time():
    assert [clock_time(s) for s in (7, 123, 3723, 7200)] == ["0:07", "2:03", "1:02:03", "2:00:00"]


def test_a_time_budget_run_reports_time_left_one_plain_line_per_interval(fit):
    now, out = [100.0], io.StringIO()
    progress = Progress(10_000, time_budget_s=360, interval_s=4.0, stream=out, terminal=False, clock=lambda: now[0])
    fit(progress, now, epochs=2)
    text = out.getvalue()
    assert "Epoch" not in text and not re.search(r"[\x00-\x09\x0b-\x1f]", text)  # no bars, escapes or \r
    lines = text.splitlines()
    # Every 4 seconds (2 steps), and at each epoch's end (steps 3 and 6), which restarts the interval.
    assert [line.split(" | ")[0] for line in lines] == ["step 1", "step 3", "step 5", "step 6"]
    assert lines[0].split(" | ")[1] == "0:02 of 6:00, 5:58 left"
    assert lines[3].split(" | ")[1] == "0:12 of 6:00, 5:48 left"
    assert f"| {TARGET_TOKENS / 2.0:,.0f} target tokens/s" in lines[2]  # 16 tokens per 2-second step
    assert re.search(r"\| loss \d+\.\d{3} \| accuracy \d\.\d{3} \|", lines[0])
    assert "val_loss" not in lines[0] and "val_loss" not in lines[3]  # no validation data here


def test_a_step_budget_run_reports_steps_and_the_estimated_time_left(fit):
    now, out = [0.0], io.StringIO()
    fit(Progress(100, interval_s=0.0, stream=out, terminal=False, clock=lambda: now[0]), now)
    lines = out.getvalue().splitlines()
    assert lines[1].startswith("step 2/100 | 0:04, ~3:16 left | loss ")  # 98 steps at 2 s each
    assert len(lines) == STEPS  # every step, the last one at the epoch's end


def test_on_a_terminal_one_line_is_rewritten_in_place(fit):
    now, out = [0.0], io.StringIO()
    fit(Progress(100, stream=out, terminal=True, clock=lambda: now[0]), now)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("\n") and text.count("\r") == STEPS
    assert text.rsplit("\r", 1)[1].startswith("step 6/100 | 0:12")


class CutValidation(keras.callbacks.Callback):
    """Cuts every validation to one batch, as `TimeBudget` does after a stop."""

    def on_test_begin(self, logs=None):
        self.model.stop_evaluating = True


@pytest.mark.parametrize("cut", [False, True])
def test_a_validation_cut_short_is_not_reported(model, cut):
    ids = np.array([[5, 6, 7, 8, 2], [5, 6, 2, 0, 0]], np.int32)
    batches = tf.data.Dataset.from_tensors(((ids, ids), ids))
    now, out = [0.0], io.StringIO()
    callbacks = [Tick(now), *([CutValidation()] if cut else []), Progress(100, stream=out, terminal=False)]
    history = model.fit(batches.repeat(), validation_data=batches.repeat(3), steps_per_epoch=2, callbacks=callbacks)
    last = out.getvalue().splitlines()[-1]
    assert ("val_loss" in last, "val_loss" in history.history) == (not cut, not cut)


def test_verbose_0_reports_nothing(fit):
    now, out = [0.0], io.StringIO()
    fit(Progress(100, stream=out, terminal=False, clock=lambda: now[0]), now, verbose=0)
    assert out.getvalue() == ""
