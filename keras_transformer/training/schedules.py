"""The learning-rate schedule of Vaswani et al., 2017, §5.3."""

from __future__ import annotations

import keras
from keras import ops


def trained_steps(model) -> int:
    """Optimizer updates `model` has taken: the training steps of §5.2, counted across restarts.
    (With gradient accumulation Keras computes them from the micro-batches: a tensor, not a variable.)"""
    return int(ops.convert_to_numpy(model.optimizer.iterations))


def update_number(step, accumulation_steps: int = 1):
    """step_num of Eq. 3, counting from 1: Keras passes the 0-based count of (micro-)batches."""
    return ops.cast(ops.floor_divide(step, accumulation_steps), "float32") + 1.0


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
        step_num = update_number(step, self.accumulation_steps)
        warmup = float(self.warmup_steps)
        return self.scale * self.d_model**-0.5 * ops.minimum(ops.rsqrt(step_num), step_num * warmup**-1.5)

    def get_config(self):
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
            "accumulation_steps": self.accumulation_steps,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class StepBudgetSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Eq. 3 fitted to the steps a run will actually get.

    Deviation from the paper: for runs far shorter than the paper's 100k steps. With T the
    step budget and w = `warmup_fraction * T`, the schedule keeps Eq. 3's peak learning rate,
    d_model^-0.5 * warmup_steps^-0.5 (the paper's warmup_steps = 4000), but reaches it after w
    steps, decays as Eq. 3 does after it, and over the last `cooldown_fraction * T` steps
    decays linearly to zero:

        lrate = d_model^-0.5 * warmup_steps^-0.5 * min((w / step_num)^0.5, step_num / w)
                * min(1, (T - step_num) / (c T))

    With w = warmup_steps and no cool-down this is Eq. 3. Only the timing is fitted, not the
    peak: Eq. 3 with a short warm-up would peak at d_model^-0.5 * w^-0.5, several times higher
    (a 1000-step budget with 10% warm-up would peak 6.3x above the paper's), which sends a
    post-LN Transformer to predicting end-of-sentence everywhere.

    `total_steps` (T) is a variable so that a wall-clock budget can set it once the speed of
    the first steps is known (`keras_transformer.training.callbacks.budget.TimeBudget`).
    """

    def __init__(
        self,
        d_model: int,
        total_steps: float,
        warmup_fraction: float = 0.1,
        cooldown_fraction: float = 0.2,
        scale: float = 1.0,
        accumulation_steps: int = 1,
        warmup_steps: int = 4000,
    ):
        if not 0.0 < warmup_fraction < 1.0 or not 0.0 <= cooldown_fraction < 1.0:
            raise ValueError(
                "warmup_fraction must be in (0, 1) and cooldown_fraction in [0, 1), "
                f"got {warmup_fraction}, {cooldown_fraction}"
            )
        self.d_model = d_model
        self.warmup_fraction = warmup_fraction
        self.cooldown_fraction = cooldown_fraction
        self.scale = scale
        self.accumulation_steps = accumulation_steps
        self.warmup_steps = warmup_steps
        self.total_steps = keras.Variable(float(total_steps), dtype="float32", trainable=False, name="step_budget")

    def __call__(self, step):
        step_num = update_number(step, self.accumulation_steps)
        total = ops.maximum(self.total_steps, 1.0)
        warmup = ops.maximum(self.warmup_fraction * total, 1.0)
        peak = self.scale * self.d_model**-0.5 * float(self.warmup_steps) ** -0.5
        lrate = peak * ops.minimum(ops.sqrt(warmup / step_num), step_num / warmup)
        if not self.cooldown_fraction:
            return lrate
        cooldown = ops.clip((total - step_num) / (self.cooldown_fraction * total), 0.0, 1.0)
        return lrate * cooldown

    def get_config(self):
        return {
            "d_model": self.d_model,
            "total_steps": float(self.total_steps.numpy()),
            "warmup_fraction": self.warmup_fraction,
            "cooldown_fraction": self.cooldown_fraction,
            "scale": self.scale,
            "accumulation_steps": self.accumulation_steps,
            "warmup_steps": self.warmup_steps,
        }
