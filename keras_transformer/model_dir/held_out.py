"""The held-out pairs that belong to a model dir: what `evaluate`, `export --check` and `bench/` score.

One reader, so that every caller reads the same pairs in the model's direction: the split of the
source the model was trained on (of weighted sources, the first; of a multilingual model's, the
first one into `target_lang`), reversed when the model was trained `--reverse`, and with the target
language a multilingual model's sources need (`HeldOut.target_lang`, for `Translator.translate`).
"""

from __future__ import annotations

from typing import NamedTuple

from keras_transformer.data.errors import DataError
from keras_transformer.data.sources import read_pairs
from keras_transformer.data.splits import split_source
from keras_transformer.model_dir.directory import ModelDir


class HeldOut(NamedTuple):
    """Held-out pairs: `sources[i]` translates to `references[i]`; `target_lang` is the language a
    multilingual model translates them into (None for a model of one target language)."""

    sources: list[str]
    references: list[str]
    target_lang: str | None
    spec: str
    split: str


def held_out(
    model_dir: str,
    split: str = "test",
    limit: int | None = None,
    *,
    target_lang: str | None = None,
    tfds_data_dir: str | None = None,
    tfds_download: bool | None = None,
) -> HeldOut:
    """The first `limit` pairs (or all) of `split` ("train", "validation" or "test") of the data the model in
    `model_dir` was trained on, in its direction. A source without that split (a TSV trained with
    `--valid-data` and no `--test-data`) is a `DataError` that says to pass the pairs instead."""
    trained_on = ModelDir(model_dir).read()["data_config"]
    sources = [source for source, _ in trained_on.sources()]
    langs = trained_on.languages()
    if trained_on.multilingual:
        target_lang = target_lang or langs[0]
        chosen = [source for source, lang in zip(sources, langs) if lang == target_lang] or sources
    else:
        target_lang, chosen = None, sources
    data = chosen[0]
    source = split_source(data, split)
    if source is None:
        raise DataError(f"{data.data} was trained with --valid-data, without --test-data: pass --data")
    download = data.tfds_download if tfds_download is None else tfds_download
    texts, references = read_pairs(
        *source,
        data.reverse,
        limit,
        tfds_data_dir=tfds_data_dir or data.tfds_data_dir,
        tfds_download=download,
        tmx_langs=(data.source_lang, data.target_lang),
    )
    return HeldOut(texts, references, target_lang, source[0], source[1])
