"""A decoding step's log-probabilities, and the few tokens of each row that a search reads.

The search reads a few tokens of each row (`best_tokens`, `LogProbs.take`), so it never writes
the [N, V] log-probabilities, whose `log_softmax` costs as much as the blocked top-k over them
(128 x 8000 here: 1.3 and 1.0 ms; `bench/decoding.py token-selection`).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import tensorflow as tf

# Scores are float32 whatever the model's compute dtype; -inf is exact in every float dtype
# (unlike -1e9, which overflows float16) and marks "no hypothesis" in a beam slot.
NEG_INF = float("-inf")


def vocabulary_size(values):
    """The size V of the last axis of `values` [N, V]: an int where the shape says it, else a
    scalar tensor (a search over a vocabulary shortlist, whose size depends on the batch)."""
    return values.shape[-1] if values.shape[-1] is not None else tf.shape(values)[-1]


class LogProbs(NamedTuple):
    """One decoding step's log-probabilities log_softmax(logits) over the full vocabulary, kept as
    `logits` [N, V] float32 (-inf where a token is ruled out: a forced prefix, a banned EOS),
    `probs`, the softmax of the logits before any was ruled out (oneDNN's on CPU: one pass), and
    `log_z` [N, 1], their log-normalizer, set when a token is ruled out. log_z = logit_j - log(p_j)
    for any token j; the best token's probability is at least 1/V, so that j gives it as exactly
    as log_softmax, and `best_tokens` has an intact row's best token at hand."""

    logits: tf.Tensor
    probs: tf.Tensor
    log_z: tf.Tensor | None = None

    @classmethod
    def of(cls, logits) -> LogProbs:
        """The log-probabilities of `logits` [N, V]."""
        logits = tf.cast(logits, tf.float32)
        return cls(logits, tf.nn.softmax(logits))

    def normalized(self) -> LogProbs:
        """The same with `log_z` set, from each row's largest logit and probability."""
        if self.log_z is not None:
            return self
        largest = tf.reduce_max(self.logits, axis=-1, keepdims=True)  # [N, 1]
        return self._replace(log_z=largest - tf.math.log(tf.reduce_max(self.probs, axis=-1, keepdims=True)))

    def rule_out(self, mask) -> LogProbs:
        """The same with log-probability -inf wherever `mask` (broadcast to [N, V]) is True."""
        return self.normalized()._replace(logits=tf.where(mask, NEG_INF, self.logits))

    def take(self, token_ids):
        """The log-probabilities of `token_ids` [N, C] int32 (C tokens of each row): [N, C]."""
        return tf.gather(self.logits, token_ids, batch_dims=1) - self.normalized().log_z

    def dense(self, banned: tuple[int, ...]):
        """[N, V] float32: every token's log-probability, -inf at the `banned` ids (sampling reads them all)."""
        ids = tf.range(vocabulary_size(self.logits))  # [V]
        is_banned = tf.reduce_any(ids[:, None] == tf.constant(banned), axis=-1)  # [V]
        return tf.where(is_banned, NEG_INF, self.logits - self.normalized().log_z)


def best_tokens(log_probs: LogProbs, count, banned: tuple[int, ...]):
    """The `count` best tokens of every row of `log_probs` [N, V] other than the `banned` ids
    (`special_tokens.never_generated`), best first: (log-probabilities, ids) [N, count +
    len(banned)] with every banned id among them at -inf, so that they rank last. Masking after
    the top-k reads K x (2K + 2) values instead of the whole [N, V]. `count` may be a tensor (a
    beam size given per request); the vocabulary's size V may be one too (a shortlist)."""
    vocab_size = vocabulary_size(log_probs.logits)
    if isinstance(count, int) and isinstance(vocab_size, int):
        values, ids = top_k_rows(log_probs.logits, min(count + len(banned), vocab_size))  # [N, count + banned]
    else:
        values, ids = tf.math.top_k(log_probs.logits, k=tf.minimum(count + len(banned), vocab_size))
    log_z = log_probs.log_z
    if log_z is None:  # no token ruled out: the best is the row's largest logit and probability
        log_z = values[:, :1] - tf.math.log(tf.gather(log_probs.probs, ids[:, :1], batch_dims=1))  # [N, 1]
    is_banned = tf.reduce_any(ids[:, :, None] == tf.constant(banned, tf.int32), axis=-1)  # [N, count + banned]
    return tf.where(is_banned, NEG_INF, values - log_z), ids


def gather_beams(values, indices):
    """values [B, N, ...], indices [B, M] into N -> [B, M, ...] (a flat gather: TFLite builtins)."""
    shape = tf.shape(values)
    batch, width = shape[0], shape[1]
    flat = tf.reshape(values, tf.concat([[batch * width], shape[2:]], axis=0))  # [B * N, ...]
    return tf.gather(flat, indices + tf.range(batch)[:, None] * width)  # [B, M, ...]


def top_k_block(vocab_size: int) -> int:
    """The block width of `top_k_rows` for rows of `vocab_size`: the smallest divisor of it from
    sqrt(V) / 2 to sqrt(V) (8000: 50; 32000: 100), so that the rows are cut into blocks without a
    padded copy, or else ceil(sqrt(V) / 2) and a padded copy. Near sqrt(V) / 2 the two top-k stages
    read about as much, and TensorFlow's top-k costs ~5 ns per value it reads
    (`bench/decoding.py token-selection`)."""
    low, high = math.ceil(math.sqrt(vocab_size) / 2), math.isqrt(vocab_size)
    return next((width for width in range(low, high + 1) if vocab_size % width == 0), low)


def top_k_rows(values, k: int, block: int | None = None):
    """The k largest entries of every row of `values` [N, V] (V static), best first, ties to the
    lower index, as `tf.math.top_k`, which this equals.

    In two stages, because top_k over a large vocabulary is slow on CPU (~5 ms for 128 x 8000
    here, the largest single cost of a beam step): the rows are cut into blocks of `block`
    (default `top_k_block(V)`), the k blocks with the largest maxima (which hold the k largest
    entries) are gathered in index order, and top_k runs over their k * block entries only.
    """
    vocab_size = values.shape[-1]
    block = top_k_block(vocab_size) if block is None else block
    blocks = -(-vocab_size // block)
    if blocks <= k:
        return tf.math.top_k(values, k=k)
    if blocks * block != vocab_size:
        values = tf.pad(values, [[0, 0], [0, blocks * block - vocab_size]], constant_values=NEG_INF)
    padded = tf.reshape(values, [-1, blocks, block])  # [N, blocks, block]
    _, best_blocks = tf.math.top_k(tf.reduce_max(padded, axis=-1), k=k)  # [N, k]
    best_blocks = tf.sort(best_blocks, axis=-1)  # index order, so that ties go to the lower index
    candidates = tf.reshape(tf.gather(padded, best_blocks, batch_dims=1), [-1, k * block])  # [N, k * block]
    top_values, top_index = tf.math.top_k(candidates, k=k)  # [N, k]
    return top_values, tf.gather(best_blocks, top_index // block, batch_dims=1) * block + top_index % block
