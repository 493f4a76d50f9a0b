"""Decoding that continues a given target prefix (interactive translation, Knowles & Koehn, 2016).

While a sentence's search is within its prefix, every token but the prefix's next one gets
log-probability -inf, so every hypothesis starts with the prefix; the forced tokens' own
log-probabilities count in the score, as those of any generated token. A prefix counts toward
the sentence's length limit (`search.decode_limits`): one that reaches it ends the
hypothesis there, cut.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.search.log_probs import vocabulary_size
from keras_transformer.search.search import Modifier, ModifierState, Step, refuse_reserved
from keras_transformer.special_tokens import PAD_ID

PREFIX_SPEC = tf.TensorSpec([None, None], tf.int32, name="target_prefix")


def within(target_prefix, position, hypotheses: int):
    """[N * H] bool: the hypotheses (H per sentence, sentence-major) whose sentence's prefix
    (`target_prefix` [N, P] int32, left-aligned, padded with PAD_ID) is longer than `position`."""
    lengths = tf.reduce_sum(tf.cast(target_prefix != PAD_ID, tf.int32), axis=1)  # [N]
    return tf.repeat(position < lengths, hypotheses)  # [N * H]


def forced_out(target_prefix, position, hypotheses: int, vocab_size):
    """[N * H, V] bool: the tokens that step `position` rules out, every token but the prefix's at
    `position` for the hypotheses `within` their prefix."""
    padded = tf.pad(target_prefix, [[0, 0], [0, 1]], constant_values=PAD_ID)  # [N, P + 1]
    forced = tf.gather(padded, tf.minimum(position, tf.shape(target_prefix)[1]), axis=1)  # [N]
    forced = tf.repeat(forced, hypotheses)  # [N * H]
    active = within(target_prefix, position, hypotheses)  # [N * H]
    other = tf.one_hot(forced, vocab_size, on_value=False, off_value=True, dtype=tf.bool)  # [N * H, V]
    return active[:, None] & other


class Prefix(Modifier):
    """Every hypothesis of sentence b starts with row b of `target_prefix` [B, P] int32
    (left-aligned, padded with PAD_ID; no start or EOS)."""

    def __init__(self, target_prefix):
        self.target_prefix = tf.cast(target_prefix, tf.int32)

    def start(self, batch, hypotheses, length) -> ModifierState:
        return ModifierState(sentence=self.target_prefix)  # [B, P], the rows of the sentences still searching

    def forces(self, state: ModifierState, step: Step):
        return within(state.sentence, step.position, step.hypotheses)  # [B*K]

    def log_probs(self, state: ModifierState, log_probs, step: Step):
        vocab_size = vocabulary_size(log_probs.logits)
        return log_probs.rule_out(forced_out(state.sentence, step.position, step.hypotheses, vocab_size))

    def token_ids(self) -> tuple:
        return (self.target_prefix,)

    def over(self, vocabulary) -> Prefix:
        return Prefix(vocabulary.to_columns(self.target_prefix))


def check_prefix(target_prefix, batch: int) -> tf.Tensor:
    """`target_prefix` as [batch, P] int32 ids (P may be 0), or a ValueError: the wrong number of
    rows, or a start or EOS id (a prefix is generated tokens: pad ends it)."""
    target_prefix = tf.convert_to_tensor(target_prefix, tf.int32)
    if target_prefix.shape.rank != 2 or target_prefix.shape[0] != batch:
        raise ValueError(f"target_prefix must be [batch {batch}, length], got shape {target_prefix.shape}")
    refuse_reserved(target_prefix, "target_prefix")
    return target_prefix
