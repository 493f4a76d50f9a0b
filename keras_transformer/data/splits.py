"""Split policy: which pairs of a source are train, validation and test.

The Bible layout is split by whole books (`BIBLE_HELD_OUT_BOOKS`), never by verses, so that
near-duplicate verses do not leak into the test set; the embedded software messages are split by
a hash of their near-duplicate key (`software_split`), so that messages that differ only in case,
punctuation, placeholders, numbers or a plural "s" land in one split; a single plain TSV file is
cut in contiguous blocks by line number (`TSV_BLOCKS`); TFDS datasets carry their own splits.
`split_source` says which source and split each role of a `DataConfig` reads.
"""

from __future__ import annotations

import hashlib
import os
import re

import tensorflow as tf

from keras_transformer.config import DataConfig
from keras_transformer.data.files import count_lines, has_own_splits

SPLITS = ("train", "validation", "test")


WHOLE = "all"  # every pair of a source, whatever its splits


BIBLE_HELD_OUT_BOOKS = {
    "validation": frozenset({31, 32, 48, 53, 57}),  # Obadiah, Jonah, Galatians, 2 Thessalonians, Philemon
    "test": frozenset({8, 17, 45, 59}),  # Ruth, Esther, Romans, James
}


# Software messages: of 100 buckets of the near-duplicate key's hash, these are held out.
SOFTWARE_HELD_OUT_BUCKETS = {"validation": range(0, 3), "test": range(3, 6)}
_PLACEHOLDER = re.compile(
    r"%\([^)]*\)[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]"  # %(name)s
    r"|%[-#0 +]*\d*(?:\.\d+)?[sdifrxXeEgG]"  # %s, %d, %.2f
    r"|\{[^{}]*\}|\$\{?\w+\}?|<[^>]*>|&\w+;"  # {0}, $var, <b>, &amp;
)
_WORD = re.compile(r"[^\W\d_]+")


def near_duplicate_key(source: str) -> str:
    """The words of `source`, lowercased, without placeholders, markup, numbers and punctuation,
    each without a plural "s" (words over 3 letters, not "ss"): "Delete %(count)s Items!" -> "delete item"."""
    words = _WORD.findall(_PLACEHOLDER.sub(" ", source.lower()))
    return " ".join(w[:-1] if len(w) > 3 and w.endswith("s") and not w.endswith("ss") else w for w in words)


def software_split(source: str) -> str:
    """The split of a software message: its near-duplicate key's bucket (SHA-1, mod 100) in
    `SOFTWARE_HELD_OUT_BUCKETS`, else "train"; so near-duplicates never straddle two splits."""
    bucket = int.from_bytes(hashlib.sha1(near_duplicate_key(source).encode("utf-8")).digest()[:8], "big") % 100
    return next((split for split, held in SOFTWARE_HELD_OUT_BUCKETS.items() if bucket in held), "train")


TSV_BLOCKS = {"train": (0.0, 0.96), "validation": (0.96, 0.98), "test": (0.98, 1.0)}


def tsv_block(path: str, split: str) -> tuple[int, int]:
    """Lines (start, end] of `split` in a plain TSV file: contiguous blocks, `TSV_BLOCKS`."""
    total = count_lines(path, os.path.getmtime(path), os.path.getsize(path))
    start, end = TSV_BLOCKS[split]
    return round(start * total), round(end * total)


def in_bible_split(book, split: str):
    """book [N] int64 -> [N] bool: whether each book belongs to `split` (`BIBLE_HELD_OUT_BOOKS`)."""

    def among(books):
        return tf.reduce_any(book[:, None] == tf.constant(sorted(books), tf.int64)[None, :], axis=1)  # [N]

    if split == "train":
        return tf.logical_not(among(BIBLE_HELD_OUT_BOOKS["validation"] | BIBLE_HELD_OUT_BOOKS["test"]))
    return among(BIBLE_HELD_OUT_BOOKS[split])


def split_source(data: DataConfig, split: str) -> tuple[str, str] | None:
    """(spec, split of that source) that `data` reads for `split` ("train", "validation" or "test"),
    or None for a test split that `data` does not have.

    `valid_data` and `test_data`, when given, supply those splits: a TFDS or Bible-layout source
    its own validation or test split, a plain TSV file all its pairs. With `valid_data`, a plain
    TSV `data` is all training pairs (and has no test split); without, it is cut in `TSV_BLOCKS`.
    """
    explicit = {"validation": data.valid_data, "test": data.test_data}.get(split)
    if explicit:
        return explicit, split if has_own_splits(explicit) else WHOLE
    if data.valid_data is None or has_own_splits(data.data):
        return data.data, split
    return (data.data, WHOLE) if split == "train" else None
