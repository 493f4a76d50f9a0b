"""Alternatives at a position: the n most likely tokens after a target prefix, each continued to
a whole translation (CTranslate2's `return_alternatives`, for autocompletion: a translator types
the start of a sentence and picks among the continuations).

The expansion is one teacher-forced pass over `<s> prefix` (`scoring.py`'s pass): the n best
tokens at the position after the prefix, by log-probability over the full vocabulary, the
never-generated ids and EOS banned (CTranslate2 expands with a minimum length of 1). Each
alternative is then searched on its own as a longer prefix (`prefix.py`), with the search's
settings. The alternatives come in the order of their token's probability (CTranslate2's), each
scored as a hypothesis is: all its tokens' log-probabilities, the prefix's included, over
lp(|y|).
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.search.decoding import beam_search
from keras_transformer.search.log_probs import NEG_INF
from keras_transformer.search.search import DecodeResult
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID, never_generated


def expansions(model, source_ids, target_prefix, n: int, banned: tuple[int, ...]):
    """The n best next tokens [B, n] int32 after each prefix, but the `banned` ids; source_ids
    [B, S], target_prefix [B, P]."""
    target_prefix = tf.cast(target_prefix, tf.int32)
    start = tf.fill([tf.shape(target_prefix)[0], 1], START_ID)  # [B, 1]
    target_in = tf.concat([start, target_prefix], axis=1)  # [B, P + 1]
    log_probs = tf.nn.log_softmax(tf.cast(model((source_ids, target_in), training=False), tf.float32))  # [B, P+1, V]
    lengths = tf.reduce_sum(tf.cast(target_prefix != PAD_ID, tf.int32), axis=1)  # [B]
    after = tf.gather(log_probs, lengths, batch_dims=1)  # [B, V], the position after each prefix
    is_banned = tf.reduce_any(tf.range(after.shape[-1])[:, None] == tf.constant(banned), axis=-1)  # [V]
    return tf.math.top_k(tf.where(is_banned, NEG_INF, after), k=n).indices  # [B, n]


def alternatives(
    model,
    source_ids,
    target_prefix,
    n: int,
    decoding: DecodingConfig,
    suppress_ids=(),
    lexical_shortlist=None,
    modifiers=(),
) -> DecodeResult:
    """The n alternatives of every sentence after its prefix (see the module docstring): ids [B,
    n, L] (the prefix first), scores [B, n]; source_ids [B, S] and target_prefix [B, P] int32 as
    `beam_search` takes them; `lexical_shortlist`: each alternative's search over it (the
    alternatives themselves are the full vocabulary's); `modifiers`: the user's, in each search."""
    banned = (*never_generated(decoding.search.disable_unk), EOS_ID)  # an alternative is a word
    tokens = expansions(model, source_ids, target_prefix, n, banned)  # [B, n]
    batch, width = tf.shape(target_prefix)[0], tf.shape(target_prefix)[1]
    lengths = tf.reduce_sum(tf.cast(target_prefix != PAD_ID, tf.int32), axis=1)  # [B]
    padded = tf.pad(tf.cast(target_prefix, tf.int32), [[0, 0], [0, 1]])  # [B, P + 1]
    at_end = tf.one_hot(lengths, width + 1, dtype=tf.int32)  # [B, P + 1]
    longer = padded[:, None, :] + at_end[:, None, :] * tokens[:, :, None]  # [B, n, P + 1]
    found = beam_search(
        model,
        tf.repeat(source_ids, n, axis=0),
        decoding.replace(nbest=1),
        target_prefix=tf.reshape(longer, [batch * n, -1]),
        suppress_ids=suppress_ids,
        lexical_shortlist=lexical_shortlist,
        modifiers=modifiers,
    )
    return DecodeResult(tf.reshape(found.ids[:, 0], [batch, n, -1]), tf.reshape(found.scores[:, 0], [batch, n]))
