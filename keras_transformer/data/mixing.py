"""Weighted sources (`--data bible-en-de:0.3,software-en-de:0.7`): training pairs drawn from
several sources in the given proportions, validation from every source, and a tokenizer sample
in the same proportions. A `DataConfig` of one source reads exactly as before.

Training draws each pair from source i with probability w_i (`sample_from_datasets` over each
source's own shuffled, repeated stream), so memory is bounded by one shuffle buffer per source,
whatever the sources' sizes: a small source is repeated more often than a large one. The
proportions are of sentence pairs read, before `make_batches` skips empty or over-long ones.

Sources of several target languages (`DataConfig.multilingual`; Johnson et al., 2017): every
source sentence of the training and validation streams starts with its source's target-language
piece, "<2fr> ..." (`tokenizer.lang_token`), which the tokenizer encodes as one id.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import tensorflow as tf

from keras_transformer.config import DataConfig
from keras_transformer.data.augmentation import augmented
from keras_transformer.data.errors import data_errors
from keras_transformer.data.sources import PAIRS_PER_READ, pairs_dataset, read_pairs
from keras_transformer.data.splits import split_source
from keras_transformer.data.tokenizer import lang_token, tag


def _reading(data: DataConfig) -> dict:
    return dict(
        reverse=data.reverse,
        tfds_data_dir=data.tfds_data_dir,
        tfds_download=data.tfds_download,
        tmx_langs=(data.source_lang, data.target_lang),
    )


def tag_sources(pairs: tf.data.Dataset, lang: str | None) -> tf.data.Dataset:
    """(source, target) pairs with `lang`'s piece before each non-empty source ("<2fr> ..."); None: as they are."""
    if lang is None:
        return pairs
    token = lang_token(lang) + " "
    non_empty = lambda text: tf.strings.length(tf.strings.strip(text)) > 0  # noqa: E731
    return pairs.map(lambda s, t: (tf.where(non_empty(s), tf.strings.join([token, s]), s), t))


def cleaned(pairs: tf.data.Dataset, data: DataConfig) -> tf.data.Dataset:
    """`pairs` without the pairs `keras-transformer clean` drops (`corpus.cleaning.clean_pairs`) when
    `data.clean`, judged afresh on every pass (each iteration runs the generator anew, so a pair
    is a duplicate of one earlier in the same pass only); else `pairs` itself."""
    if not data.clean:
        return pairs
    from keras_transformer.corpus.cleaning import clean_pairs

    def kept():
        texts = ((s.decode("utf-8", "replace"), t.decode("utf-8", "replace")) for s, t in pairs.as_numpy_iterator())
        yield from clean_pairs(texts)

    return tf.data.Dataset.from_generator(kept, output_signature=(tf.TensorSpec([], tf.string),) * 2)


def _languages(data: DataConfig) -> tuple[str | None, ...]:
    """Each source's target language, for tagging: None for all unless `data` is multilingual."""
    return data.languages() if data.multilingual else (None,) * len(data.sources())


def training_pairs(data: DataConfig, *, seed: int, shuffle_buffer: int) -> tf.data.Dataset:
    """The training split's (source, target) stream: one source's as `pairs_dataset` gives it
    (`make_batches` shuffles and repeats it), or the weighted draw from several sources' shuffled,
    repeated streams (infinite); cleaned (`cleaned`) with `data.clean`, with `data`'s casing and
    noise (`augmentation.augmented`), then tagged with their target languages if multilingual."""
    sources = data.sources()

    def read(one):
        return cleaned(pairs_dataset(*split_source(one, "train"), shuffle_seed=seed, **_reading(one)), one)

    streams = [
        tag_sources(augmented(read(one), one, seed + i), lang)
        for i, ((one, _), lang) in enumerate(zip(sources, _languages(data)))
    ]
    if len(streams) == 1:
        return streams[0]
    streams = [
        stream.shuffle(shuffle_buffer, seed=seed + i, reshuffle_each_iteration=True).repeat()
        for i, stream in enumerate(streams)
    ]
    return tf.data.Dataset.sample_from_datasets(streams, weights=[w for _, w in sources], seed=seed)


def validation_splits(data: DataConfig) -> list[tuple[str, str, str | None]]:
    """(spec, split, target language to tag with or None) of every source's validation split, or
    of `valid_data` alone when given."""
    sources = [one for one, _ in data.sources()]
    if data.valid_data:
        sources = sources[:1]
    return [(*split_source(one, "validation"), lang) for one, lang in zip(sources, _languages(data))]


def validation_pairs(data: DataConfig) -> tf.data.Dataset:
    """At most `valid_pairs` validation pairs: the first valid_pairs / n of each of the n
    validation splits, one after the other."""
    splits = validation_splits(data)
    share = max(1, data.valid_pairs // len(splits))
    streams = [
        tag_sources(pairs_dataset(spec, split, **_reading(data)), lang).take(share) for spec, split, lang in splits
    ]
    pairs = streams[0]
    for stream in streams[1:]:
        pairs = pairs.concatenate(stream)
    return pairs


def read_validation(data: DataConfig, limit: int) -> tuple[list[str], list[str]]:
    """(sources, references): the first limit / n pairs of each of the n validation splits."""
    splits = validation_splits(data)
    share = max(1, limit // len(splits))
    sources, references = [], []
    for spec, split, lang in splits:
        more = read_pairs(spec, split, limit=share, **_reading(data))
        sources += [tag(text, lang) for text in more[0]]
        references += more[1]
    return sources, references


def _reservoir(dataset: tf.data.Dataset, size: int, rng: random.Random) -> list[tuple[bytes, bytes]]:
    """A uniform random sample of `size` pairs of a finite stream (all of them if fewer)."""
    kept, seen = [], 0
    with data_errors():
        for sources, targets in dataset.batch(PAIRS_PER_READ).as_numpy_iterator():
            for pair in zip(sources, targets):
                if seen < size:
                    kept.append(pair)
                elif (index := rng.randrange(seen + 1)) < size:
                    kept[index] = pair
                seen += 1
    return kept


def tokenizer_sentences(data: DataConfig, pairs: int, seed: int) -> Iterator[str]:
    """Source and target sentences of a uniform sample of each source's training split, the
    samples in the weights' proportion: w_i x `pairs` from source i, all scaled down together
    when a source holds fewer pairs than its share; with `data`'s casing and noise, as training
    reads them. Memory: the sample (at most `pairs` pairs)."""
    rng = random.Random(seed)
    sources = data.sources()
    shares = [max(1, round(weight * pairs)) for _, weight in sources]
    samples = [
        _reservoir(augmented(pairs_dataset(*split_source(one, "train"), **_reading(one)), one, seed), share, rng)
        for (one, _), share in zip(sources, shares)
    ]
    scale = min(1.0, *(len(sample) / share for sample, share in zip(samples, shares)))
    for sample, share in zip(samples, shares):
        for source, target in rng.sample(sample, min(len(sample), max(1, round(scale * share)))):
            yield source.decode("utf-8", "replace")
            yield target.decode("utf-8", "replace")
