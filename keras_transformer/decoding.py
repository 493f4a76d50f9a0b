"""Autoregressive decoding as `tf.function`s over the model's key/value cache (§3, §6.1).

The search never sees layers: it drives `model.encode`, `model.init_cache` and
`model.decode_step(token_ids, position, cache) -> (logits, cache)`. The cache has a fixed
length, so every step has the same shapes.

Maximum output length per sentence (§6.1): `a * source_length + b` tokens, EOS included
(paper: a = 1, b = 50), capped at the model's `max_length`. A hypothesis that reaches it
without EOS ends there.
"""

from __future__ import annotations

import dataclasses
import weakref

import tensorflow as tf

LENGTH_A, LENGTH_B = 1.0, 50


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """Hypotheses best first: `ids` int32 [batch, beam, length] (pad after EOS), `scores` float32 [batch, beam]."""

    ids: tf.Tensor
    scores: tf.Tensor


def decode_limits(source_ids, pad_id: int, max_length: int, a: float = LENGTH_A, b: int = LENGTH_B):
    """Per-sentence maximum number of generated tokens, [B] int32: min(a * |source| + b, max_length)."""
    source_length = tf.reduce_sum(tf.cast(source_ids != pad_id, tf.float32), axis=1)  # [B]
    limit = tf.cast(tf.math.ceil(a * source_length), tf.int32) + b
    return tf.clip_by_value(limit, 1, max_length)


def token_log_probs(logits, pad_id: int, start_id: int):
    """log-softmax over the full vocabulary, with pad and start masked to -inf (never generated)."""
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)  # [B, V]
    vocab_size = tf.shape(log_probs)[-1]
    banned = tf.reduce_max(tf.one_hot([pad_id, start_id], vocab_size, dtype=tf.float32), axis=0)  # [V]
    return tf.where(banned > 0, tf.constant(-float("inf"), tf.float32), log_probs)


def _greedy(model, source_ids, a: float, b: int):
    config = model.config
    source_ids = tf.cast(source_ids, tf.int32)  # [B, S]
    batch = tf.shape(source_ids)[0]
    limits = decode_limits(source_ids, config.pad_id, config.max_length, a, b)  # [B]
    length = tf.reduce_max(tf.concat([limits, [1]], axis=0))
    memory, source_mask = model.encode(source_ids, training=False)
    cache = model.init_cache(memory, source_mask, length)

    def step(position, token, ids, scores, finished, cache):
        logits, cache = model.decode_step(token, position, cache)  # [B, V]
        log_probs = token_log_probs(logits, config.pad_id, config.start_id)  # [B, V]
        next_token = tf.argmax(log_probs, axis=-1, output_type=tf.int32)  # [B]
        next_token = tf.where(finished, config.pad_id, next_token)
        gained = tf.gather(log_probs, next_token, batch_dims=1)  # [B]
        scores += tf.where(finished, 0.0, gained)
        ids += tf.one_hot(position, length, dtype=tf.int32)[None, :] * next_token[:, None]  # [B, L]
        finished = finished | (next_token == config.eos_id) | (position + 1 >= limits)
        return position + 1, next_token, ids, scores, finished, cache

    _, _, ids, scores, _, _ = tf.while_loop(
        lambda position, token, ids, scores, finished, cache: tf.logical_not(tf.reduce_all(finished)),
        step,
        (
            tf.constant(0),
            tf.fill([batch], config.start_id),
            tf.zeros([batch, length], tf.int32),
            tf.zeros([batch], tf.float32),
            tf.zeros([batch], tf.bool),
            cache,
        ),
    )
    return ids, scores


_COMPILED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def compiled(model, name: str, function, **static):
    """`function(model, source_ids, **static)` as a `tf.function` over [batch, length] int32 ids,
    traced once per model and static arguments."""
    functions = _COMPILED.setdefault(model, {})
    key = (name, tuple(sorted(static.items())))
    if key not in functions:
        functions[key] = tf.function(
            lambda source_ids: function(model, source_ids, **static),
            input_signature=[tf.TensorSpec([None, None], tf.int32, name="source_ids")],
        )
    return functions[key]


def greedy_search(model, source_ids, *, a: float = LENGTH_A, b: int = LENGTH_B) -> DecodeResult:
    """Greedy decoding: ids [B, 1, L], scores [B, 1] = the sum of the chosen tokens' log-probabilities."""
    ids, scores = compiled(model, "greedy", _greedy, a=float(a), b=int(b))(tf.convert_to_tensor(source_ids, tf.int32))
    return DecodeResult(ids=ids[:, None], scores=scores[:, None])
