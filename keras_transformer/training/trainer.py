"""Training with `model.fit` (Vaswani et al., 2017, §5): Adam with the Eq. 3 schedule,
label-smoothed cross-entropy, on any `tf.distribute` strategy (`distribute.py`), checkpoints
every epoch (and every `checkpoint_every` steps), resume from the model directory. SIGTERM and
SIGINT end a run after the step in flight, with a checkpoint (`budget.StopOnSignal`). On JAX and
PyTorch (`KERAS_BACKEND`) with Keras' checkpoints, on JAX's devices through Keras' `DataParallel`
(`backends.py` says what else).

Workflows on top (the README's "Training workflows"): weighted data sources (`data.mixing`),
early stopping (`callbacks.early_stopping`), a moving average of the weights (`callbacks.ema`)
and fine-tuning from another model dir (`init_from`, `preparation.initial_weights`; with
`vocabulary="update"` on a new vocabulary), multilingual sources (`data.mixing.tag_sources`).

A run: prepare the model dir (`preparation`), build and compile the model (`optimization`),
resume or initialise its weights, make the batches, the callbacks in their order, `model.fit`.

An "epoch" here is `TrainingConfig.steps_per_epoch` steps of a repeated, shuffled stream: the
unit of logging, validation and checkpointing. Training stops at `max_steps` optimizer steps,
counted across restarts.
"""

from __future__ import annotations

import contextlib
import math
import os
import warnings
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data.batching import SkippedPairs, make_batches
from keras_transformer.data.errors import data_errors
from keras_transformer.data.mixing import read_validation, training_pairs, validation_pairs
from keras_transformer.keras_checkpoint import KerasCheckpoint
from keras_transformer.model import Transformer
from keras_transformer.model_dir.checkpoints import restore_newest
from keras_transformer.model_dir.directory import ModelDir
from keras_transformer.training.backends import KerasDevices, keras_devices, refusal
from keras_transformer.training.callbacks.bleu import BleuCallback
from keras_transformer.training.callbacks.budget import Interrupted, StopOnSignal, TimeBudget
from keras_transformer.training.callbacks.checkpoint import CheckpointCallback
from keras_transformer.training.callbacks.early_stopping import EarlyStopping
from keras_transformer.training.callbacks.ema import EmaCheckpoint
from keras_transformer.training.callbacks.progress import Progress
from keras_transformer.training.distribute import (
    check_jit_compile,
    mixed_precision_policy,
    resolve_strategy,
    worker_id,
)
from keras_transformer.training.dropout import dropout_for_steps, dropout_off_below
from keras_transformer.training.optimization import compile_model, learning_rate_schedule
from keras_transformer.training.preparation import initial_weights, prepare_model_dir
from keras_transformer.training.schedules import StepBudgetSchedule, trained_steps
from keras_transformer.training.tensorflow_translator import TensorFlowTranslator
from keras_transformer.translation.translator import Translator


class TrainingDiverged(ValueError):
    """The training loss became NaN or infinite."""


def train(
    model_dir: str,
    config: TransformerConfig,
    training: TrainingConfig = TrainingConfig(),
    data: str | DataConfig = "bible-en-de",
    *,
    strategy: tf.distribute.Strategy | str | None = None,
    verbose: int | str = "auto",
    callbacks: Sequence[keras.callbacks.Callback] = (),
    log: Callable[[str], None] = print,
) -> Transformer:
    """Train (or resume training) the model in `model_dir` up to `training.max_steps` steps.

    `data`: a `DataConfig`, or a data source's name.
    `strategy`: a `tf.distribute.Strategy`, or a name from `distribute.STRATEGIES` (default
    "auto"). Batches hold `training.batch_tokens` tokens per side in all, split across replicas.
    On JAX and PyTorch, a strategy's name: on JAX, auto (several devices when JAX sees them) and
    mirrored train through Keras' `DataParallel` (`backends.keras_devices`); what TensorFlow alone
    does raises ValueError (`backends.refusal`).
    `callbacks`: more Keras callbacks for `fit`.
    Raises `TrainingDiverged` at a NaN or infinite loss, after keeping the last good checkpoint,
    `budget.Interrupted` after SIGTERM or SIGINT, once the step in flight is checkpointed,
    `model_dir.ModelDirLocked` while another live `train` holds `model_dir` (`ModelDir.lock`), and
    `model_dir.CheckpointWriteError` when a checkpoint cannot be written (its partial files removed).
    A resume restores the newest checkpoint that restores, saying so through `log` when that is
    not the newest (a truncated file).
    """
    if isinstance(data, str):
        data = DataConfig(data=data)
    with StopOnSignal() as stop_on_signal:  # from here on, a signal ends the run cleanly
        return _train(model_dir, config, training, data, strategy, verbose, list(callbacks), log, stop_on_signal)


def _train(
    model_dir: str,
    config: TransformerConfig,
    training: TrainingConfig,
    data: DataConfig,
    strategy: tf.distribute.Strategy | str | None,
    verbose: int | str,
    callbacks: list[keras.callbacks.Callback],
    log: Callable[[str], None],
    stop_on_signal: StopOnSignal,
) -> Transformer:
    keras.utils.set_random_seed(training.seed)
    if reason := refusal(keras.backend.backend(), training, strategy):
        raise ValueError(reason)
    if keras.backend.backend() != "tensorflow":
        strategy = keras_devices(keras.backend.backend(), strategy)
    else:
        if strategy is None or isinstance(strategy, str):
            strategy = resolve_strategy(strategy or "auto")
        if training.jit_compile:
            check_jit_compile(strategy)
    directory = ModelDir(model_dir)
    # Keras' distribution is read where variables are made and where `fit` splits the batches: the whole run.
    whole_run = strategy.scope() if isinstance(strategy, KerasDevices) else contextlib.nullcontext()
    with directory.lock(worker_id(strategy)), whole_run:  # the lock before the tokenizer and config are written
        return _train_locked(directory, config, training, data, strategy, verbose, callbacks, log, stop_on_signal)


def _build(config: TransformerConfig, training: TrainingConfig, strategy: tf.distribute.Strategy):
    """(the compiled model, built with its optimizer under the strategy's scope; its schedule if
    that is fitted to a step budget, else None)."""
    policy = mixed_precision_policy(strategy) if keras.backend.backend() == "tensorflow" else "mixed_bfloat16"
    dtype = policy if training.mixed_precision else None
    with strategy.scope():
        schedule = learning_rate_schedule(config.d_model, training)
        model = compile_model(Transformer(config, dtype=dtype), training, schedule)
    return model, schedule if isinstance(schedule, StepBudgetSchedule) else None


def _resume(directory: ModelDir, model, fitted, training: TrainingConfig, strategy, log):
    """The run's checkpoint manager (`model_dir.checkpoints.manager`), after restoring the newest checkpoint
    that restores (a resume; found from the files themselves when the state file is unreadable),
    or, in a new fine-tuning dir, the parent's weights with a fresh optimizer. On JAX and PyTorch
    the checkpoints are Keras' (`keras_checkpoint`), whose optimizer holds the fitted step budget."""
    if keras.backend.backend() == "tensorflow":
        budget_state = {"step_budget": fitted.total_steps} if fitted else {}  # resumes keep the fitted budget
        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, **budget_state)
    else:
        checkpoint = KerasCheckpoint(model, model.optimizer)
    manager = directory.checkpoint_manager(checkpoint, training.keep_checkpoints, worker_id(strategy), warn=log)
    newest_first = list(reversed(manager.checkpoints)) or directory.checkpoints()  # a worker > 0 resumes as the chief
    if newest_first:
        restore_newest(checkpoint, newest_first, warn=log)
        log(f"resumed from step {trained_steps(model)}")
    elif parent := directory.read().get("parent"):  # fine-tuning: the parent's weights, a fresh optimizer
        model.set_weights(initial_weights(model, parent, directory.tokenizer()))
    return manager


def _batches(
    data: DataConfig, tokenizer, config: TransformerConfig, training: TrainingConfig, replicas: int, step: int
):
    """(training batches, validation batches, the training pairs' `SkippedPairs`), sharded by data."""
    batching = dict(
        max_length=config.max_length,
        batch_tokens=training.batch_tokens,
        batch_multiple=replicas,
        max_length_ratio=data.max_length_ratio,
    )
    seed = training.seed + step  # a restart does not replay the same order
    skipped = SkippedPairs()
    train_batches = make_batches(
        training_pairs(data, seed=seed, shuffle_buffer=training.shuffle_buffer),
        tokenizer,
        training=True,
        shuffle_buffer=training.shuffle_buffer,
        seed=seed,
        skipped=skipped,
        subword_alpha=data.subword_alpha,
        **batching,
    )
    validation_batches = make_batches(validation_pairs(data).cache(), tokenizer, training=False, **batching)
    # Every worker builds the same batches; each takes its replicas' share of every global batch.
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
    return train_batches.with_options(options), validation_batches.with_options(options), skipped


def _callbacks(
    directory,
    model,
    tokenizer,
    manager,
    fitted,
    training,
    data,
    strategy,
    callbacks,
    early_stopping,
    stop_on_signal,
    log,
):
    """The run's callbacks, in the order their epoch-end work must run: checkpoint first, the
    caller's and early stopping after the scores they read, the time budget after the work it
    measures, the signal handler last."""
    saver = CheckpointCallback(manager, training.max_steps, training.checkpoint_every)
    ordered = [saver, Progress(training.max_steps, training.time_budget_s)]  # in place of Keras' bars
    if worker_id(strategy) == 0:
        ordered.append(keras.callbacks.TensorBoard(directory.log_dir))
    if training.bleu_every_epochs:
        sources, references = read_validation(data, min(training.bleu_sentences, data.valid_pairs))
        best_dir = directory.weights_dir("best")
        if keras.backend.backend() == "tensorflow":
            translator = Translator(model, tokenizer)
        else:  # the search is TensorFlow's: a TensorFlow process translates with the model's weights
            translator = TensorFlowTranslator(model, directory.tokenizer_path)
        ordered.append(BleuCallback(translator, sources, references, best_dir, training.bleu_every_epochs, log))
    if training.ema_decay is not None:  # every worker saves, the chief to ema/, the others in their checkpoints/
        ema_dir = directory.weights_dir("ema")
        if worker_id(strategy):  # not inside ema/, which each save replaces whole (`save_weights`)
            ema_dir = os.path.join(directory.checkpoint_dir, f"worker-{worker_id(strategy)}", "ema")
        ordered.append(EmaCheckpoint(ema_dir, training.keep_checkpoints))
    ordered += callbacks
    if early_stopping is not None:  # after the callers': it sees the scores they log
        ordered.append(early_stopping)
    if training.time_budget_s:  # after the others: it measures their epoch-end work
        on_estimate = (
            dropout_off_below(model, training.dropout_from_steps, log) if training.dropout_from_steps else None
        )
        ordered.append(TimeBudget(training.time_budget_s, fitted, log=log, on_estimate=on_estimate))
    ordered.append(stop_on_signal)  # last: a stop after the step's checkpoint and divergence checks
    return ordered, saver


def _early_stopping(directory: ModelDir, training: TrainingConfig, log) -> EarlyStopping | None:
    """The early-stopping callback, on the validation BLEU when it is computed, else the loss."""
    if not training.early_stopping:
        return None
    monitor = "val_bleu" if training.bleu_every_epochs else "val_loss"
    best_dir = None if training.bleu_every_epochs else directory.weights_dir("best")  # BleuCallback keeps best/
    return EarlyStopping(monitor, training.early_stopping, directory.early_stopping_path, best_dir, log)


def _train_locked(
    directory: ModelDir,
    config: TransformerConfig,
    training: TrainingConfig,
    data: DataConfig,
    strategy: tf.distribute.Strategy,
    verbose: int | str,
    callbacks: list[keras.callbacks.Callback],
    log: Callable[[str], None],
    stop_on_signal: StopOnSignal,
) -> Transformer:
    config, tokenizer = prepare_model_dir(directory, dropout_for_steps(config, training, log), training, data, log)
    model, fitted = _build(config, training, strategy)
    manager = _resume(directory, model, fitted, training, strategy, log)
    step = trained_steps(model)
    if step >= training.max_steps:
        log(f"already trained for {step} steps (--max-steps {training.max_steps}): nothing to do")
        return model
    early_stopping = _early_stopping(directory, training, log)
    if early_stopping is not None and early_stopping.exhausted:
        log(f"stopped early before: {early_stopping.describe()}: nothing to do")
        return model
    try:
        stop_on_signal.check()  # a signal before any step: the model dir is ready, nothing more to save
    except Interrupted as interrupted:
        log(f"{interrupted} before the first step")
        raise
    if keras.backend.backend() == "tensorflow":
        log(f"training on {strategy.num_replicas_in_sync} replica(s) with {type(strategy).__name__}")
    else:
        log(f"training on {keras.backend.backend()}, {strategy}")
    train_batches, validation_batches, skipped = _batches(
        data, tokenizer, config, training, strategy.num_replicas_in_sync, step
    )
    all_callbacks, saver = _callbacks(
        directory, model, tokenizer, manager, fitted, training, data, strategy, callbacks, early_stopping,
        stop_on_signal, log,
    )  # fmt: skip
    steps_per_epoch = min(training.steps_per_epoch, training.max_steps)
    with warnings.catch_warnings(), data_errors():
        # Keras warns when the (finite, unsized) validation set ends: that is how it should end.
        warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
        try:
            model.fit(
                train_batches,
                validation_data=validation_batches,
                epochs=math.ceil(training.max_steps / steps_per_epoch),
                initial_epoch=step // steps_per_epoch,
                steps_per_epoch=steps_per_epoch * training.grad_accumulation,  # micro-batches
                shuffle=False,  # the dataset shuffles itself
                callbacks=all_callbacks,
                verbose=verbose,
            )
        except Interrupted as interrupted:
            for callback in all_callbacks:  # end as fit ends, without its validation: checkpoint, logs
                callback.on_train_end()
            stopped_at = trained_steps(model)
            log(f"{interrupted}: stopped at step {stopped_at}; checkpoint {manager.latest_checkpoint}")
            raise
        finally:
            log(f"training data: {skipped.summary(config.max_length, data.max_length_ratio)}")
    if saver.diverged_at is not None:
        raise TrainingDiverged(
            f"the training loss became NaN or infinite at step {saver.diverged_at}; stopped without saving "
            f"(last good checkpoint: {manager.latest_checkpoint or 'none'}); try a lower --learning-rate-scale"
        )
    log(f"trained to step {trained_steps(model)}; checkpoint {manager.latest_checkpoint}")
    return model
