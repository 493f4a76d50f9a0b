"""Parallel text as `tf.data`: read, tokenize, filter, bucket by length, token-based batches (§5.1).

Data sources (`spec`):
- `bible-en-de`: the embedded public-domain Bible, English -> German (resources/README.md),
  split by whole books: validation = Obadiah, Jonah, Galatians, 2 Thessalonians, Philemon;
  test = Ruth, Esther, Romans, James; train = the other 57 books.
- TSV files (optionally `.gz`): a path, a glob (`shards/train-*.tsv.gz`) or several of them
  separated by commas. Each line is `source<TAB>target`, or every file has the Bible files'
  layout, a `book chapter verse <src> <tgt>` header, and is split by books as above.
- `tfds:NAME` (e.g. `tfds:wmt14_translate/de-en`): a TensorFlow Datasets translation dataset
  with supervised keys (source, target), read from `tfds_data_dir` (default `$TFDS_DATA_DIR`,
  else ~/tensorflow_datasets); one that is not prepared there is downloaded, which needs the
  internet.

Splits (`split`): "train", "validation", "test", or `WHOLE` (every pair). The Bible layout and
TFDS carry their own splits. A single plain TSV file is cut in contiguous blocks by line
number, the first 96% train, the next 2% validation, the last 2% test (`TSV_BLOCKS`); several
plain files have no implicit split. `DataConfig` names which source and split each role uses
(`split_source`).

The files are streamed: lines are read, parsed and checked by `tf.data` ops (a batch of lines
at a time), never held in Python, so memory does not grow with the corpus. Several files are
read one after the other, or, when training, interleaved in a new order every pass. A malformed line, a non-integer book
number and invalid UTF-8 are errors that name the file and line (`DataError`, raised where the
stream is read: wrap its readers in `data_errors()`); blank lines are skipped.

Batches are `((source_ids [B, L], target_in_ids [B, L]), target_out_ids [B, L])`: source ends
with EOS, target_in = start + target, target_out = target + EOS. Pairs with an empty side,
longer than `max_length` tokens on either side, or with one side more than `max_length_ratio`
times as long as the other (in subword tokens) are skipped and counted (`SkippedPairs`).
Each batch is padded to one of a few bucket lengths (`bucket_lengths`), so the training step
sees few shapes and little padding, and holds at most `batch_tokens` padded tokens per side
(the paper: ~25000).

The batches run without tf.data's autotuning. Its optimisation thread can keep a dropped
iterator's destructor waiting for up to a minute (TF 2.21: caught in `model.fit`, whose
validation iterator is replaced every epoch; 60 s stalls after ~1/3 of the epochs of a 2-hour
run), and the pipeline needs no tuning: ~3 ms per batch of the embedded corpus either way, for
a training step of ~400 ms on the `small` preset.
"""

from __future__ import annotations

import codecs
import contextlib
import functools
import glob
import gzip
import os
import re
from collections.abc import Iterator
from importlib import resources

import tensorflow as tf

from keras_transformer.config import BIBLE_EN_DE, DataConfig
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

SPLITS = ("train", "validation", "test")
WHOLE = "all"  # every pair of a source, whatever its splits
BIBLE_HEADER = ("book", "chapter", "verse")
BIBLE_HELD_OUT_BOOKS = {
    "validation": frozenset({31, 32, 48, 53, 57}),  # Obadiah, Jonah, Galatians, 2 Thessalonians, Philemon
    "test": frozenset({8, 17, 45, 59}),  # Ruth, Esther, Romans, James
}
TSV_BLOCKS = {"train": (0.0, 0.96), "validation": (0.96, 0.98), "test": (0.98, 1.0)}
LINES_PER_BATCH = 1024  # lines parsed at once by vectorised string ops
PAIRS_PER_READ = 4096  # pairs moved to Python at once by `read_pairs` and `sentences`
_MARK = "DataError: "  # starts the message of every check of the stream, so `data_errors` knows its own
_ASSERTION = re.compile(r"assertion failed: \[" + re.escape(_MARK) + r"(.*?)\]\n", re.S)


class DataError(ValueError):
    """Parallel text that cannot be read: a missing file, a malformed line, an unknown split."""


@contextlib.contextmanager
def data_errors():
    """Re-raises a failed check of the stream (a malformed line, invalid UTF-8) as a `DataError`
    with its file and line; wrap whatever iterates a `pairs_dataset` (`read_pairs`, `model.fit`)."""
    try:
        yield
    except tf.errors.InvalidArgumentError as error:
        match = _ASSERTION.search(error.message)
        if match is None:
            raise
        # tf.debugging.Assert prints strings C-escaped
        raise DataError(codecs.escape_decode(match.group(1).encode("utf-8"))[0].decode("utf-8", "replace")) from None


def data_files(spec: str) -> list[str]:
    """The files of a TSV source: bible-en-de's, or every path and glob of a comma-separated list, in order."""
    if spec == BIBLE_EN_DE:
        return [str(resources.files("keras_transformer") / "resources" / "bible.en-de.tsv.gz")]
    files = []
    for pattern in (part.strip() for part in spec.split(",")):
        if any(c in pattern for c in "*?["):
            matches = sorted(glob.glob(pattern))
            if not matches:
                raise DataError(f"no data files match {pattern}")
            files += matches
        elif os.path.isfile(pattern):
            files.append(pattern)
        elif pattern:
            raise DataError(f"no such data file: {pattern}")
    if not files:
        raise DataError(f"no data files in {spec!r}")
    return files


def _open(path: str):
    return gzip.open(path, "rb") if path.endswith(".gz") else open(path, "rb")


def is_bible_layout(files: list[str]) -> bool:
    """Whether the files start with the Bible layout's `book<TAB>chapter<TAB>verse...` header; all or none must."""
    header = [field.encode() for field in BIBLE_HEADER]
    bible = []
    for path in files:
        try:
            with _open(path) as f:
                bible.append(f.readline().rstrip(b"\r\n").split(b"\t")[:3] == header)
        except (OSError, EOFError) as error:
            raise DataError(f"{path}: cannot read ({error})") from None
    if any(bible) and not all(bible):
        names = ", ".join(files)
        raise DataError(f"{names}: some files have the Bible layout's book<TAB>chapter<TAB>verse header, some not")
    return all(bible)


def has_own_splits(spec: str) -> bool:
    """Whether a source carries its splits (TFDS, the Bible layout) rather than being one set of pairs."""
    return spec.startswith("tfds:") or is_bible_layout(data_files(spec))


@functools.lru_cache(maxsize=16)
def _count_lines(path: str, mtime: float, size: int) -> int:
    """Lines in a file (a last line without a newline included), counted once per file version."""
    lines, last = 0, b"\n"
    try:
        with _open(path) as f:
            while chunk := f.read(1 << 22):
                lines += chunk.count(b"\n")
                last = chunk[-1:]
    except (OSError, EOFError) as error:
        raise DataError(f"{path}: cannot read ({error})") from None
    return lines + (last != b"\n")


def _block(path: str, split: str) -> tuple[int, int]:
    """Lines (start, end] of `split` in a plain TSV file: contiguous blocks, `TSV_BLOCKS`."""
    total = _count_lines(path, os.path.getmtime(path), os.path.getsize(path))
    start, end = TSV_BLOCKS[split]
    return round(start * total), round(end * total)


def _check_lines(ok, path, numbers, message):
    """An assertion that all lines are `ok` [N] bool; else its message names the first bad line
    (its file `path`, its number from `numbers` [N]) and `message` (scalar or [N] strings)."""
    first = tf.argmin(tf.cast(ok, tf.int32))  # the first False, if any
    message = tf.broadcast_to(message, tf.shape(ok))[first]
    where = tf.strings.join([_MARK, path, ":", tf.strings.as_string(numbers[first]), ": ", message])
    return tf.debugging.Assert(tf.reduce_all(ok), [where])


def _in_bible_split(book, split: str):
    """book [N] int64 -> [N] bool: whether each book belongs to `split` (`BIBLE_HELD_OUT_BOOKS`)."""

    def among(books):
        return tf.reduce_any(book[:, None] == tf.constant(sorted(books), tf.int64)[None, :], axis=1)  # [N]

    if split == "train":
        return tf.logical_not(among(BIBLE_HELD_OUT_BOOKS["validation"] | BIBLE_HELD_OUT_BOOKS["test"]))
    return among(BIBLE_HELD_OUT_BOOKS[split])


def _parse_lines(path, numbers, lines, bible: bool, split: str):
    """numbers [N] int64, lines [N] string of file `path` -> (sources [M], targets [M]): the pairs of
    `split` among them. Blank lines (and the Bible header) are skipped; a malformed line fails."""
    lines = tf.strings.regex_replace(lines, "\r$", "")  # [N]
    width, layout = (5, "book<TAB>chapter<TAB>verse<TAB>source<TAB>target") if bible else (2, "source<TAB>target")
    content = tf.logical_not(tf.strings.regex_full_match(lines, r"\s*"))  # [N]
    if bible:
        content = tf.logical_and(content, numbers > 1)
    fields = tf.strings.split(lines, "\t")  # [N, (fields)]
    found = fields.row_lengths()  # [N]
    checks = [
        # RE2 matches UTF-8 text only: cheaper than tf.strings.unicode_transcode (3.6 s vs 20 s for 2M lines)
        _check_lines(tf.strings.regex_full_match(lines, "(?s).*"), path, numbers, "not UTF-8 text"),
        _check_lines(
            tf.logical_or(tf.logical_not(content), tf.equal(found, width)),
            path,
            numbers,
            tf.strings.join([f"expected {width} tab-separated fields ({layout}), found ", tf.strings.as_string(found)]),
        ),
    ]
    with tf.control_dependencies(checks):
        table = fields.to_tensor("", shape=[None, width])  # [N, width]
    if bible:
        book = table[:, 0]  # [N]
        integer = tf.logical_or(tf.logical_not(content), tf.strings.regex_full_match(book, "[0-9]+"))
        message = tf.strings.join(["book number '", book, "' is not an integer"])
        with tf.control_dependencies([_check_lines(integer, path, numbers, message)]):
            book = tf.strings.to_number(tf.where(content, book, "0"), tf.int64)  # [N]
        if split != WHOLE:
            content = tf.logical_and(content, _in_bible_split(book, split))
        sources, targets = table[:, 3], table[:, 4]
    else:
        sources, targets = table[:, 0], table[:, 1]
    return tf.boolean_mask(sources, content), tf.boolean_mask(targets, content)  # [M], [M]


def _file_pairs(path, bible: bool, split: str, lines: tuple[int, int] | None) -> tf.data.Dataset:
    """The pairs of `split` in one file (`path` a string tensor), only its lines (start, end] if given."""
    compression = tf.where(tf.strings.regex_full_match(path, r".*\.gz"), "GZIP", "")
    text = tf.data.TextLineDataset(path, compression_type=compression, buffer_size=1 << 20)
    first = 1
    if lines is not None:
        text = text.skip(lines[0]).take(lines[1] - lines[0])
        first += lines[0]

    def parse(batch, text):  # the batch's index, its lines [N]
        numbers = first + batch * LINES_PER_BATCH + tf.range(tf.size(text, tf.int64))  # [N]
        return _parse_lines(path, numbers, text, bible, split)

    return text.batch(LINES_PER_BATCH).enumerate().map(parse, num_parallel_calls=tf.data.AUTOTUNE).unbatch()


def _tfds_pairs(spec: str, split: str, data_dir: str | None) -> tf.data.Dataset:
    import tensorflow_datasets as tfds

    name = spec[len("tfds:") :]

    def first_line(error):
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__

    try:  # TFDS raises many types (unknown name, split, no network)
        builder = tfds.builder(name, data_dir=data_dir)
    except Exception as error:
        raise DataError(f"cannot load {spec}: {first_line(error)}") from None
    if not builder.is_prepared():
        try:
            builder.download_and_prepare()
        except Exception as error:
            where = data_dir or os.environ.get("TFDS_DATA_DIR", "~/tensorflow_datasets")
            raise DataError(
                f"cannot load {spec}: it is not prepared in {where} and downloading it failed ({first_line(error)}); "
                f"prepare it where there is internet (tfds build {name} --data_dir DIR) and pass --tfds-data-dir DIR"
            ) from None
    try:
        return builder.as_dataset(split=split, as_supervised=True)
    except Exception as error:
        raise DataError(f"cannot load {spec} split {split!r}: {first_line(error)}") from None


def pairs_dataset(
    spec: str, split: str, reverse: bool = False, *, shuffle_seed: int | None = None, tfds_data_dir: str | None = None
) -> tf.data.Dataset:
    """A stream of (source, target) scalar strings: one split of a data source (see the module docstring).

    `shuffle_seed` (training): several files are read in a new random order every pass, up to 8
    at a time, a pair from each in turn; without it, one after the other.
    """
    if split not in SPLITS + (WHOLE,):
        raise DataError(f"unknown split {split!r}; choose one of {', '.join(SPLITS + (WHOLE,))}")
    if spec.startswith("tfds:"):
        dataset = _tfds_pairs(spec, "all" if split == WHOLE else split, tfds_data_dir)
    else:
        files = data_files(spec)
        bible = is_bible_layout(files)
        lines = None
        if not bible and split != WHOLE:
            if len(files) > 1:
                raise DataError(
                    f"{spec}: several plain TSV files have no implicit {split} split; "
                    "name the validation and test data (--valid-data, --test-data)"
                )
            lines = _block(files[0], split)
        paths = tf.data.Dataset.from_tensor_slices(files)
        cycle = 1  # the files one after the other
        if shuffle_seed is not None:  # a new order every pass, reading up to 8 files at a time, pair by pair
            paths = paths.shuffle(len(files), seed=shuffle_seed, reshuffle_each_iteration=True)
            cycle = min(len(files), 8)
        dataset = paths.interleave(
            lambda path: _file_pairs(path, bible, split, lines),
            cycle_length=cycle,
            num_parallel_calls=cycle if cycle > 1 else None,
            deterministic=True if cycle > 1 else None,
        )
    return dataset.map(lambda s, t: (t, s)) if reverse else dataset


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


def read_pairs(
    spec: str, split: str, reverse: bool = False, limit: int | None = None, *, tfds_data_dir: str | None = None
) -> tuple[list[str], list[str]]:
    """(sources, targets) of one split of a data source, as Python strings: the first `limit`
    pairs, or all of them (then memory grows with the split)."""
    dataset = pairs_dataset(spec, split, reverse, tfds_data_dir=tfds_data_dir)
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


class SkippedPairs:
    """Pairs that `make_batches` read and those it skipped, by reason, counted as the stream runs
    (in variables, so that the graph counts them); `summary()` says it in one line."""

    REASONS = ("empty", "too_long", "lopsided")

    def __init__(self):
        self.read = tf.Variable(0, dtype=tf.int64, trainable=False, name="pairs_read")
        self.skipped = {
            reason: tf.Variable(0, dtype=tf.int64, trainable=False, name=f"skipped_{reason}") for reason in self.REASONS
        }

    def add(self, read, **skipped) -> None:
        """Count `read` pairs and, per reason, the skipped ones (scalar tensors)."""
        self.read.assign_add(tf.cast(read, tf.int64))
        for reason, count in skipped.items():
            self.skipped[reason].assign_add(tf.cast(count, tf.int64))

    def summary(self, max_length: int, max_length_ratio: float | None) -> str:
        """E.g. "read 1200 pairs, skipped 3: 1 with an empty side, 2 longer than 128 tokens"."""
        labels = {
            "empty": "with an empty side",
            "too_long": f"longer than {max_length} tokens",
            "lopsided": f"with a length ratio above {max_length_ratio:g}" if max_length_ratio else "",
        }
        counts = {reason: int(variable.numpy()) for reason, variable in self.skipped.items()}
        reasons = ", ".join(f"{count} {labels[reason]}" for reason, count in counts.items() if count)
        read = f"read {int(self.read.numpy())} pairs, skipped {sum(counts.values())}"
        return f"{read}: {reasons}" if reasons else read


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
    return [
        max(batch_multiple, batch_tokens // length // batch_multiple * batch_multiple)
        for length in bucket_lengths(max_length)
    ]


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
    max_length_ratio: float | None = None,
    skipped: SkippedPairs | None = None,
    start_id: int = START_ID,
    eos_id: int = EOS_ID,
    pad_id: int = PAD_ID,
) -> tf.data.Dataset:
    """Tokenized, filtered, bucketed batches (see the module docstring).

    A pair is skipped when a side is empty, when a side with its start or EOS exceeds
    `max_length` tokens, or when one side has more than `max_length_ratio` (None: no limit)
    times the other's tokens; `skipped` counts them. With `training`, pairs are shuffled in a
    buffer of `shuffle_buffer` pairs and repeated forever, and partial batches dropped; without,
    a partial batch is padded with rows of pad to a multiple of `batch_multiple`.
    """

    def tokenize(sources, targets):  # [N] strings -> ragged [M, (len)] int32, the pairs kept
        source = tokenizer.tokenize(sources)  # [N, (len)]
        target = tokenizer.tokenize(targets)
        source_length, target_length = source.row_lengths(), target.row_lengths()  # [N]
        empty = tf.logical_or(source_length == 0, target_length == 0)
        too_long = tf.logical_and(tf.logical_not(empty), tf.maximum(source_length, target_length) + 1 > max_length)
        lopsided = tf.zeros_like(empty)
        if max_length_ratio is not None:
            longer = tf.cast(tf.maximum(source_length, target_length), tf.float32)  # [N]
            ratio = longer / tf.cast(tf.minimum(source_length, target_length), tf.float32)  # [N]
            lopsided = tf.logical_and(tf.logical_not(empty | too_long), ratio > max_length_ratio)
        if skipped is not None:
            count = lambda mask: tf.reduce_sum(tf.cast(mask, tf.int64))
            skipped.add(tf.size(sources), empty=count(empty), too_long=count(too_long), lopsided=count(lopsided))
        keep = tf.logical_not(empty | too_long | lopsided)  # [N]
        source, target = tf.ragged.boolean_mask(source, keep), tf.ragged.boolean_mask(target, keep)  # [M, (len)]
        column = tf.ones_like(source[:, :1])  # [M, (1)]
        target_column = tf.ones_like(target[:, :1])
        return (
            tf.concat([source, column * eos_id], axis=1),
            tf.concat([target_column * start_id, target], axis=1),
            tf.concat([target, target_column * eos_id], axis=1),
        )

    dataset = (
        pairs.batch(1024)
        .map(tokenize, num_parallel_calls=tf.data.AUTOTUNE)
        .unbatch()
        .map(lambda *ids: ids)  # unbatched ragged rows -> plain 1-D tensors
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
    if not training and batch_multiple > 1:
        # A partial batch gets rows of pad up to a multiple of the replicas: a batch that does not
        # split evenly crashes Keras' symbolic build under tf.distribute (TF 2.21, Keras 3.15).
        # Pad targets carry no loss and no accuracy (but weigh in Keras' per-batch mean of the loss).
        def pad_rows(*ids):  # [B, L] each -> [B', L], B' the next multiple of batch_multiple
            rows = -tf.shape(ids[0])[0] % batch_multiple
            return tuple(tf.pad(x, [[0, rows], [0, 0]], constant_values=pad_id) for x in ids)

        dataset = dataset.map(pad_rows)
    options = tf.data.Options()
    options.autotune.enabled = False  # see the module docstring
    return dataset.map(lambda s, ti, to: ((s, ti), to)).prefetch(tf.data.AUTOTUNE).with_options(options)
