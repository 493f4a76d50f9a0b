"""Tokenize, filter, bucket by length, token-based batches (Vaswani et al., 2017, §5.1).

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

import tensorflow as tf

from keras_transformer.config import TrainingConfig
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID


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
    shuffle_buffer: int = TrainingConfig.shuffle_buffer,
    seed: int = 0,
    batch_multiple: int = 1,
    max_length_ratio: float | None = None,
    skipped: SkippedPairs | None = None,
    subword_alpha: float = 0.0,
) -> tf.data.Dataset:
    """Tokenized, filtered, bucketed batches (see the module docstring).

    A pair is skipped when a side is empty, when a side with its start or EOS exceeds
    `max_length` tokens, or when one side has more than `max_length_ratio` (None: no limit)
    times the other's tokens; `skipped` counts them. With `training`, pairs are shuffled in a
    buffer of `shuffle_buffer` pairs and repeated forever, and partial batches dropped; without,
    a partial batch is padded with rows of pad to a multiple of `batch_multiple`.
    `subword_alpha` > 0 (with `training` only): each pair's segmentation is sampled anew every
    time the stream reads it (subword regularisation, Kudo, 2018; `SubwordTokenizer.tokenize`).
    """
    alpha = subword_alpha if training else 0.0

    def tokenize(sources, targets):  # [N] strings -> ragged [M, (len)] int32, the pairs kept
        source = tokenizer.tokenize_source(sources, alpha)  # [N, (len)]: a target-language piece is one id
        target = tokenizer.tokenize(targets, alpha)
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
            tf.concat([source, column * EOS_ID], axis=1),
            tf.concat([target_column * START_ID, target], axis=1),
            tf.concat([target, target_column * EOS_ID], axis=1),
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
        padding_values=PAD_ID,
        pad_to_bucket_boundary=True,  # pads to boundary - 1 = the bucket's length
        drop_remainder=training,
    )
    if not training and batch_multiple > 1:
        # A partial batch gets rows of pad up to a multiple of the replicas: a batch that does not
        # split evenly crashes Keras' symbolic build under tf.distribute (TF 2.21, Keras 3.15).
        # Pad targets carry no loss and no accuracy (but weigh in Keras' per-batch mean of the loss).
        def pad_rows(*ids):  # [B, L] each -> [B', L], B' the next multiple of batch_multiple
            rows = -tf.shape(ids[0])[0] % batch_multiple
            return tuple(tf.pad(x, [[0, rows], [0, 0]], constant_values=PAD_ID) for x in ids)

        dataset = dataset.map(pad_rows)
    options = tf.data.Options()
    options.autotune.enabled = False  # see the module docstring
    return dataset.map(lambda s, ti, to: ((s, ti), to)).prefetch(tf.data.AUTOTUNE).with_options(options)
