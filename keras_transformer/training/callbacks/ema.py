"""An exponential moving average of the weights (not in the paper; Polyak & Juditsky, 1992),
kept by Keras' optimizer (`use_ema=True`, `ema_momentum` = the decay D):

    average_1 = weights_1;  average_t = D x average_{t-1} + (1 - D) x weights_t   (after step t)

The average is an optimizer variable, so training checkpoints carry it and a resumed run goes on
averaging. `EmaCheckpoint` writes it as a weights-only checkpoint in the model dir's ema/ at every
epoch end (`--checkpoint ema` reads it); the model itself keeps its raw weights
(`optimization.keep_raw_weights`). Under `mixed_float16` the variables and their averages stay
float32 (Keras' mixed precision).
"""

from __future__ import annotations

import keras

from keras_transformer.model_dir.checkpoints import save_weights
from keras_transformer.training.schedules import trained_steps


def moving_averages(optimizer: keras.optimizers.Optimizer) -> list:
    """The optimizer's moving averages of the trainable variables; under `mixed_float16` Keras wraps
    the optimizer in a `LossScaleOptimizer`, whose inner optimizer keeps them."""
    return getattr(optimizer, "inner_optimizer", optimizer)._model_variables_moving_average


class EmaCheckpoint(keras.callbacks.Callback):
    """Saves the optimizer's moving average of the weights to `directory` (the `keep` newest,
    numbered by step) at every epoch end and when training ends."""

    def __init__(self, directory: str, keep: int = 1):
        super().__init__()
        self.directory = directory
        self.keep = keep

    def on_train_begin(self, logs=None):
        self._saved_step = trained_steps(self.model)

    def save(self) -> None:
        step = trained_steps(self.model)
        if step == self._saved_step:
            return
        variables = self.model.trainable_variables
        raw = [variable.numpy() for variable in variables]
        averages = moving_averages(self.model.optimizer)  # aligned with the trainable variables
        for variable, average in zip(variables, averages):
            variable.assign(average)
        try:
            save_weights(self.model, self.directory, step, keep=self.keep)
        finally:
            for variable, value in zip(variables, raw):
                variable.assign(value)
        self._saved_step = step

    def on_epoch_end(self, epoch, logs=None):
        self.save()

    def on_train_end(self, logs=None):
        self.save()
