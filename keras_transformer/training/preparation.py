"""A run's model directory before the first step: a new one gets its tokenizer (an existing
SentencePiece model, one learned from the training data, or a fine-tuning parent's) and its
config.json; an existing one is checked against the run's settings (the architecture must be the
one stored; dropout may change), and a fine-tuning run's initial weights come from its parent.

Fine-tuning with `vocabulary="update"` learns a new vocabulary from the new training data (as a
new model would: mix the parent's data into `--data` to keep its pieces; the parent's corpus may
not be at hand, and its pieces are kept wherever the new data uses them) and builds the model at
the new vocabulary size. Every other weight is the parent's; the shared embedding matrix (also
the output projection, §3.4) takes the parent's row for every piece both vocabularies have,
matched by its string, and keeps the new model's own initial values (N(0, d_model^-1/2), as
`SharedEmbedding` initialises them) for the others; so does the output bias, if the model has one
(initially 0).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data import augmentation
from keras_transformer.data.mixing import tokenizer_sentences
from keras_transformer.data.sources import pairs_dataset, sentences
from keras_transformer.data.splits import split_source
from keras_transformer.data.tokenizer import SubwordTokenizer, lang_token
from keras_transformer.model import Transformer
from keras_transformer.model_dir.checkpoints import checkpoint_step, restore, weights_checkpoint
from keras_transformer.model_dir.directory import ModelDir
from keras_transformer.model_dir.errors import ModelDirError


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
    whose architecture must be `config`'s (the vocabulary size aside)."""
    parent_dir = ModelDir(training.init_from)
    stored = parent_dir.read()["model"]
    check_architecture(parent_dir.path, stored, config, "fine-tuning keeps the parent's architecture")
    checkpoint = parent_dir.resolve_checkpoint(training.init_checkpoint)
    if checkpoint is None:
        raise ModelDirError(f"{parent_dir.path} holds no checkpoint yet (train it first)")
    parent = {"dir": os.path.abspath(parent_dir.path), "checkpoint": os.path.abspath(checkpoint)}
    parent["step"] = checkpoint_step(checkpoint)
    return parent, dataclasses.replace(stored, dropout=config.dropout), parent_dir.tokenizer()


def shared_pieces(parent: SubwordTokenizer, child: SubwordTokenizer) -> dict[int, int]:
    """{child id: parent id} of every piece (by its string) that both vocabularies hold."""
    parent_ids = {parent.piece(i): i for i in range(parent.vocab_size)}
    return {i: parent_ids[p] for i in range(child.vocab_size) if (p := child.piece(i)) in parent_ids}


def initial_weights(model: Transformer, parent: dict, tokenizer: SubwordTokenizer) -> list:
    """A fine-tuning run's first weights for `model` (built, freshly initialised; its vocabulary
    `tokenizer`): the parent checkpoint's, read into an uncompiled model (a compiled one would also
    restore the optimizer state that the checkpoint may hold). After a vocabulary update
    (`parent["vocabulary"]`) the one embedding matrix takes the parent's rows of the shared pieces
    and keeps `model`'s own for the others (so does the output bias); tied to the output projection,
    it stays one matrix."""
    parent_dir = ModelDir(parent["dir"])
    updated = parent.get("vocabulary") == "update"
    parent_config = parent_dir.read()["model"] if updated else model.config
    source = Transformer(dataclasses.replace(parent_config, dropout=model.config.dropout))
    source.build()
    restore(weights_checkpoint(source), parent["checkpoint"], weights_only=True)
    if not updated:
        return source.get_weights()
    by_piece = [model.embedding.embeddings, model.embedding.logit_bias]  # a row per id (the bias may be None)
    rows = shared_pieces(parent_dir.tokenizer(), tokenizer)  # {new id: parent id}
    weights = []
    for target, value in zip(model.weights, source.get_weights()):
        if any(target is weight for weight in by_piece):
            matrix = np.array(target.numpy())  # [V_new, ...], as initialised
            matrix[list(rows)] = value[list(rows.values())]  # value: [V_parent, ...]
            value = matrix
        weights.append(value)
    return weights


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
        first_run = values["data_config"]  # config.json keeps the first run's casing and noise
        for name in augmentation.SETTINGS:
            if getattr(data, name) != getattr(first_run, name):
                log(f"{name} {getattr(data, name)} (config.json, the first run's: {getattr(first_run, name)})")
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
    langs = data.languages() if data.multilingual else ()
    if training.init_from:
        parent, parent_config, tokenizer = parent_of(training, config)
        if training.vocabulary == "update":
            parent_tokenizer, tokenizer = tokenizer, _learn_vocabulary(config, training, data, langs, log)
            shared = len(shared_pieces(parent_tokenizer, tokenizer))
            parent.update(vocabulary="update", vocab_size=parent_config.vocab_size, shared_pieces=shared)
            config = dataclasses.replace(parent_config, vocab_size=tokenizer.vocab_size)
            log(
                f"fine-tuning from {parent['checkpoint']} (step {parent['step']}) with the new vocabulary: "
                f"{shared} of its {tokenizer.vocab_size} pieces are the parent's (their embeddings copied), "
                f"{tokenizer.vocab_size - shared} new"
            )
        else:
            _check_languages(tokenizer, langs, f"{parent['dir']}'s vocabulary; pass --vocabulary update")
            config = parent_config
            log(f"fine-tuning from {parent['checkpoint']} (step {parent['step']}) with its tokenizer")
        model_dir.write(config, training, data, tokenizer, parent=parent, target_langs=tokenizer.target_langs)
        return config, tokenizer
    if data.tokenizer_model:
        tokenizer = SubwordTokenizer.load(data.tokenizer_model)
        _check_languages(tokenizer, langs, data.tokenizer_model)
        log(f"using the {tokenizer.vocab_size}-token SentencePiece model {data.tokenizer_model}")
    else:
        tokenizer = _learn_vocabulary(config, training, data, langs, log)
    requested = config.vocab_size
    config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
    langs = tokenizer.target_langs
    model_dir.write(config, training, data, tokenizer, requested_vocab_size=requested, target_langs=langs)
    return config, tokenizer


def _check_languages(tokenizer: SubwordTokenizer, langs, what: str) -> None:
    """Refuse a vocabulary without a piece for every target language of multilingual data."""
    missing = [lang for lang in langs if lang not in tokenizer.lang_ids]
    if missing:
        tokens = ", ".join(lang_token(lang) for lang in missing)
        raise ModelDirError(f"the data translates into {', '.join(langs)}, but {tokens} is not a piece of {what}")


def _learn_vocabulary(config, training: TrainingConfig, data: DataConfig, langs, log: Callable) -> SubwordTokenizer:
    """A vocabulary of at most `config.vocab_size` pieces learned from a uniform sample of the
    training split (of each source, in the weights' proportion), with a piece per target language;
    with the data's casing and noise (`DataConfig.uppercase_share`, ...) as training reads it, so
    that ALL CAPS words get pieces of their own."""
    sample = 2 * data.tokenizer_sample  # sentences: source and target
    if len(data.sources()) > 1:  # a sample of each source, in the weights' proportion
        texts = tokenizer_sentences(data, data.tokenizer_sample, training.seed)
    else:
        spec, split = split_source(data, "train")
        reading = dict(
            tfds_data_dir=data.tfds_data_dir,
            tfds_download=data.tfds_download,
            tmx_langs=(data.source_lang, data.target_lang),
        )
        texts = sentences(
            augmentation.augmented(pairs_dataset(spec, split, data.reverse, **reading), data, training.seed)
        )
    tokenizer = SubwordTokenizer.train(
        texts, config.vocab_size, sample, seed=training.seed, target_langs=langs, user_symbols=data.symbols()
    )
    into = f" with the target-language pieces {', '.join(lang_token(lang) for lang in langs)}" if langs else ""
    log(
        f"learned a {tokenizer.vocab_size}-token subword vocabulary from {data.data} "
        f"(a uniform sample of up to {data.tokenizer_sample} pairs){into}"
    )
    return tokenizer
