"""A search over a vocabulary shortlist: the output layer restricted to the tokens likely in a
batch's translations (CTranslate2's `vmap`, Marian's lexical shortlist; the candidate lists of
Jean et al., 2015). `search.search(..., lexical_shortlist=)` runs it; `data/shortlist.py` builds
the shortlist from the training pairs.

Per search, the vocabulary is the union of the batch's source tokens' shortlists, the frequent
targets, the reserved ids, and every id the search's inputs force (a target prefix, constraint
phrases: each `Modifier`'s `token_ids`, so that a forced token outside the shortlists still is
produced); a suppressed sequence with a token outside it cannot be produced and is dropped.
Its V' ids, ascending, are the columns of the restricted output layer: E^T's columns and the
output bias's entries are gathered once per search (`Transformer.start_decoding(vocabulary=)`),
so every step's matmul, softmax and top-k read V' columns instead of V.

The search itself runs over columns, unchanged: the model (`Restricted`) maps the tokens it is fed
from columns to ids, each modifier's inputs are mapped from ids to columns (`Modifier.over`), and
the output from columns back to ids. The reserved ids 0..3 are the smallest ids, so they are
columns 0..3: pad, start, EOS and unknown are the same numbers in both spaces, and the search's
rules about them (never generated, EOS ends) hold as they are; ascending order keeps the full
search's ties (the lower id first).

A hypothesis' score is its log-probabilities under the softmax over the V' tokens (as
CTranslate2's and Marian's are), so it is at least its score under the full softmax, equal when
V' = V. Scoring (`scoring.py`) always reads the full softmax. Static shapes (XLA,
`max_decode_length`, the TFLite models) are not supported: V' depends on the batch.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

from keras_transformer.special_tokens import RESERVED_IDS

# A traced search takes a shortlist's arrays as inputs: one trace serves every shortlist.
TABLE_SPEC = tf.TensorSpec([None, None], tf.int32, name="shortlist_table")
FREQUENT_SPEC = tf.TensorSpec([None], tf.int32, name="shortlist_frequent")

STATIC_SHAPES = (
    "a vocabulary shortlist has a size that depends on the batch: it needs dynamic shapes (no jit_compile, "
    "max_decode_length or static shapes)"
)


def check_shortlist(decoding, lexical_shortlist) -> None:
    """A ValueError for the `shortlist` setting without a `lexical_shortlist`, or for a shortlist
    with the settings (a `DecodingConfig`) that need static shapes (`jit_compile`, `max_decode_length`)."""
    if decoding.search.shortlist and lexical_shortlist is None:
        raise ValueError(
            "the shortlist setting needs a vocabulary shortlist: Translator.from_model_dir reads the model dir's "
            "shortlist.npz (keras-transformer shortlist --model-dir DIR builds it), or pass lexical_shortlist"
        )
    if lexical_shortlist is not None and decoding.runtime.static_shapes:
        raise ValueError(STATIC_SHAPES)


class ShortlistColumns(NamedTuple):
    """The tokens of a restricted search: `ids` [V'] int32, ascending, the token id of each column;
    `columns` [V] int32, the column of each id (meaningless for an id not among `ids`)."""

    ids: tf.Tensor
    columns: tf.Tensor

    def to_ids(self, columns):
        """Token ids of `columns` (int32, any shape; column 0 is the pad id)."""
        return tf.gather(self.ids, columns)

    def to_columns(self, ids):
        """Columns of the token `ids` (int32, any shape), each among `ids`."""
        return tf.gather(self.columns, tf.cast(ids, tf.int32))

    def holds(self, ids):
        """Whether each of the token `ids` (int32, any shape) is among `ids` (bool, the same shape)."""
        ids = tf.cast(ids, tf.int32)
        return self.to_ids(self.to_columns(ids)) == ids  # an id outside maps to another (0 always is in)


def vocabulary(shortlist, source_ids, extra=()) -> ShortlistColumns:
    """The union of the shortlists of the tokens of `source_ids` [B, S], the frequent targets, the
    reserved ids and the ids of every tensor of `extra` (any shapes); `shortlist` a
    `data.shortlist.Shortlist` (of arrays or tensors)."""
    table = tf.convert_to_tensor(shortlist.table, tf.int32)  # [V, k]
    candidates = tf.gather(table, source_ids)  # [B, S, k]
    wanted = [tf.reshape(candidates, [-1]), tf.convert_to_tensor(shortlist.frequent, tf.int32), RESERVED_IDS]
    wanted += [tf.reshape(tf.cast(ids, tf.int32), [-1]) for ids in extra]
    ids = tf.concat(wanted, axis=0)  # [n]
    kept = tf.scatter_nd(ids[:, None], tf.ones_like(ids), tf.shape(table)[:1]) > 0  # [V]
    return ShortlistColumns(tf.cast(tf.where(kept)[:, 0], tf.int32), tf.cumsum(tf.cast(kept, tf.int32)) - 1)


class Restricted:
    """A decoding model (`search.DecodingModel`) whose output vocabulary is `vocabulary`'s: its
    logits are over the columns [B', V'], and the tokens it is fed are columns."""

    def __init__(self, model, vocabulary: ShortlistColumns):
        self.model = model
        self.vocabulary = vocabulary
        self.config = model.config

    def start_decoding(self, source_ids, hypotheses, max_length=None):
        return self.model.start_decoding(source_ids, hypotheses, max_length, vocabulary=self.vocabulary.ids)

    def decode_step(self, token_ids, position, cache, context):
        return self.model.decode_step(self.vocabulary.to_ids(token_ids), position, cache, context)


def restrict(model, modifiers: tuple, shortlist, source_ids):
    """(the restricted model, the modifiers over its columns, the `ShortlistColumns`) of a search of
    `source_ids` [B, S] with `modifiers` over the union of the batch's shortlists."""
    restricted = vocabulary(shortlist, source_ids, [ids for modifier in modifiers for ids in modifier.token_ids()])
    return Restricted(model, restricted), tuple(modifier.over(restricted) for modifier in modifiers), restricted
