"""Training with `model.fit` (Vaswani et al., 2017, §5): Adam with the Eq. 3 schedule,
label-smoothed cross-entropy, checkpoints every epoch, resume from the model directory.

An "epoch" here is `TrainingConfig.steps_per_epoch` steps of a repeated, shuffled stream: the
unit of logging, validation and checkpointing. Training stops at `max_steps` optimizer steps,
counted across restarts.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from collections.abc import Callable

import keras
import tensorflow as tf

from keras_transformer.callbacks import BleuCallback
from keras_transformer.config import TrainingConfig, TransformerConfig
from keras_transformer.data import make_batches, pairs_dataset, read_pairs
from keras_transformer.losses import LabelSmoothedCrossEntropy
from keras_transformer.metrics import MaskedAccuracy
from keras_transformer.model import Transformer
from keras_transformer.model_dir import ModelDir, ModelDirError, restore
from keras_transformer.schedules import TransformerSchedule
from keras_transformer.tokenizer import SubwordTokenizer
from keras_transformer.translation import Translator

TOKENIZER_SENTENCES = 200_000  # sentences per side sampled to learn the vocabulary


def compile_model(model: Transformer, training: TrainingConfig) -> Transformer:
    """Adam(beta_1 0.9, beta_2 0.98, eps 1e-9) on the Eq. 3 schedule (§5.3), label smoothing (§5.4)."""
    config = model.config
    optimizer = keras.optimizers.Adam(
        learning_rate=TransformerSchedule(config.d_model, training.warmup_steps, training.learning_rate_scale),
        beta_1=training.beta_1,
        beta_2=training.beta_2,
        epsilon=training.epsilon,
    )
    model.compile(
        optimizer=optimizer,
        loss=LabelSmoothedCrossEntropy(config.label_smoothing, config.pad_id),
        metrics=[MaskedAccuracy(config.pad_id)],
    )
    return model


class CheckpointCallback(keras.callbacks.Callback):
    """Saves model and optimizer at every epoch end and when training ends, numbered by step;
    stops training at `max_steps`. `tf.train.CheckpointManager` writes the new files before it
    points `checkpoint` at them, so a crash mid-write leaves the previous checkpoint in use."""

    def __init__(self, manager: tf.train.CheckpointManager, max_steps: int):
        super().__init__()
        self.manager = manager
        self.max_steps = max_steps

    def _step(self) -> int:
        return int(self.model.optimizer.iterations.numpy())

    def on_train_begin(self, logs=None):
        self._saved_step = self._step()  # already on disk (a resumed run) or the initial state

    def _save(self):
        step = self._step()
        if step != self._saved_step:
            self.manager.save(checkpoint_number=step)
            self._saved_step = step

    def on_train_batch_end(self, batch, logs=None):
        if self._step() >= self.max_steps:
            self.model.stop_training = True

    def on_epoch_end(self, epoch, logs=None):
        self._save()

    def on_train_end(self, logs=None):
        self._save()


def prepare_model_dir(
    model_dir: ModelDir, config: TransformerConfig, training: TrainingConfig, data: str, reverse: bool, log: Callable
) -> tuple[TransformerConfig, SubwordTokenizer]:
    """Learn and store the tokenizer and config on a new model dir; on an existing one, check that
    the requested config matches and return the stored one."""
    if model_dir.exists():
        stored = model_dir.read()["model"]
        requested = dataclasses.replace(config, vocab_size=stored.vocab_size)
        if requested != stored:
            different = [f"{k}: stored {v} != requested {requested.to_dict()[k]}" for k, v in stored.to_dict().items() if requested.to_dict()[k] != v]
            raise ModelDirError(f"{model_dir.path} holds a model with another config ({'; '.join(different)}); use a new --model-dir")
        return stored, model_dir.tokenizer()
    sources, targets = read_pairs(data, "train", reverse, limit=TOKENIZER_SENTENCES)
    log(f"learning a {config.vocab_size}-token subword vocabulary from {len(sources)} sentence pairs")
    tokenizer = SubwordTokenizer.train(sources + targets, config.vocab_size)
    config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
    model_dir.write(config, training, data, tokenizer)
    return config, tokenizer


def train(
    model_dir: str,
    config: TransformerConfig,
    training: TrainingConfig = TrainingConfig(),
    data: str = "bible-en-de",
    *,
    reverse: bool = False,
    strategy: tf.distribute.Strategy | None = None,
    verbose: int | str = "auto",
    log: Callable[[str], None] = print,
) -> Transformer:
    """Train (or resume training) the model in `model_dir` up to `training.max_steps` steps."""
    keras.utils.set_random_seed(training.seed)
    directory = ModelDir(model_dir)
    config, tokenizer = prepare_model_dir(directory, config, training, data, reverse, log)
    strategy = strategy or tf.distribute.get_strategy()
    with strategy.scope():
        model = compile_model(Transformer(config), training)
        model.build()
        model.optimizer.build(model.trainable_variables)
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer)
    manager = directory.checkpoint_manager(checkpoint, training.keep_checkpoints)
    if manager.latest_checkpoint:
        restore(checkpoint, manager.latest_checkpoint)
        log(f"resumed from step {int(model.optimizer.iterations.numpy())}")
    step = int(model.optimizer.iterations.numpy())
    if step >= training.max_steps:
        log(f"already trained for {step} steps (--max-steps {training.max_steps}): nothing to do")
        return model

    batching = dict(
        max_length=config.max_length,
        batch_tokens=training.batch_tokens,
        batch_multiple=strategy.num_replicas_in_sync,
        start_id=config.start_id,
        eos_id=config.eos_id,
        pad_id=config.pad_id,
    )
    train_batches = make_batches(
        pairs_dataset(data, "train", reverse),
        tokenizer,
        training=True,
        shuffle_buffer=training.shuffle_buffer,
        seed=training.seed + step,  # a restart does not replay the same order
        **batching,
    )
    validation_batches = make_batches(pairs_dataset(data, "validation", reverse), tokenizer, training=False, **batching)
    steps_per_epoch = min(training.steps_per_epoch, training.max_steps)
    callbacks = [CheckpointCallback(manager, training.max_steps), keras.callbacks.TensorBoard(directory.log_dir)]
    if training.bleu_every_epochs:
        sources, references = read_pairs(data, "validation", reverse, training.bleu_sentences)
        best_dir = directory.weights_dir("best")
        callbacks.append(BleuCallback(Translator(model, tokenizer), sources, references, best_dir, training.bleu_every_epochs, log))
    with warnings.catch_warnings():
        # Keras warns when the (finite, unsized) validation set ends: that is how it should end.
        warnings.filterwarnings("ignore", message="Your input ran out of data", category=UserWarning)
        model.fit(
            train_batches,
            validation_data=validation_batches,
            epochs=math.ceil(training.max_steps / steps_per_epoch),
            initial_epoch=step // steps_per_epoch,
            steps_per_epoch=steps_per_epoch,
            shuffle=False,  # the dataset shuffles itself
            callbacks=callbacks,
            verbose=verbose,
        )
    log(f"trained to step {int(model.optimizer.iterations.numpy())}; checkpoint {manager.latest_checkpoint}")
    return model
