"""Checkpoints during training: every epoch end (and every `checkpoint_every` steps), numbered by
optimizer step, so that a run resumes where it stopped (Vaswani et al., 2017, §5: the paper
saves checkpoints at 10-minute intervals and averages the last ones, §6.1)."""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from keras_transformer.model_dir.checkpoints import save_checkpoint
from keras_transformer.training.schedules import trained_steps


class CheckpointCallback(keras.callbacks.Callback):
    """Saves model and optimizer every `every` steps (0: never), at every epoch end and when
    training ends, numbered by step; stops training at `max_steps`, or at the first non-finite
    loss, which it never saves (`diverged_at` then holds the step).

    `tf.train.CheckpointManager` writes the new files before it points `checkpoint` at them
    (itself replaced atomically), so a crash mid-write leaves the previous checkpoint in use. A
    write that fails (a full disk) removes its partial files and ends training with
    `model_dir.CheckpointWriteError`, naming the last good checkpoint.
    """

    def __init__(self, manager: tf.train.CheckpointManager, max_steps: int, every: int = 0):
        super().__init__()
        self.manager = manager
        self.max_steps = max_steps
        self.every = every
        self.diverged_at = None

    def _step(self) -> int:
        return trained_steps(self.model)

    def on_train_begin(self, logs=None):
        self._saved_step = self._step()  # already on disk (a resumed run) or the initial state

    def save(self):
        """Checkpoint the current step, unless it is on disk already or the loss diverged."""
        step = self._step()
        if step != self._saved_step and self.diverged_at is None:
            save_checkpoint(self.manager, step)
            self._saved_step = step

    def on_train_batch_end(self, batch, logs=None):
        step = self._step()
        if logs and "loss" in logs and not math.isfinite(float(logs["loss"])):
            self.diverged_at = step
            self.model.stop_training = True
            return
        if step >= self.max_steps:
            self.model.stop_training = True
        if self.every and step % self.every == 0:
            self.save()

    def on_epoch_end(self, epoch, logs=None):
        self.save()

    def on_train_end(self, logs=None):
        self.save()
