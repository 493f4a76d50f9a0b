"""A run's model directory before the first step: a new one gets its tokenizer (an existing
SentencePiece model, one learned from the training data, or a fine-tuning parent's) and its
config.json; an existing one is checked against the run's settings (the architecture must be the
one stored; dropout may change), and a fine-tuning run's initial weights come from its parent."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data.mixing import tokenizer_sentences
from keras_transformer.data.sources import pairs_dataset, sentences
from keras_transformer.data.splits import split_source
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.model import Transformer
from keras_transformer.model_dir import ModelDir, ModelDirError, checkpoint_step, restore, weights_checkpoint


def check_architecture(path: str, stored: TransformerConfig, config: TransformerConfig, advice: str) -> None:
    """Refuse `config` unless its architecture (the vocabulary size aside) is the one `stored` in `path`."""
    requested = dataclasses.replace(config, vocab_size=stored.vocab_size).architecture()
    architecture = stored.architecture()
    if requested != architecture:
        different = [
            f"{k}: stored {v} != requested {requested[k]}" for k, v in architecture.items() if v != requested[k]
        ]
        raise ModelDirError(f"{path} holds a model with another architecture ({'; '.join(different)}); {advice}")


def parent_of(training: TrainingConfig, config: TransformerConfig) -> tuple[dict, TransformerConfig, SubwordTokenizer]:
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
        parent, config, tokenizer = parent_of(training, config)
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
            reading = dict(tfds_data_dir=data.tfds_data_dir, tfds_download=data.tfds_download)
            texts = sentences(pairs_dataset(spec, split, data.reverse, **reading))
        tokenizer = SubwordTokenizer.train(texts, config.vocab_size, sample, seed=training.seed)
        log(
            f"learned a {tokenizer.vocab_size}-token subword vocabulary from {data.data} "
            f"(a uniform sample of up to {data.tokenizer_sample} pairs)"
        )
    requested_vocab_size = config.vocab_size
    config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
    model_dir.write(config, training, data, tokenizer, requested_vocab_size=requested_vocab_size)
    return config, tokenizer
