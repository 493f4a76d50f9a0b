"""Training on a wall-clock budget: stop when time is up, and fit the learning-rate schedule
to the number of steps that the budget will buy (measured, not guessed)."""

from __future__ import annotations

import time
from collections.abc import Callable

import keras

from keras_transformer.schedules import trained_steps


class TimeBudget(keras.callbacks.Callback):
    """Stops `fit` once `seconds` of wall-clock time have passed since training began.

    With a `schedule` (a `StepBudgetSchedule`), it sets the schedule's step budget to
    `steps so far + remaining time / seconds per step`, first after `calibration_steps` steps
    (the first step, which traces the graph, excluded), then again at every epoch end, when the
    measured time per step includes validation and checkpoints.
    """

    def __init__(self, seconds: float, schedule=None, calibration_steps: int = 20, log: Callable[[str], None] = print, clock=time.monotonic):
        super().__init__()
        self.seconds = seconds
        self.schedule = schedule
        self.calibration_steps = calibration_steps
        self.log = log
        self.clock = clock

    def on_train_begin(self, logs=None):
        self.start = self.clock()
        self.start_step = trained_steps(self.model)
        self.timed_from = None  # (time, step) after the first, tracing, step
        self.calibrated = False

    def _fit_schedule(self, now: float, step: int, since: tuple[float, int]) -> None:
        seconds_per_step = (now - since[0]) / max(step - since[1], 1)
        remaining = max(self.seconds - (now - self.start), 0.0)
        total = step + remaining / seconds_per_step
        self.schedule.total_steps.assign(total)
        if not self.calibrated:
            self.log(f"time budget {self.seconds:.0f}s: {seconds_per_step:.2f}s per step, about {total:.0f} steps in all")
            self.calibrated = True

    def on_train_batch_end(self, batch, logs=None):
        now, step = self.clock(), trained_steps(self.model)
        if self.timed_from is None:
            self.timed_from = (now, step)
        elif self.schedule is not None and not self.calibrated and step - self.timed_from[1] >= self.calibration_steps:
            self._fit_schedule(now, step, self.timed_from)
        if now - self.start >= self.seconds:
            self.log(f"time budget of {self.seconds:.0f}s used up at step {step}")
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        if self.schedule is not None and self.timed_from is not None and self.calibrated:
            self._fit_schedule(self.clock(), trained_steps(self.model), self.timed_from)
