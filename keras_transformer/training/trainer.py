"""Training with `model.fit` (Vaswani et al., 2017, §5): Adam with the Eq. 3 schedule,
label-smoothed cross-entropy, on any `tf.distribute` strategy (`distribute.py`), checkpoints
every epoch (and every `checkpoint_every` steps), resume from the model directory. SIGTERM and
SIGINT end a run after the step in flight, with a checkpoint (`budget.StopOnSignal`).

Workflows on top (the README's "Training workflows"): weighted data sources (`data.mixing`),
early stopping (`callbacks.early_stopping`), a moving average of the weights (`callbacks.ema`)
and fine-tuning from another model dir (`init_from`, `initial_weights`).

An "epoch" here is `TrainingConfig.steps_per_epoch` steps of a repeated, shuffled stream: the
unit of logging, validation and checkpointing. Training stops at `max_steps` optimizer steps,
counted across restarts.
"""

from __future__ import annotations

import dataclasses
import math
import os
import warnings
from collections.abc import Callable, Sequence

import keras
import tensorflow as tf

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data.batching import SkippedPairs, make_batches
from keras_transformer.data.errors import data_errors
from keras_transformer.data.mixing import read_validation, tokenizer_sentences, training_pairs, validation_pairs
from keras_transformer.data.sources import pairs_dataset, sentences
from keras_transformer.data.splits import split_source
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.inference.translator import Translator
from keras_transformer.model import Transformer
from keras_transformer.model_dir import (
    ModelDir,
    ModelDirError,
    checkpoint_step,
    restore,
    restore_newest,
    weights_checkpoint,
)
from keras_transformer.training.callbacks.bleu import BleuCallback
from keras_transformer.training.callbacks.budget import Interrupted, StopOnSignal, TimeBudget
from keras_transformer.training.callbacks.checkpoint import CheckpointCallback
from keras_transformer.training.callbacks.early_stopping import EarlyStopping
from keras_transformer.training.callbacks.ema import EmaCheckpoint, keep_raw_weights
from keras_transformer.training.callbacks.progress import Progress
from keras_transformer.training.distribute import (
    check_jit_compile,
    mixed_precision_policy,
    resolve_strategy,
    worker_id,
)
from keras_transformer.training.keras_compat import fit_under_tf_distribute
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.schedules import (
    StepBudgetSchedule,
    TransformerSchedule,
    trained_steps,
)


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


def compile_model(model: Transformer, training: TrainingConfig, schedule=None) -> Transformer:
    """Adam(beta_1 0.9, beta_2 0.98, eps 1e-9) on the Eq. 3 schedule (§5.3) or `schedule`,
    label smoothing (§5.4); with `training.ema_decay`, a moving average of the weights
    (`callbacks.ema`).

    With `training.grad_accumulation` N > 1 each update uses the mean gradient of N micro-batches
    (Keras' `gradient_accumulation_steps`), so `optimizer.iterations` and the schedule count
    updates, as the paper's steps. A mixed_float16 model gets dynamic loss scaling from Keras.
    """
    config = model.config
    accumulation = training.grad_accumulation
    optimizer = keras.optimizers.Adam(
        learning_rate=schedule or learning_rate_schedule(config.d_model, training),
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
        jit_compile=training.jit_compile,
    )
    return fit_under_tf_distribute(model)


class TrainingDiverged(ValueError):
    """The training loss became NaN or infinite."""


def check_architecture(path: str, stored: TransformerConfig, config: TransformerConfig, advice: str) -> None:
    """Refuse `config` unless its architecture (the vocabulary size aside) is the one `stored` in `path`."""
    requested = dataclasses.replace(config, vocab_size=stored.vocab_size).architecture()
    architecture = stored.architecture()
    if requested != architecture:
        different = [
            f"{k}: stored {v} != requested {requested[k]}" for k, v in architecture.items() if v != requested[k]
        ]
        raise ModelDirError(f"{path} holds a model with another architecture ({'; '.join(different)}); {advice}")


def _parent(training: TrainingConfig, config: TransformerConfig) -> tuple[dict, TransformerConfig, SubwordTokenizer]:
    """Fine-tuning: ({"dir", "checkpoint", "step"}, its config, its tokenizer) of `training.init_from`,
    whose architecture must be `config`'s (the vocabulary is the parent's)."""
    parent_dir = ModelDir(training.init_from)
    stored = parent_dir.read()["model"]
    check_architecture(parent_dir.path, stored, config, "fine-tuning keeps the parent's architecture")
    checkpoint = parent_dir.resolve_checkpoint(training.init_checkpoint)
    if checkpoint is None:
        raise ModelDirError(f"{parent_dir.path} holds no checkpoint yet (train it first)")
    parent = {"dir": os.path.abspath(parent_dir.path), "checkpoint": os.path.abspath(checkpoint)}
    parent["step"] = checkpoint_step(checkpoint)
    return parent, dataclasses.replace(stored, dropout=config.dropout), parent_dir.tokenizer()


def initial_weights(config: TransformerConfig, checkpoint: str) -> list:
    """The weights of `checkpoint` for a model of `config`, read into an uncompiled model: a
    compiled one would also restore the optimizer state that the checkpoint may hold."""
    model = Transformer(config)
    model.build()
    restore(weights_checkpoint(model), checkpoint, weights_only=True)
    return model.get_weights()


def prepare_model_dir(
    model_dir: ModelDir, config: TransformerConfig, training: TrainingConfig, data: DataConfig, log: Callable
) -> tuple[TransformerConfig, SubwordTokenizer]:
    """Store the tokenizer (`data.tokenizer_model`, one learned from a uniform sample of the
    training split, or, fine-tuning, `training.init_from`'s) and config on a new model dir; on an
    existing one, check that the requested config matches and return the stored one."""
    if model_dir.exists():
        values = model_dir.read()
        stored, tokenizer = values["model"], model_dir.tokenizer()
        check_architecture(model_dir.path, stored, config, "use a new --model-dir")
        stored_ema = values["training"].get("ema_decay")
        if (stored_ema is None) != (training.ema_decay is None):  # the optimizer's variables differ
            raise ModelDirError(
                f"{model_dir.path} was trained without --ema-decay: its checkpoints hold no average to resume; "
                "use a new --model-dir"
                if stored_ema is None
                else f"{model_dir.path} was trained with --ema-decay {stored_ema}: pass it again to resume"
            )
        if "parent" in values:
            return dataclasses.replace(stored, dropout=config.dropout), tokenizer
        asked = values.get("requested_vocab_size", stored.vocab_size)  # the learned size may be smaller
        if config.vocab_size != asked or tokenizer.vocab_size != stored.vocab_size:
            raise ModelDirError(
                f"{model_dir.path} holds a {tokenizer.vocab_size}-token vocabulary learned for vocab_size "
                f"{asked}, not {config.vocab_size}; use a new --model-dir"
            )
        if stored.dropout != config.dropout:
            log(f"dropout {config.dropout} (the model dir's runs so far: {stored.dropout})")
        return dataclasses.replace(stored, dropout=config.dropout), tokenizer
    if training.init_from:
        parent, config, tokenizer = _parent(training, config)
        log(f"fine-tuning from {parent['checkpoint']} (step {parent['step']}) with its tokenizer")
        model_dir.write(config, training, data, tokenizer, parent=parent)
        return config, tokenizer
    if data.tokenizer_model:
        tokenizer = SubwordTokenizer.load(data.tokenizer_model)
        log(f"using the {tokenizer.vocab_size}-token SentencePiece model {data.tokenizer_model}")
    else:
        sample = 2 * data.tokenizer_sample  # sentences: source and target
        if len(data.sources()) > 1:  # a sample of each source, in the weights' proportion
            texts = tokenizer_sentences(data, data.tokenizer_sample, training.seed)
        else:
            spec, split = split_source(data, "train")
            texts = sentences(pairs_dataset(spec, split, data.reverse, tfds_data_dir=data.tfds_data_dir))
        tokenizer = SubwordTokenizer.train(texts, config.vocab_size, sample, seed=training.seed)
        log(
            f"learned a {tokenizer.vocab_size}-token subword vocabulary from {data.data} "
            f"(a uniform sample of up to {data.tokenizer_sample} pairs)"
        )
    requested_vocab_size = config.vocab_size
    config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
    model_dir.write(config, training, data, tokenizer, requested_vocab_size=requested_vocab_size)
    return config, tokenizer


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
    if strategy is None or isinstance(strategy, str):
        strategy = resolve_strategy(strategy or "auto")
    if training.jit_compile:
        check_jit_compile(strategy)
    directory = ModelDir(model_dir)
    with directory.lock(worker_id(strategy)):  # before the tokenizer and config are written
        return _train_locked(directory, config, training, data, strategy, verbose, callbacks, log, stop_on_signal)


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
    config, tokenizer = prepare_model_dir(directory, config, training, data, log)
    dtype = mixed_precision_policy(strategy) if training.mixed_precision else None
    with strategy.scope():
        schedule = learning_rate_schedule(config.d_model, training)
        model = compile_model(Transformer(config, dtype=dtype), training, schedule)
        model.build()
        model.optimizer.build(model.trainable_variables)
    fitted = schedule if isinstance(schedule, StepBudgetSchedule) else None
    budget_state = {"step_budget": fitted.total_steps} if fitted else {}  # resumes keep the fitted budget
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, **budget_state)
    manager = directory.checkpoint_manager(checkpoint, training.keep_checkpoints, worker=worker_id(strategy))
    newest_first = list(reversed(manager.checkpoints)) or directory.checkpoints()  # a worker > 0 resumes as the chief
    if newest_first:
        restore_newest(checkpoint, newest_first, warn=log)
        log(f"resumed from step {trained_steps(model)}")
    elif parent := directory.read().get("parent"):  # fine-tuning: the parent's weights, a fresh optimizer
        model.set_weights(initial_weights(config, parent["checkpoint"]))
    step = trained_steps(model)
    if step >= training.max_steps:
        log(f"already trained for {step} steps (--max-steps {training.max_steps}): nothing to do")
        return model
    early_stopping = None
    if training.early_stopping:
        monitor = "val_bleu" if training.bleu_every_epochs else "val_loss"
        best_dir = None if training.bleu_every_epochs else directory.weights_dir("best")  # BleuCallback keeps best/
        early_stopping = EarlyStopping(monitor, training.early_stopping, directory.early_stopping_path, best_dir, log)
        if early_stopping.exhausted:
            log(f"stopped early before: {early_stopping.describe()}: nothing to do")
            return model
    try:
        stop_on_signal.check()  # a signal before any step: the model dir is ready, nothing more to save
    except Interrupted as interrupted:
        log(f"{interrupted} before the first step")
        raise
    log(f"training on {strategy.num_replicas_in_sync} replica(s) with {type(strategy).__name__}")

    batching = dict(
        max_length=config.max_length,
        batch_tokens=training.batch_tokens,
        batch_multiple=strategy.num_replicas_in_sync,
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
    train_batches, validation_batches = train_batches.with_options(options), validation_batches.with_options(options)
    steps_per_epoch = min(training.steps_per_epoch, training.max_steps)
    saver = CheckpointCallback(manager, training.max_steps, training.checkpoint_every)
    all_callbacks = [saver, Progress(training.max_steps, training.time_budget_s)]  # in place of Keras' bars
    if worker_id(strategy) == 0:
        all_callbacks.append(keras.callbacks.TensorBoard(directory.log_dir))
    if training.bleu_every_epochs:
        sources, references = read_validation(data, min(training.bleu_sentences, data.valid_pairs))
        best_dir = directory.weights_dir("best")
        translator = Translator(model, tokenizer)
        all_callbacks.append(BleuCallback(translator, sources, references, best_dir, training.bleu_every_epochs, log))
    if training.ema_decay is not None:  # every worker saves (as for checkpoints/), the chief to ema/
        ema_dir = directory.weights_dir("ema")
        if worker_id(strategy):
            ema_dir = os.path.join(ema_dir, f"worker-{worker_id(strategy)}")
        all_callbacks.append(EmaCheckpoint(ema_dir, training.keep_checkpoints))
    all_callbacks += callbacks
    if early_stopping is not None:  # after the callers': it sees the scores they log
        all_callbacks.append(early_stopping)
    if training.time_budget_s:  # after the others: it measures their epoch-end work
        all_callbacks.append(TimeBudget(training.time_budget_s, fitted, log=log))
    all_callbacks.append(stop_on_signal)  # last: a stop after the step's checkpoint and divergence checks
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
