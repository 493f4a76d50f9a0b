"""Ending a run early and cleanly: on a wall-clock budget (stop when time is up, and fit the
learning-rate schedule to the number of steps that the budget will buy, measured, not guessed),
or on a preemption signal (SIGTERM, SIGINT)."""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

import keras

from keras_transformer.training.schedules import trained_steps


class TimeBudget(keras.callbacks.Callback):
    """Stops `fit` so that it ends about `seconds` of wall-clock time after training began, the
    end-of-run work included.

    It measures the work at every epoch end (validation, checkpoints, BLEU: from the epoch's last
    step to the next epoch's start) and stops as soon as the time left would not cover it. Once
    stopped, Keras' end-of-run validation is cut to one batch (`stop_evaluating`).

    It estimates the steps the budget buys as `steps so far + remaining time / seconds per step`,
    first after `calibration_steps` steps (the first step, which traces the graph, excluded), and
    tells `on_estimate` that first estimate. With a `schedule` (a `StepBudgetSchedule`), it sets the
    schedule's step budget to it, and again at every epoch end, when the measured time per step
    includes validation and checkpoints.
    """

    def __init__(
        self,
        seconds: float,
        schedule=None,
        calibration_steps: int = 20,
        log: Callable[[str], None] = print,
        clock=time.monotonic,
        on_estimate: Callable[[float], None] | None = None,
    ):
        super().__init__()
        self.seconds = seconds
        self.schedule = schedule
        self.on_estimate = on_estimate
        self.calibration_steps = calibration_steps
        self.log = log
        self.clock = clock

    def on_train_begin(self, logs=None):
        self.start = self.clock()
        self.start_step = trained_steps(self.model)
        self.timed_from = None  # (time, step) after the first, tracing, step
        self.calibrated = False
        self.epoch_end_s = 0.0  # the last epoch end's work, in seconds
        self.epoch_end_from = None
        self.stopped = False

    @property
    def estimating(self) -> bool:
        return self.schedule is not None or self.on_estimate is not None

    def _estimate(self, now: float, step: int, since: tuple[float, int]) -> None:
        seconds_per_step = (now - since[0]) / max(step - since[1], 1)
        remaining = max(self.seconds - (now - self.start), 0.0)
        total = step + remaining / seconds_per_step
        if self.schedule is not None:
            self.schedule.total_steps.assign(total)
        if not self.calibrated:
            self.log(
                f"time budget {self.seconds:.0f}s: {seconds_per_step:.2f}s per step, about {total:.0f} steps in all"
            )
            self.calibrated = True
            if self.on_estimate is not None:
                self.on_estimate(total)

    def on_epoch_begin(self, epoch, logs=None):
        if self.epoch_end_from is not None:
            self.epoch_end_s = self.clock() - self.epoch_end_from
            self.epoch_end_from = None

    def on_train_batch_end(self, batch, logs=None):
        now, step = self.clock(), trained_steps(self.model)
        if self.timed_from is None:
            self.timed_from = (now, step)
        elif self.estimating and not self.calibrated and step - self.timed_from[1] >= self.calibration_steps:
            self._estimate(now, step, self.timed_from)
        if now - self.start + self.epoch_end_s >= self.seconds:
            keeping = f", keeping {self.epoch_end_s:.0f}s for the run's end" if self.epoch_end_s >= 1 else ""
            self.log(f"time budget of {self.seconds:.0f}s used up at step {step}{keeping}")
            self.model.stop_training = self.stopped = True
        elif batch + 1 == self.params.get("steps"):
            self.epoch_end_from = now

    def on_test_begin(self, logs=None):
        if self.stopped:
            self.model.stop_evaluating = True  # Keras' validation after a stop: one batch, not the whole set

    def on_epoch_end(self, epoch, logs=None):
        if self.schedule is not None and self.timed_from is not None and self.calibrated:
            self._estimate(self.clock(), trained_steps(self.model), self.timed_from)


class Interrupted(Exception):
    """A run ended by a signal (`StopOnSignal`); `signal_number` says which."""

    def __init__(self, signal_number: int):
        super().__init__(f"interrupted by {signal.Signals(signal_number).name}")
        self.signal_number = signal_number


class StopOnSignal(keras.callbacks.Callback):
    """Ends `fit` after the step in flight when the process receives SIGTERM (what preemptible
    VMs, Kubernetes and Colab send) or SIGINT (Ctrl-C): it raises `Interrupted` at the next batch
    end, training or validation, so `fit` skips its end-of-run work and the caller checkpoints.
    A second signal gets the default action (ends the process at once).

    The handlers are installed by `with StopOnSignal(): ...` (main thread only; elsewhere the
    signals keep their handlers) and restored when the block ends; `check()` raises `Interrupted`
    between steps of other work.
    """

    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __init__(self):
        super().__init__()
        self.received = None
        self._previous = {}

    def __enter__(self) -> StopOnSignal:
        if threading.current_thread() is threading.main_thread():
            self._previous = {number: signal.signal(number, self._handle) for number in self.SIGNALS}
        return self

    def __exit__(self, *exc_info) -> None:
        for number, handler in self._previous.items():
            signal.signal(number, handler)
        self._previous = {}

    def _handle(self, number, frame) -> None:
        self.received = number
        signal.signal(number, self._previous[number])  # a second signal: the default action

    def check(self) -> None:
        """Raise `Interrupted` if a signal came."""
        if self.received is not None:
            raise Interrupted(self.received)

    def on_train_batch_end(self, batch, logs=None):
        self.check()

    def on_test_batch_end(self, batch, logs=None):
        self.check()
