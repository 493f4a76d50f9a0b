"""Early stopping (not in the paper, which trains for a fixed 100k steps): end a run after
`patience` evaluations without a better validation score, the best weights kept in best/.

An evaluation is an epoch end whose logs hold the monitored score: `val_bleu` (higher is better;
`BleuCallback` writes it every `--bleu-every-epochs` epochs and keeps best/ itself) or
`val_loss` (lower is better; every epoch; this callback then keeps best/ and best/val_loss.json).
The count survives restarts: it is kept in the model dir's early_stopping.json.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import keras

from keras_transformer.model_dir.checkpoints import save_weights
from keras_transformer.training.schedules import trained_steps

MONITORS = {"val_bleu": max, "val_loss": min}  # the score and which way is better


class EarlyStopping(keras.callbacks.Callback):
    """Stops `fit` once `patience` evaluations in a row did not improve on the best `monitor`
    ("val_bleu" or "val_loss"); with `best_dir`, each new best's weights are saved there.
    `record_path` keeps {"monitor", "best", "step", "waited"} across restarts."""

    def __init__(
        self,
        monitor: str,
        patience: int,
        record_path: str,
        best_dir: str | None = None,
        log: Callable[[str], None] = print,
    ):
        super().__init__()
        if monitor not in MONITORS:
            raise ValueError(f"monitor must be one of {', '.join(MONITORS)}, got {monitor!r}")
        if patience < 1:
            raise ValueError(f"patience must be >= 1, got {patience}")
        self.monitor = monitor
        self.patience = patience
        self.record_path = record_path
        self.best_dir = best_dir
        self.log = log
        self.record = None
        if os.path.isfile(record_path):
            with open(record_path, encoding="utf-8") as f:
                record = json.load(f)
            if record.get("monitor") == monitor:  # a record of another score starts afresh
                self.record = record

    @property
    def exhausted(self) -> bool:
        """Whether the recorded evaluations already used up the patience (a finished run)."""
        return self.record is not None and self.record["waited"] >= self.patience

    def describe(self) -> str:
        record = self.record
        return (
            f"no better {self.monitor} in {record['waited']} evaluation(s) "
            f"(best {record['best']:.4g} at step {record['step']})"
        )

    def _write(self, path: str, values: dict) -> None:
        temporary = path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(values, f)
        os.replace(temporary, path)

    def on_epoch_end(self, epoch, logs=None):
        if not logs or self.monitor not in logs:
            return  # no evaluation at this epoch end
        value, step = float(logs[self.monitor]), trained_steps(self.model)
        better = MONITORS[self.monitor]
        if self.record is None or (value != self.record["best"] and better(value, self.record["best"]) == value):
            self.record = {"monitor": self.monitor, "best": value, "step": step, "waited": 0}
            if self.best_dir is not None:
                save_weights(self.model, self.best_dir, step)
                self._write(os.path.join(self.best_dir, f"{self.monitor}.json"), {"step": step, self.monitor: value})
        else:
            self.record = {**self.record, "waited": self.record["waited"] + 1}
        self._write(self.record_path, self.record)
        if self.exhausted:
            self.log(f"early stopping at step {step}: {self.describe()}")
            self.model.stop_training = True
