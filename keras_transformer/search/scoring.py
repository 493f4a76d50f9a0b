"""Scoring given translations: log p(y | x) of a target under the model, by teacher forcing (§3).

One forward pass `model((source_ids, target_in_ids))` with target_in = <s> y_1 .. y_n gives the
decoder's distribution at every position at once; the log-probability of y_1 .. y_n, EOS is the
sum of log_softmax(logits)[y_t], over the full vocabulary with the never-generated ids banned
(-inf; `special_tokens.never_generated`), as the search computes a hypothesis's
(`log_probs.best_tokens`), so that a search's output scores what the search said. The
normalised score divides by the search's length penalty lp(n + 1) (Wu et al., 2016, Eq. 14;
`search.length_penalty`).
"""

from __future__ import annotations

import dataclasses

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.search.log_probs import NEG_INF
from keras_transformer.search.search import SOURCE_SPEC, check_source_ids, compiled, length_penalty
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID, never_generated

TARGET_SPEC = tf.TensorSpec([None, None], tf.int32, name="target_ids")


@dataclasses.dataclass(frozen=True)
class ScoreResult:
    """Per pair: `score` [B] float32 = `log_prob` / lp(`tokens`); `log_prob` [B] float32, the
    sum of `token_log_probs` [B, T + 1] (0 after each target's EOS); `tokens` [B] int32, the
    target's tokens, EOS included."""

    score: tf.Tensor
    log_prob: tf.Tensor
    tokens: tf.Tensor
    token_log_probs: tf.Tensor


def with_eos(target_ids):
    """target_ids [B, T] (pad-padded, no EOS) -> ([B, T + 1] with EOS after each row's tokens, lengths [B])."""
    lengths = tf.reduce_sum(tf.cast(target_ids != PAD_ID, tf.int32), axis=1)  # [B]
    padded = tf.pad(target_ids, [[0, 0], [0, 1]], constant_values=PAD_ID)  # [B, T + 1]
    at_end = tf.one_hot(lengths, tf.shape(padded)[1], on_value=True, off_value=False, dtype=tf.bool)  # [B, T + 1]
    return tf.where(at_end, EOS_ID, padded), lengths


def score_targets(model, source_ids, target_ids, *, alpha: float, disable_unk: bool = False):
    """The traceable scoring: source_ids [B, S] and target_ids [B, T] int32 (pad-padded; the
    target's tokens without start or EOS, at most max_length - 1 of them) ->
    (score [B], log_prob [B], tokens [B], token_log_probs [B, T + 1]) (`ScoreResult`)."""
    source_ids, target_ids = tf.cast(source_ids, tf.int32), tf.cast(target_ids, tf.int32)
    target_out, lengths = with_eos(target_ids)  # [B, T + 1], [B]
    start = tf.fill([tf.shape(target_ids)[0], 1], START_ID)  # [B, 1]
    target_in = tf.concat([start, target_ids], axis=1)  # [B, T + 1]
    logits = model((source_ids, target_in), training=False)  # [B, T + 1, V]
    log_probs = tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1)  # [B, T + 1, V]
    token_log_probs = tf.gather(log_probs, target_out, batch_dims=2)  # [B, T + 1]
    banned = tf.reduce_any(target_out[:, :, None] == tf.constant(never_generated(disable_unk)), axis=-1)  # -inf
    counted = tf.sequence_mask(lengths + 1, tf.shape(target_out)[1])  # [B, T + 1]: the tokens and EOS
    token_log_probs = tf.where(counted, tf.where(banned, NEG_INF, token_log_probs), 0.0)  # [B, T + 1]
    log_prob = tf.reduce_sum(token_log_probs, axis=1)  # [B]
    tokens = lengths + 1  # [B]
    return log_prob / length_penalty(tokens, alpha), log_prob, tokens, token_log_probs


def score(model, source_ids, target_ids, decoding: DecodingConfig | None = None, **overrides) -> ScoreResult:
    """Score every (source, target) pair: source_ids [B, S] int32 as `beam_search` takes them,
    target_ids [B, T] int32 as `with_eos` takes them; the length penalty's alpha from `decoding`
    (with `overrides` of its fields). Traced once per model and alpha."""
    decoding = (decoding or DecodingConfig()).replace(**overrides)
    source_ids = check_source_ids(source_ids, model.config.max_length)
    target_ids = tf.convert_to_tensor(target_ids, tf.int32)
    if source_ids.shape.rank != 2 or target_ids.shape.rank != 2 or source_ids.shape[0] != target_ids.shape[0]:
        shapes = f"{source_ids.shape} and {target_ids.shape}"
        raise ValueError(f"source_ids and target_ids must be [batch, length] of one batch, got {shapes}")
    longest = model.config.max_length
    if target_ids.shape[1] is not None and target_ids.shape[1] > longest - 1:
        raise ValueError(f"target of {target_ids.shape[1]} tokens is longer than the model's max_length {longest} - 1")
    settings = {"alpha": decoding.search.alpha, "disable_unk": decoding.search.disable_unk}
    function = compiled(model, "score", score_targets, inputs=(SOURCE_SPEC, TARGET_SPEC), **settings)
    return ScoreResult(*function(source_ids, target_ids))
