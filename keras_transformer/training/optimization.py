"""The optimisation of Vaswani et al. (2017), §5.3-5.4: Adam (beta_1 0.9, beta_2 0.98, eps 1e-9) on
the learning-rate schedule of Eq. 3 (or Eq. 3 fitted to a step budget), label-smoothed
cross-entropy, masked accuracy; `compile_model` puts them on a model, on any Keras backend."""

from __future__ import annotations

import keras
from keras.src.utils import tracking

from keras_transformer.config import TrainingConfig
from keras_transformer.model import Transformer
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.metrics import MaskedAccuracy, StepMean
from keras_transformer.training.schedules import StepBudgetSchedule, TransformerSchedule


def learning_rate_schedule(d_model: int, training: TrainingConfig):
    """Eq. 3 with `warmup_steps` (the paper's), or fitted to the step budget (`warmup_fraction`)."""
    accumulation = training.grad_accumulation
    if training.fits_schedule_to_budget:
        return StepBudgetSchedule(
            d_model,
            training.max_steps,
            training.warmup_fraction,
            training.cooldown_fraction,
            training.learning_rate_scale,
            accumulation,
            training.warmup_steps,
        )
    return TransformerSchedule(d_model, training.warmup_steps, training.learning_rate_scale, accumulation)


def keep_raw_weights(optimizer: keras.optimizers.Optimizer) -> None:
    """Keras' `fit` ends by overwriting the model's weights with the moving average of `use_ema`
    (`finalize_variable_values`); keep the raw ones, as the last training checkpoint has them
    (`callbacks.ema` saves the average)."""
    optimizer.finalize_variable_values = lambda var_list: None


def compile_model(model: Transformer, training: TrainingConfig, schedule=None) -> Transformer:
    """Adam(beta_1 0.9, beta_2 0.98, eps 1e-9) on the Eq. 3 schedule (§5.3) or `schedule`,
    label smoothing (§5.4); with `training.ema_decay`, a moving average of the weights
    (`callbacks.ema`).

    With `training.grad_accumulation` N > 1 each update uses the mean gradient of N micro-batches
    (Keras' `gradient_accumulation_steps`), so `optimizer.iterations` and the schedule count
    updates, as the paper's steps. A mixed_float16 model gets dynamic loss scaling from Keras.
    The logged loss is the mean of the steps' losses (`metrics.StepMean`); on TensorFlow with the
    fixes of `keras_compat` for `model.fit` under `tf.distribute`. JAX steps are always jitted.
    """
    config = model.config
    accumulation = training.grad_accumulation
    schedule = schedule or learning_rate_schedule(config.d_model, training)
    optimizer = keras.optimizers.Adam(
        learning_rate=schedule,
        beta_1=training.beta_1,
        beta_2=training.beta_2,
        epsilon=training.epsilon,
        gradient_accumulation_steps=accumulation if accumulation > 1 else None,
        use_ema=training.ema_decay is not None,
        ema_momentum=training.ema_decay or 0.99,
    )
    if training.ema_decay is not None:
        keep_raw_weights(optimizer)
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedCrossEntropy(training.label_smoothing),
        metrics=[MaskedAccuracy()],
        # JAX runs a step op by op unless it is jitted (XLA): jit is its ordinary way to train.
        jit_compile=training.jit_compile or keras.backend.backend() == "jax",
    )
    # Built now, not inside the first step's trace: variables made there make TensorFlow trace the
    # step twice, with an initializer branch per variable (the tiny model's first fit 17.0 -> 7.5
    # CPU-s). Under a strategy, call this in its scope (as Keras asks for the model).
    if not model.built:
        model.build()
    model.optimizer.build(model.trainable_variables)  # a LossScaleOptimizer under mixed_float16
    if isinstance(schedule, StepBudgetSchedule) and keras.backend.backend() != "tensorflow":
        # A jitted JAX step reads only the variables it is handed: the step budget, which the time
        # budget re-fits during training, would stay what it was at the first trace. As one of the
        # optimizer's variables it is handed to every step (and saved in Keras' checkpoints).
        model.optimizer._track_variable(schedule.total_steps)
    if keras.backend.backend() == "tensorflow":
        from keras_transformer.training.keras_compat import fit_under_tf_distribute

        fit_under_tf_distribute(model)
    else:
        with tracking.DotNotTrackScope():  # as Keras' own `compile` sets it: a built model may be compiled
            model._loss_tracker = StepMean(name="loss")
    return model
