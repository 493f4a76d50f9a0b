import os
import signal

import keras
import numpy as np
import pytest

from keras_transformer import TrainingConfig
from keras_transformer.cli.flags import parse_duration
from keras_transformer.cli.main import main
from keras_transformer.training.callbacks.budget import Interrupted, StopOnSignal, TimeBudget
from keras_transformer.training.schedules import StepBudgetSchedule, TransformerSchedule


@pytest.mark.parametrize(
    "text, seconds", [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("0.5h", 1800)]
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "30x", "0m", "m"])
def test_bad_durations(text):
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


def lr(schedule, step_num):
    return float(schedule(step_num - 1))  # Keras passes 0-based iterations


def test_step_budget_schedule_warms_up_and_cools_down_by_fractions():
    schedule = StepBudgetSchedule(d_model=256, total_steps=1000, warmup_fraction=0.1, cooldown_fraction=0.2)
    peak = 256**-0.5 * 4000**-0.5  # Eq. 3's peak with the paper's warmup_steps, reached at w = 0.1 * 1000
    assert lr(schedule, 1) == pytest.approx(peak / 100, rel=1e-5)  # linear warm-up over 100 steps
    assert lr(schedule, 50) == pytest.approx(peak / 2, rel=1e-5)
    assert lr(schedule, 100) == pytest.approx(peak, rel=1e-5)
    assert lr(schedule, 400) == pytest.approx(peak * (100 / 400) ** 0.5, rel=1e-5)  # Eq. 3's inverse square root
    assert lr(schedule, 900) == pytest.approx(0.5 * peak * (100 / 900) ** 0.5, rel=1e-4)  # half way down the cool-down
    assert lr(schedule, 1000) == 0.0
    schedule.total_steps.assign(2000.0)  # a new budget moves warm-up and cool-down with it
    assert lr(schedule, 200) == pytest.approx(peak, rel=1e-5)
    assert lr(schedule, 100) == pytest.approx(peak / 2, rel=1e-5)
    revived = StepBudgetSchedule.from_config(schedule.get_config())
    assert lr(revived, 1500) == pytest.approx(lr(schedule, 1500))


def test_the_peak_is_equation_3s_whatever_the_budget():
    for total_steps in (200, 1000, 50000):
        schedule = StepBudgetSchedule(
            d_model=512, total_steps=total_steps, warmup_fraction=0.1, scale=2.0, warmup_steps=4000
        )
        assert lr(schedule, total_steps // 10) == pytest.approx(2.0 * 512**-0.5 * 4000**-0.5, rel=1e-5)


def test_without_cool_down_it_is_equation_3():
    schedule = StepBudgetSchedule(d_model=512, total_steps=40000, warmup_fraction=0.1, cooldown_fraction=0.0)
    eq3 = TransformerSchedule(d_model=512, warmup_steps=4000)
    for step in (1, 4000, 39999):
        assert lr(schedule, step) == pytest.approx(lr(eq3, step), rel=1e-5)


def test_time_budget_stops_training_and_fits_the_schedule():
    schedule = StepBudgetSchedule(d_model=4, total_steps=1000, warmup_fraction=0.1)
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(schedule), "mse")
    messages = []
    clock = lambda: float(model.optimizer.iterations.numpy())
    budget = TimeBudget(30, schedule, calibration_steps=5, log=messages.append, clock=clock)
    x = np.ones((4, 2), "float32")
    model.fit(x, x[:, :1], batch_size=1, epochs=100, verbose=0, callbacks=[budget])
    assert int(model.optimizer.iterations.numpy()) == 30  # 30 s at 1 s per step
    assert float(schedule.total_steps.numpy()) == pytest.approx(30)  # re-fitted at every epoch end
    assert messages[0].startswith("time budget 30s: 1.00s per step, about 30 steps")
    assert messages[-1] == "time budget of 30s used up at step 30"


def test_budget_settings_are_validated(capsys):
    with pytest.raises(ValueError, match="warmup_fraction"):
        TrainingConfig(warmup_fraction=1.5)
    assert main(["train", "--model-dir", "unused", "--time-budget", "soon"]) == 2
    assert "invalid duration 'soon'" in capsys.readouterr().err


class FakeTime(keras.callbacks.Callback):
    """A clock that a training step advances by 1 s, the work at an epoch's end by `epoch_end_s`,
    and each validation batch by 0.5 s."""

    def __init__(self, epoch_end_s):
        super().__init__()
        self.now, self.epoch_end_s, self.validation_batches = 0.0, epoch_end_s, []

    def on_train_batch_begin(self, batch, logs=None):
        self.now += 1.0

    def on_test_begin(self, logs=None):
        self.validation_batches.append(0)

    def on_test_batch_end(self, batch, logs=None):
        self.now += 0.5
        self.validation_batches[-1] += 1

    def on_epoch_end(self, epoch, logs=None):
        self.now += self.epoch_end_s


def test_the_time_budget_keeps_time_for_the_end_of_the_run():
    """10-step epochs, 1 s a step, 5 s of epoch-end work plus 5 s of validation (10 batches):
    the first epoch ends at 20 s; a 32 s budget stops after step 12, at 22 s, keeping the 10 s
    that the first epoch's end took;
    Keras' end-of-run validation is cut to one batch."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    messages, fake = [], FakeTime(epoch_end_s=5.0)
    budget = TimeBudget(32, log=messages.append, clock=lambda: fake.now)
    x = np.ones((10, 2), "float32")
    validation = dict(validation_data=(x, x[:, :1]), validation_batch_size=1)
    model.fit(x, x[:, :1], batch_size=1, epochs=100, verbose=0, callbacks=[fake, budget], **validation)
    assert int(model.optimizer.iterations.numpy()) == 12
    assert messages == ["time budget of 32s used up at step 12, keeping 10s for the run's end"]
    assert fake.validation_batches == [10, 1]
    assert fake.now == 22 + 0.5 + 5  # within the budget (without the reserve and the cut: 32 + 5 + 5)


@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_fit_after_the_step_in_flight(number):
    class SignalAtStep3(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            if batch == 2:
                os.kill(os.getpid(), number)  # arrives during the third step

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(0.01), "mse")
    x = np.ones((10, 2), "float32")
    before = signal.getsignal(number)
    with pytest.raises(Interrupted, match=f"^interrupted by {number.name}$") as interrupted, StopOnSignal() as stop:
        model.fit(x, x[:, :1], batch_size=1, epochs=3, verbose=0, callbacks=[SignalAtStep3(), stop])
    assert interrupted.value.signal_number == number
    assert int(model.optimizer.iterations.numpy()) == 3
    assert signal.getsignal(number) is before  # restored
