"""Parallel text as `tf.data`: read, tokenize, filter, bucket by length, token-based batches (§5.1).

Data sources (`spec`):
- `bible-en-de`: the embedded public-domain Bible, English -> German (resources/README.md),
  split by whole books: validation = Obadiah, Jonah, Galatians, 2 Thessalonians, Philemon;
  test = Ruth, Esther, Romans, James; train = the other 57 books.
- a path to a TSV file (optionally `.gz`): `source<TAB>target` per line, or the Bible files'
  layout with a `book chapter verse <src> <tgt>` header (then split by books as above).
  A plain two-column file is split in contiguous blocks: the first 96% train, the next 2%
  validation, the last 2% test.
- `tfds:NAME` (e.g. `tfds:wmt14_translate/de-en`): a TensorFlow Datasets translation dataset
  with supervised keys (source, target); it is downloaded by TFDS, so it needs the internet.

Batches are `((source_ids [B, L], target_in_ids [B, L]), target_out_ids [B, L])`: source ends
with EOS, target_in = start + target, target_out = target + EOS. Pairs longer than
`max_length` tokens on either side are dropped. Each batch is padded to one of a few bucket
lengths (`bucket_lengths`), so the training step sees few shapes and little padding, and
holds at most `batch_tokens` padded tokens per side (the paper: ~25000).

The batches run without tf.data's autotuning. Its optimisation thread can keep a dropped
iterator's destructor waiting for up to a minute (TF 2.21: caught in `model.fit`, whose
validation iterator is replaced every epoch; 60 s stalls after ~1/3 of the epochs of a 2-hour
run), and the pipeline needs no tuning: ~3 ms per batch of the embedded corpus either way, for
a training step of ~400 ms on the `small` preset.
"""

from __future__ import annotations

import functools
import gzip
import os
from importlib import resources

import tensorflow as tf

from keras_transformer.config import BIBLE_EN_DE
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

SPLITS = ("train", "validation", "test")
BIBLE_HEADER = ("book", "chapter", "verse")
BIBLE_HELD_OUT_BOOKS = {
    "validation": frozenset({31, 32, 48, 53, 57}),  # Obadiah, Jonah, Galatians, 2 Thessalonians, Philemon
    "test": frozenset({8, 17, 45, 59}),  # Ruth, Esther, Romans, James
}
TSV_BLOCKS = {"train": (0.0, 0.96), "validation": (0.96, 0.98), "test": (0.98, 1.0)}


class DataError(ValueError):
    """Parallel text that cannot be read: a missing file, a malformed line, an unknown split."""


def _builtin_path(name: str) -> str:
    return str(resources.files("keras_transformer") / "resources" / f"{name.replace('-', '.', 1)}.tsv.gz")


def _bible_split(book: int) -> str:
    for split, books in BIBLE_HELD_OUT_BOOKS.items():
        if book in books:
            return split
    return "train"


@functools.lru_cache(maxsize=4)
def _read_tsv(path: str, mtime: float) -> dict[str, tuple[list[str], list[str]]]:
    """All splits of a TSV file, parsed once per file version."""
    opener = gzip.open if path.endswith(".gz") else open
    rows: list[tuple[str, str, str]] = []  # (split or "", source, target)
    bible = False
    try:
        with opener(path, "rt", encoding="utf-8", newline="\n") as f:
            for number, line in enumerate(f, start=1):
                line = line.rstrip("\r\n")
                if not line.strip():
                    continue
                fields = line.split("\t")
                if number == 1 and tuple(fields[:3]) == BIBLE_HEADER:
                    bible = True
                    continue
                expected = 5 if bible else 2
                if len(fields) != expected:
                    layout = "book<TAB>chapter<TAB>verse<TAB>source<TAB>target" if bible else "source<TAB>target"
                    raise DataError(f"{path}:{number}: expected {expected} tab-separated fields ({layout}), found {len(fields)}")
                if bible:
                    if not fields[0].isdigit():
                        raise DataError(f"{path}:{number}: book number {fields[0]!r} is not an integer")
                    rows.append((_bible_split(int(fields[0])), fields[3], fields[4]))
                else:
                    rows.append(("", fields[0], fields[1]))
    except FileNotFoundError:
        raise DataError(f"no such data file: {path}") from None
    except UnicodeDecodeError as error:
        raise DataError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start} of a line)") from None
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error})") from None
    if not rows:
        raise DataError(f"{path}: no sentence pairs")
    splits = {}
    for split in SPLITS:
        if bible:
            chosen = [(s, t) for tag, s, t in rows if tag == split]
        else:
            start, end = TSV_BLOCKS[split]
            chosen = [(s, t) for _, s, t in rows[round(start * len(rows)) : round(end * len(rows))]]
        splits[split] = ([s for s, _ in chosen], [t for _, t in chosen])
    return splits


def read_pairs(spec: str, split: str, reverse: bool = False, limit: int | None = None) -> tuple[list[str], list[str]]:
    """(sources, targets) of one split of a data source, as Python strings."""
    if split not in SPLITS:
        raise DataError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    if spec.startswith("tfds:"):
        sources, targets = [], []
        for source, target in pairs_dataset(spec, split).take(-1 if limit is None else limit).as_numpy_iterator():
            sources.append(source.decode("utf-8"))
            targets.append(target.decode("utf-8"))
    else:
        path = _builtin_path(spec) if spec == BIBLE_EN_DE else spec
        if not os.path.isfile(path):
            raise DataError(f"no such data file: {spec}")
        sources, targets = _read_tsv(path, os.path.getmtime(path))[split]
    if reverse:
        sources, targets = targets, sources
    if not sources:
        raise DataError(f"{spec}: the {split} split is empty")
    return (sources[:limit], targets[:limit]) if limit is not None else (sources, targets)


def pairs_dataset(spec: str, split: str, reverse: bool = False) -> tf.data.Dataset:
    """A dataset of (source, target) scalar strings."""
    if not spec.startswith("tfds:"):
        sources, targets = read_pairs(spec, split, reverse)
        return tf.data.Dataset.from_tensor_slices((sources, targets))
    import tensorflow_datasets as tfds

    name = spec[len("tfds:") :]
    try:
        dataset = tfds.load(name, split=split, as_supervised=True)
    except Exception as error:  # TFDS raises many types (unknown name, split, no network)
        raise DataError(f"cannot load {spec} split {split!r}: {str(error).splitlines()[0]}") from None
    return dataset.map(lambda s, t: (t, s)) if reverse else dataset


def bucket_lengths(max_length: int) -> list[int]:
    """Padded lengths of the buckets: 8, 12, 16, 24, 32, 48, ... (steps of ~1.4x), the last = max_length."""
    lengths, length = [], 8
    while length < max_length:
        lengths.append(length)
        length = length * 3 // 2 if length & (length - 1) == 0 else length * 4 // 3
    return lengths + [max_length]


def bucket_batch_sizes(max_length: int, batch_tokens: int, batch_multiple: int = 1) -> list[int]:
    """Sequences per batch for each bucket: at most `batch_tokens` padded tokens, a multiple of
    `batch_multiple` (the number of replicas), at least `batch_multiple`."""
    return [max(batch_multiple, batch_tokens // length // batch_multiple * batch_multiple) for length in bucket_lengths(max_length)]


def make_batches(
    pairs: tf.data.Dataset,
    tokenizer,
    *,
    max_length: int,
    batch_tokens: int,
    training: bool,
    shuffle_buffer: int = 20_000,
    seed: int = 0,
    batch_multiple: int = 1,
    start_id: int = START_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> tf.data.Dataset:
    """Tokenized, length-filtered, bucketed batches (see the module docstring).

    With `training`, pairs are shuffled and repeated forever and partial batches dropped.
    """

    def tokenize(sources, targets):  # [N] strings -> ragged [N, (len)] int32
        source = tokenizer.tokenize(sources)
        target = tokenizer.tokenize(targets)
        column = tf.ones_like(source[:, :1])  # [N, (1)]
        target_column = tf.ones_like(target[:, :1])
        return (
            tf.concat([source, column * eos_id], axis=1),
            tf.concat([target_column * start_id, target], axis=1),
            tf.concat([target, target_column * eos_id], axis=1),
        )

    def short_enough(source, target_in, target_out):
        return tf.logical_and(tf.size(source) <= max_length, tf.size(target_in) <= max_length)

    dataset = (
        pairs.batch(1024)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        .map(lambda *ids: ids)  # unbatched ragged rows -> plain 1-D tensors
        .filter(short_enough)
    )
    if training:
        dataset = dataset.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    lengths = bucket_lengths(max_length)
    dataset = dataset.bucket_by_sequence_length(
        element_length_func=lambda s, ti, to: tf.maximum(tf.size(s), tf.size(ti)),
        bucket_boundaries=[length + 1 for length in lengths],  # a bucket holds lengths < boundary
        bucket_batch_sizes=bucket_batch_sizes(max_length, batch_tokens, batch_multiple) + [1],
        padding_values=pad_id,
        pad_to_bucket_boundary=True,  # pads to boundary - 1 = the bucket's length
        drop_remainder=training,
    )
    options = tf.data.Options()
    options.autotune.enabled = False  # see the module docstring
    return dataset.map(lambda s, ti, to: ((s, ti), to)).prefetch(tf.data.AUTOTUNE).with_options(options)
