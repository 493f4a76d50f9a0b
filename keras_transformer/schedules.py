"""The learning-rate schedule of Vaswani et al., 2017, §5.3."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """lrate = d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)      (Eq. 3)

    Linear warm-up for `warmup_steps`, then decay with the inverse square root of the step.
    `step_num` counts from 1 (Keras passes the 0-based optimizer iteration). `scale`
    multiplies the whole schedule (1.0 is the paper's). With gradient accumulation Keras passes
    the count of micro-batches, so `accumulation_steps` turns it back into optimizer updates.
    """

    def __init__(self, d_model: int, warmup_steps: int = 4000, scale: float = 1.0, accumulation_steps: int = 1):
        self.d_model = d_model
        self.warmup_steps = warmup_steps
        self.scale = scale
        self.accumulation_steps = accumulation_steps

    def __call__(self, step):
        step_num = ops.cast(ops.floor_divide(step, self.accumulation_steps), "float32") + 1.0
        warmup = float(self.warmup_steps)
        return self.scale * self.d_model**-0.5 * ops.minimum(ops.rsqrt(step_num), step_num * warmup**-1.5)

    def get_config(self):
        return {"d_model": self.d_model, "warmup_steps": self.warmup_steps, "scale": self.scale, "accumulation_steps": self.accumulation_steps}
