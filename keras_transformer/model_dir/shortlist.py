"""A model dir's vocabulary shortlist, `shortlist.npz` (`data.shortlist`: what it holds and how it
is counted): built from the pairs the model was trained on (`keras-transformer shortlist`, `train
--build-shortlist`), read, and chosen or not for a search (`model_dir_shortlist`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

from keras_transformer.data.files import has_own_splits
from keras_transformer.data.mixing import tag_sources
from keras_transformer.data.shortlist import FREQUENT, PER_SOURCE, Shortlist, count_pairs, tokenized_pairs
from keras_transformer.data.sources import pairs_dataset
from keras_transformer.data.splits import WHOLE, split_source
from keras_transformer.model_dir.directory import ModelDir

FILE = "shortlist.npz"


def load_shortlist(model_dir: str, vocab_size: int | None = None) -> Shortlist:
    """The shortlist of `model_dir`, checked against the model's `vocab_size`; a `ValueError` that
    says how to build one if it has none."""
    path = os.path.join(model_dir, FILE)
    if not os.path.isfile(path):
        raise ValueError(
            f"{model_dir} has no {FILE}: build one with `keras-transformer shortlist --model-dir {model_dir}` "
            "(or keras_transformer.model_dir.shortlist.build_shortlist), or decode with --no-shortlist"
        )
    return Shortlist.load(path, vocab_size)


def model_dir_shortlist(model_dir: str, decoding, vocab_size: int) -> tuple:
    """The `shortlist` setting of `decoding` (a `DecodingConfig`) decided for `model_dir`: (the
    settings with it True or False, the model dir's `Shortlist` or None). True reads shortlist.npz
    (a `ValueError` that says how to build it if missing); None, the default, reads it wherever the
    model dir has one and the search's shapes are dynamic (no `jit_compile`, no
    `max_decode_length`): on the held-out verses it cost 0.05 and 0.13 BLEU, within the 0.2 that
    issue 39 allows a default (bench/RESULTS.md, "Vocabulary shortlist", "The speed-quality frontier")."""
    wanted = decoding.search.shortlist
    if wanted is None:
        static = decoding.runtime.jit_compile or decoding.runtime.max_decode_length
        wanted = not static and os.path.isfile(os.path.join(model_dir, FILE))
    return decoding.replace(shortlist=wanted), load_shortlist(model_dir, vocab_size) if wanted else None


def _reading(data) -> dict:
    return dict(
        tfds_data_dir=data.tfds_data_dir,
        tfds_download=data.tfds_download,
        tmx_langs=(data.source_lang, data.target_lang),
    )


def build_shortlist(
    model_dir: str,
    data: str | None = None,
    *,
    per_source: int = PER_SOURCE,
    frequent: int = FREQUENT,
    limit: int | None = None,
    log: Callable[[str], None] = print,
) -> str:
    """Count the training pairs of `model_dir` (or all the pairs of `data`, a source spec as
    `--data` takes it: its training split, or all of a file without splits; in the model's
    direction) with its tokenizer, and write its vocabulary
    shortlist (`data.shortlist`) to `model_dir/shortlist.npz`; returns that path. `limit`: only
    the first N pairs of each source. A multilingual model's sources are counted with their
    target-language piece, as it reads them."""
    if per_source < 0 or frequent < 0:
        raise ValueError(f"per_source and frequent must be >= 0, got {per_source} and {frequent}")
    directory = ModelDir(model_dir)
    values = directory.read()
    tokenizer, trained_on = directory.tokenizer(), values["data_config"]
    if data is None:
        sources = trained_on.sources()
        langs = trained_on.languages() if trained_on.multilingual else (None,) * len(sources)
        streams = [
            tag_sources(pairs_dataset(*split_source(one, "train"), one.reverse, **_reading(one)), lang)
            for (one, _), lang in zip(sources, langs)
        ]
    else:
        split = "train" if has_own_splits(data) else WHOLE
        streams = [pairs_dataset(data, split, trained_on.reverse, **_reading(trained_on))]
    if limit is not None:
        streams = [stream.take(limit) for stream in streams]
    pairs = streams[0]
    for stream in streams[1:]:
        pairs = pairs.concatenate(stream)
    counts = count_pairs(tokenized_pairs(tokenizer, pairs), values["model"].vocab_size)
    if counts.pairs == 0:
        raise ValueError(f"no sentence pairs to count in {data or trained_on.data}")
    shortlist = counts.shortlist(per_source, frequent)
    path = os.path.join(model_dir, FILE)
    shortlist.save(path)
    log(
        f"counted {counts.pairs} pairs: {per_source} targets per source token, {len(shortlist.frequent)} frequent "
        f"targets, written to {path}"
    )
    return path
