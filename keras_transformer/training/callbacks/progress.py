"""Training progress that fits the job, in place of Keras' per-epoch progress bars.

A run on a time budget reports against time, any other against its step budget, every line in
plain text: the step, time elapsed and left, the loss, the accuracy and target tokens per second
(non-pad target tokens, the paper's measure of batch size, §5.1). On a terminal one line is
rewritten in place; anywhere else (a file, a pipe, a notebook) a line is added every
`interval_s` seconds, so a log has no control characters. Each epoch end (validation and
checkpoint) adds a line with the validation scores, except after a stop, whose validation
`TimeBudget` cuts to one batch: those figures are dropped, not reported as a validation loss.
"""

from __future__ import annotations

import sys
import time

import keras

from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.schedules import trained_steps

TERMINAL_INTERVAL_S = 0.5  # a line rewritten in place is refreshed this often


def clock_time(seconds: float) -> str:
    """ "1:02:03", "2:03", "0:07"."""
    minutes, seconds = divmod(round(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}" if hours else f"{minutes}:{seconds:02d}"


class Progress(keras.callbacks.ProgbarLogger):
    """Reports `fit`'s progress against `time_budget_s` seconds, or else `max_steps` optimizer steps.

    A `ProgbarLogger`, so `fit` uses it instead of adding its own bar; `fit(verbose=0)` silences
    it too. `stream` defaults to stdout (where Keras' bar went); `terminal` defaults to whether
    `stream` is one.
    """

    def __init__(
        self,
        max_steps: int,
        time_budget_s: float | None = None,
        interval_s: float = 30.0,
        stream=None,
        terminal: bool | None = None,
        clock=time.monotonic,
    ):
        super().__init__()
        self.max_steps = max_steps
        self.time_budget_s = time_budget_s
        self.interval_s = interval_s
        self.stream = stream
        self.terminal = terminal
        self.clock = clock

    def set_params(self, params):
        self.params = params
        self.quiet = params.get("verbose") == 0

    def _on_terminal(self) -> bool:
        return (self.stream or sys.stdout).isatty() if self.terminal is None else self.terminal

    def _write(self, line: str, *, final: bool) -> None:
        stream = self.stream or sys.stdout
        if self._on_terminal():
            stream.write("\r" + line.ljust(self._width) + ("\n" if final else ""))
            self._width = 0 if final else len(line)
        else:
            stream.write(line + "\n")
        stream.flush()

    def _step(self) -> int:
        return trained_steps(self.model)

    def on_train_begin(self, logs=None):
        self.start = self.clock()
        self.start_step = self._step()
        self._width = 0
        self._last_report = None  # the clock when a line was last written; None: not yet
        self._tokens = 0.0  # non-pad target tokens since training began
        self._epoch_tokens = 0.0
        self._counter = None  # MaskedAccuracy.total, found once fit has built the metrics

    def _token_counter(self):
        """The running count of non-pad target tokens of the model's `MaskedAccuracy`, or None."""
        metrics = [m for metric in self.model.metrics for m in (metric, *getattr(metric, "metrics", ()))]
        return next((m.total for m in metrics if isinstance(m, MaskedAccuracy)), None)

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch_tokens = 0.0  # Keras resets the metrics at every epoch

    def _line(self, logs) -> str:
        now, step = self.clock(), self._step()
        elapsed = now - self.start
        if self.time_budget_s is not None:
            where = f"step {step:,} | {clock_time(elapsed)} of {clock_time(self.time_budget_s)}, "
            where += f"{clock_time(max(self.time_budget_s - elapsed, 0.0))} left"
        else:
            done = step - self.start_step
            left = (self.max_steps - step) * elapsed / done if done else None
            where = f"step {step:,}/{self.max_steps:,} | {clock_time(elapsed)}"
            where += f", ~{clock_time(left)} left" if left is not None else ""
        fields = [where]
        if "loss" in logs:
            fields.append(f"loss {float(logs['loss']):.3f}")
        if "accuracy" in logs:
            fields.append(f"accuracy {float(logs['accuracy']):.3f}")
        if self._counter is not None and elapsed > 0:
            fields.append(f"{self._tokens / elapsed:,.0f} target tokens/s")
        return " | ".join(fields)

    def on_train_batch_end(self, batch, logs=None):
        if self._counter is None:
            self._counter = self._token_counter()
        if self._counter is not None:
            total = float(self._counter.numpy())
            self._tokens += total - self._epoch_tokens
            self._epoch_tokens = total
        if self.quiet or batch + 1 == self.params.get("steps"):  # the epoch's end reports this step
            return
        now = self.clock()
        interval = TERMINAL_INTERVAL_S if self._on_terminal() else self.interval_s
        if self._last_report is None or now - self._last_report >= interval:
            self._write(self._line(logs or {}), final=False)
            self._last_report = now

    def on_epoch_end(self, epoch, logs=None):
        logs = logs if logs is not None else {}
        if getattr(self.model, "stop_evaluating", False):
            # A validation cut short after a stop (`budget.TimeBudget`) saw one batch: it is no
            # validation loss. Dropped from the logs, so Keras' History (after us) has none either.
            for name in [name for name in logs if name.startswith("val_")]:
                del logs[name]
        if self.quiet:
            return
        line = self._line(logs)
        validation = [f"{name} {float(logs[name]):.3f}" for name in ("val_loss", "val_accuracy") if name in logs]
        self._write(" | ".join([line, *validation]), final=True)
        self._last_report = self.clock()

    def on_train_end(self, logs=None):
        if self._width:  # the line rewritten in place on a terminal stays, ended
            (self.stream or sys.stdout).write("\n")

    def _silent(self, *args, **kwargs):
        """Validation inside `fit` and `predict` report nothing of their own."""

    on_test_begin = on_test_batch_end = on_test_end = _silent
    on_predict_begin = on_predict_batch_end = on_predict_end = _silent
