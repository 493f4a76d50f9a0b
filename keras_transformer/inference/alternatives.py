"""Alternatives at a position: the n most likely tokens after a target prefix, each continued to
a whole translation (CTranslate2's `return_alternatives`, for autocompletion: a translator types
the start of a sentence and picks among the continuations).

The expansion is one teacher-forced pass over `<s> prefix` (`scoring.py`'s pass): the n best
tokens at the position after the prefix, by log-probability over the full vocabulary, the
never-generated ids banned. Each alternative is then searched on its own as a longer prefix
(`prefix.py`), with the search's settings; an alternative that is EOS ends its translation
with the prefix. The alternatives come in the order of their token's probability (CTranslate2's),
each scored as a hypothesis is: all its tokens' log-probabilities, the prefix's included, over
lp(|y|).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.inference.decoding import beam_search
from keras_transformer.inference.log_probs import NEG_INF
from keras_transformer.inference.search import DecodeResult, length_penalty
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID, never_generated


def expansions(model, source_ids, target_prefix, n: int, banned: tuple[int, ...]):
    """The n best next tokens after each prefix: (tokens [B, n] int32, their log-probabilities
    [B, n], the prefixes' own log-probabilities [B]); source_ids [B, S], target_prefix [B, P]."""
    target_prefix = tf.cast(target_prefix, tf.int32)
    start = tf.fill([tf.shape(target_prefix)[0], 1], START_ID)  # [B, 1]
    target_in = tf.concat([start, target_prefix], axis=1)  # [B, P + 1]
    log_probs = tf.nn.log_softmax(tf.cast(model((source_ids, target_in), training=False), tf.float32))  # [B, P+1, V]
    lengths = tf.reduce_sum(tf.cast(target_prefix != PAD_ID, tf.int32), axis=1)  # [B]
    prefix_log_probs = tf.gather(log_probs[:, :-1], target_prefix, batch_dims=2)  # [B, P]
    prefix_log_prob = tf.reduce_sum(tf.where(target_prefix != PAD_ID, prefix_log_probs, 0.0), axis=1)  # [B]
    after = tf.gather(log_probs, lengths, batch_dims=1)  # [B, V], the position after each prefix
    is_banned = tf.reduce_any(tf.range(after.shape[-1])[:, None] == tf.constant(banned), axis=-1)  # [V]
    values, tokens = tf.math.top_k(tf.where(is_banned, NEG_INF, after), k=n)  # [B, n]
    return tokens, values, prefix_log_prob


def alternatives(model, source_ids, target_prefix, n: int, decoding: DecodingConfig, suppress_ids=()) -> DecodeResult:
    """The n alternatives of every sentence after its prefix (see the module docstring): ids [B,
    n, L] (the prefix first), scores [B, n]; source_ids [B, S] and target_prefix [B, P] int32 as
    `beam_search` takes them."""
    search = decoding.search
    tokens, token_log_probs, prefix_log_prob = expansions(
        model, source_ids, target_prefix, n, never_generated(search.disable_unk)
    )
    batch, width = tf.shape(target_prefix)[0], tf.shape(target_prefix)[1]
    lengths = tf.reduce_sum(tf.cast(target_prefix != PAD_ID, tf.int32), axis=1)  # [B]
    padded = tf.pad(tf.cast(target_prefix, tf.int32), [[0, 0], [0, 1]])  # [B, P + 1]
    at_end = tf.one_hot(lengths, width + 1, dtype=tf.int32)  # [B, P + 1]
    ended = tokens == EOS_ID  # [B, n]: the prefix is the whole translation
    longer = padded[:, None, :] + at_end[:, None, :] * tf.where(ended, 0, tokens)[:, :, None]  # [B, n, P + 1]
    found = beam_search(
        model,
        tf.repeat(source_ids, n, axis=0),
        decoding.replace(nbest=1),
        target_prefix=tf.reshape(longer, [batch * n, -1]),
        suppress_ids=suppress_ids,
    )
    ids = tf.reshape(found.ids[:, 0], [batch, n, -1])  # [B, n, L]
    scores = tf.reshape(found.scores[:, 0], [batch, n])  # [B, n]
    # An EOS alternative: the prefix and EOS, scored from the expansion's pass.
    eos_ids = padded[:, None, :] + at_end[:, None, :] * EOS_ID  # [B, 1, P + 1]
    length = tf.maximum(tf.shape(ids)[2], width + 1)
    eos_ids = tf.pad(eos_ids, [[0, 0], [0, 0], [0, length - width - 1]])  # [B, 1, L']
    ids = tf.pad(ids, [[0, 0], [0, 0], [0, length - tf.shape(ids)[2]]])  # [B, n, L']
    eos_scores = (prefix_log_prob[:, None] + token_log_probs) / length_penalty(lengths[:, None] + 1, search.alpha)
    return DecodeResult(tf.where(ended[:, :, None], eos_ids, ids), tf.where(ended, eos_scores, scores))
