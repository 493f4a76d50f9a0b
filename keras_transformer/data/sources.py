"""A data source as a stream of (source, target) strings: TSV files, TMX files (`tmx.py`) or a TFDS dataset, one split
of it, and the same read into Python lists (`read_pairs`) or sentences (`sentences`).

The files are streamed: never held in Python, so memory does not grow with the corpus. Several
files are read one after the other, or, when training, interleaved in a new order every pass.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import tensorflow as tf

from keras_transformer.data import tmx
from keras_transformer.data.errors import DataError, data_errors
from keras_transformer.data.files import SPLIT_FILES, data_files, is_bible_layout, split_files
from keras_transformer.data.parsing import file_pairs
from keras_transformer.data.splits import SPLITS, TSV_BLOCKS, WHOLE, tsv_block

PAIRS_PER_READ = 4096  # pairs moved to Python at once by `read_pairs` and `sentences`


def _tfds_pairs(spec: str, split: str, data_dir: str | None, download: bool) -> tf.data.Dataset:
    """A prepared TFDS dataset's split; one not prepared in `data_dir` is downloaded and prepared
    only with `download` (the network's reach is not probed: without it, TFDS retries for minutes).
    """
    import tensorflow_datasets as tfds

    name = spec[len("tfds:") :]

    def first_line(error):
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__

    try:  # TFDS raises many types (unknown name, split, no network)
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as error:
        raise DataError(f"cannot load {spec}: {first_line(error)}") from None
    if not builder.is_prepared():
        where = data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")
        if not download:
            raise DataError(
                f"cannot load {spec}: it is not prepared in {where}; prepare it where there is internet "
                f"(tfds build {name} --data_dir DIR) and pass --tfds-data-dir DIR, or pass --tfds-download "
                "to download and prepare it now"
            )
        tfds.disable_progress_bar()  # its download bars are not our output
        try:
            builder.download_and_prepare()
        except Exception as error:
            raise DataError(
                f"cannot load {spec}: it is not prepared in {where} and downloading it failed ({first_line(error)}); "
                f"prepare it where there is internet (tfds build {name} --data_dir DIR) and pass --tfds-data-dir DIR"
            ) from None
    try:
        return builder.as_dataset(split=split, as_supervised=True)
    except Exception as error:
        raise DataError(f"cannot load {spec} split {split!r}: {first_line(error)}") from None


def _tmx_dataset(spec: str, files: list[str], split: str, shuffle_seed: int | None, langs) -> tf.data.Dataset:
    """The pairs of TMX files (`tmx.py`), split as a plain TSV file is (one file, blocks of its units)."""
    if not all(map(tmx.is_tmx, files)):
        raise DataError(f"{spec}: TMX and TSV files in one source; name them as two (a weighted mixture)")
    if split != WHOLE and len(files) > 1:
        raise DataError(
            f"{spec}: several TMX files have no implicit {split} split; "
            "name the validation and test data (--valid-data, --test-data)"
        )
    blocks = {}
    for path in files:
        tmx.languages(path, langs)  # checks the file, and that its languages are known, before training starts
        if split != WHOLE:
            total = tmx.count_units(path)
            start, end = TSV_BLOCKS[split]
            blocks[path] = (round(start * total), round(end * total))
    order = list(files)
    if shuffle_seed is not None:  # a new order of the files every pass, as for TSV files
        paths = tf.data.Dataset.from_tensor_slices(order).shuffle(len(order), seed=shuffle_seed)
    else:
        paths = tf.data.Dataset.from_tensor_slices(order)
    spec_out = (tf.TensorSpec([], tf.string), tf.TensorSpec([], tf.string))

    def pairs(path):
        path = path.decode("utf-8")
        return tmx.tmx_pairs(path, blocks.get(path), langs)

    return paths.interleave(lambda path: tf.data.Dataset.from_generator(pairs, output_signature=spec_out, args=(path,)))


def pairs_dataset(
    spec: str,
    split: str,
    reverse: bool = False,
    *,
    shuffle_seed: int | None = None,
    tfds_data_dir: str | None = None,
    tfds_download: bool = False,
    tmx_langs: tuple[str | None, str | None] = (None, None),
) -> tf.data.Dataset:
    """A stream of (source, target) scalar strings: one split of a data source (see the module docstring).

    `shuffle_seed` (training): several files are read in a new random order every pass, up to 8
    at a time, a pair from each in turn; without it, one after the other. `tfds_download`: download
    and prepare a tfds:NAME that is not prepared in `tfds_data_dir` (else a one-line `DataError`).
    `tmx_langs`: the (source, target) languages to read of TMX files (`tmx.languages`; None: found).
    """
    if split not in SPLITS + (WHOLE,):
        raise DataError(f"unknown split {split!r}; choose one of {', '.join(SPLITS + (WHOLE,))}")
    if spec.startswith("tfds:"):
        dataset = _tfds_pairs(spec, "all" if split == WHOLE else split, tfds_data_dir, tfds_download)
    else:
        files = data_files(spec) if spec not in SPLIT_FILES or split == WHOLE else split_files(spec, split)
        if any(map(tmx.is_tmx, files)):
            dataset = _tmx_dataset(spec, files, split, shuffle_seed, tmx_langs)
            return dataset.map(lambda s, t: (t, s)) if reverse else dataset
        bible = is_bible_layout(files)
        lines = None
        if not bible and split != WHOLE and spec not in SPLIT_FILES:
            if len(files) > 1:
                raise DataError(
                    f"{spec}: several plain TSV files have no implicit {split} split; "
                    "name the validation and test data (--valid-data, --test-data)"
                )
            lines = tsv_block(files[0], split)
        paths = tf.data.Dataset.from_tensor_slices(files)
        cycle = 1  # the files one after the other
        if shuffle_seed is not None:  # a new order every pass, reading up to 8 files at a time, pair by pair
            paths = paths.shuffle(len(files), seed=shuffle_seed, reshuffle_each_iteration=True)
            cycle = min(len(files), 8)
        dataset = paths.interleave(
            lambda path: file_pairs(path, bible, split, lines),
            cycle_length=cycle,
            num_parallel_calls=cycle if cycle > 1 else None,
            deterministic=True if cycle > 1 else None,
        )
    return dataset.map(lambda s, t: (t, s)) if reverse else dataset


def read_pairs(
    spec: str,
    split: str,
    reverse: bool = False,
    limit: int | None = None,
    *,
    tfds_data_dir: str | None = None,
    tfds_download: bool = False,
    tmx_langs: tuple[str | None, str | None] = (None, None),
) -> tuple[list[str], list[str]]:
    """(sources, targets) of one split of a data source, as Python strings: the first `limit`
    pairs, or all of them (then memory grows with the split)."""
    reading = dict(tfds_data_dir=tfds_data_dir, tfds_download=tfds_download, tmx_langs=tmx_langs)
    dataset = pairs_dataset(spec, split, reverse, **reading)
    if limit is not None:
        dataset = dataset.take(limit)
    sources, targets = [], []
    with data_errors():
        for source_batch, target_batch in dataset.batch(PAIRS_PER_READ).as_numpy_iterator():
            sources += [text.decode("utf-8", "replace") for text in source_batch]
            targets += [text.decode("utf-8", "replace") for text in target_batch]
    if not sources:
        raise DataError(f"{spec}: no sentence pairs in the {split} split")
    return sources, targets


def sentences(pairs: tf.data.Dataset) -> Iterator[str]:
    """Source and target of every pair, as Python strings, streamed (a tokenizer samples from them)."""
    with data_errors():
        for source_batch, target_batch in pairs.batch(PAIRS_PER_READ).prefetch(1).as_numpy_iterator():
            for source, target in zip(source_batch, target_batch):
                yield source.decode("utf-8", "replace")
                yield target.decode("utf-8", "replace")
