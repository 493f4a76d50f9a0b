"""Decoding controls: modifiers of the next token's logits, with CTranslate2's names and semantics.

Each changes the logits before the softmax, as CTranslate2's logits processors and Hugging
Face's do (`translate_batch(repetition_penalty=, no_repeat_ngram_size=, min_decoding_length=,
suppress_sequences=)`), so that the search's log-probabilities are renormalised over what is
left; a disabled token's logit is -inf. Each setting may be a Python number or a tensor (a
served model's per-request value, `translate_with_options`). `disable_unk` is not here: the
unknown token joins the ids that are never generated (`special_tokens.never_generated`).

The tokens "generated so far" are a hypothesis' tokens from its first, a target prefix's
included (CTranslate2's `return_prefix`, on by default), and never the start token.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.search.log_probs import NEG_INF, gather_beams, vocabulary_size
from keras_transformer.search.search import Modifier, ModifierState, Step
from keras_transformer.special_tokens import EOS_ID, PAD_ID, UNK_ID


def generated(step: Step):
    """(every alive hypothesis' tokens [N, L] int32, [N, L] bool: the positions generated so far)."""
    ids = tf.reshape(step.alive_ids, [-1, tf.shape(step.alive_ids)[2]])  # [N, L]
    return ids, tf.broadcast_to(tf.range(tf.shape(ids)[1]) < step.position, tf.shape(ids))


def marked(logits, token_ids, where):
    """[N, V] bool: True at token `token_ids` [N, M] of each row of `logits` [N, V] wherever `where`
    [N, M] (a scatter-add of counts: a TFLite builtin, whatever the repeats)."""
    rows = tf.broadcast_to(tf.range(tf.shape(logits)[0])[:, None], tf.shape(token_ids))  # [N, M]
    indices = tf.reshape(tf.stack([rows, token_ids], axis=-1), [-1, 2])  # [N * M, 2]
    counts = tf.scatter_nd(indices, tf.reshape(tf.cast(where, tf.int32), [-1]), tf.shape(logits))  # [N, V]
    return counts > 0


def disable(logits, token_ids, where):
    """`logits` [N, V] with -inf at token `token_ids` [N, M] of each row wherever `where` [N, M]."""
    return tf.where(marked(logits, token_ids, where), NEG_INF, logits)


class PerSentence(Modifier):
    """A control whose setting is one value for the batch or one per sentence ([B]: a served
    batch of requests with settings of their own), kept in the slot's sentence part so that it
    leaves the batch with its sentence."""

    def __init__(self, value):
        self.value = value

    def start(self, batch, hypotheses, length) -> ModifierState:
        return ModifierState(sentence=tf.broadcast_to(self.value, [batch]))  # [B]

    @staticmethod
    def per_row(state: ModifierState, step: Step):
        """The setting of every hypothesis, [N, 1] (N = B * K, sentence-major)."""
        return tf.repeat(state.sentence, step.hypotheses)[:, None]


class MinLength(PerSentence):
    """`min_decoding_length`: no EOS before that many tokens have been generated."""

    def logits(self, state: ModifierState, logits, step: Step):
        early = step.position < self.per_row(state, step)  # [N, 1]
        return tf.where(early & (tf.range(vocabulary_size(logits)) == EOS_ID), NEG_INF, logits)  # [N, V]


class RepetitionPenalty(PerSentence):
    """`repetition_penalty` p (Keskar et al., 2019, CTRL, §4.1): the logit x of every token already
    generated becomes x / p if x > 0, else x * p (p > 1 discourages repeats; 1 changes nothing)."""

    def logits(self, state: ModifierState, logits, step: Step):
        ids, done = generated(step)  # [N, L]
        penalty = self.per_row(state, step)  # [N, 1]
        penalized = tf.where(logits > 0, logits / penalty, logits * penalty)  # [N, V]
        return tf.where(marked(logits, ids, done), penalized, logits)


class NoRepeatNgram(PerSentence):
    """`no_repeat_ngram_size` n: no n-gram twice in a hypothesis (n = 0: off). A token is disabled
    where it would end an n-gram that the hypothesis holds already: it followed an earlier
    occurrence of the hypothesis' last n - 1 tokens.

    The slot keeps, per hypothesis and position q, `run` [B, K, L] int32: the length of the
    longest common suffix of the tokens before q and the whole hypothesis (Baeza-Yates & Gonnet's
    shift-and matching, as the constraints' partial matches), updated by one compare a token:
    token q is disabled when run[q] >= n - 1."""

    def start(self, batch, hypotheses, length) -> ModifierState:
        run = tf.zeros([batch, hypotheses, length], tf.int32)  # [B, K, L]
        return super().start(batch, hypotheses, length)._replace(alive=run)

    def logits(self, state: ModifierState, logits, step: Step):
        ids, done = generated(step)  # [N, L]
        size = self.per_row(state, step)  # [N, 1]
        repeats = done & (tf.reshape(state.alive, tf.shape(ids)) >= size - 1) & (size > 0)  # [N, L]
        return disable(logits, ids, repeats)

    def advance(self, state: ModifierState, parent, tokens, step: Step):
        ids = gather_beams(step.alive_ids, parent)  # [B, M, L], the parents' tokens
        run = gather_beams(state.alive, parent)  # [B, M, L]
        before = tf.pad(ids[:, :, :-1], [[0, 0], [0, 0], [1, 0]], constant_values=-1)  # [B, M, L]: token q - 1
        shifted = tf.pad(run[:, :, :-1], [[0, 0], [0, 0], [1, 0]])  # [B, M, L]: run[q - 1]
        return tf.where(before == tokens[:, :, None], shifted + 1, 0)  # [B, M, L]


class SuppressSequences(Modifier):
    """`suppress_sequences`: token sequences never produced, as rows of `sequences` [S, T] int32
    (left-aligned, pad-padded): a one-token sequence is never generated; a longer one's last
    token is disabled after its other tokens."""

    def __init__(self, sequences):
        self.sequences = tf.cast(sequences, tf.int32)  # [S, T]

    def logits(self, state: ModifierState, logits, step: Step):
        ids, _ = generated(step)  # [N, L]
        lengths = tf.reduce_sum(tf.cast(self.sequences != PAD_ID, tf.int32), axis=1)  # [S]
        width = tf.shape(self.sequences)[1]
        # The hypothesis' last T - 1 tokens, aligned with each sequence's first len - 1: token i of
        # sequence s is compared with generated position position - (len_s - 1) + i.
        where = step.position - (lengths[:, None] - 1) + tf.range(width)[None, :]  # [S, T]
        head = tf.range(width)[None, :] < lengths[:, None] - 1  # [S, T]: the tokens before the last
        seen = tf.gather(ids, tf.clip_by_value(where, 0, tf.shape(ids)[1] - 1), axis=1)  # [N, S, T]
        follows = tf.reduce_all(~head | ((seen == self.sequences) & (where >= 0)), axis=-1)  # [N, S]
        last = tf.gather(
            self.sequences, tf.maximum(lengths - 1, 0), batch_dims=1
        )  # [S] (an empty row: pad, never disabled)
        count = tf.shape(ids)[0]
        return disable(logits, tf.tile(last[None], [count, 1]), follows & (lengths > 0))

    def over(self, vocabulary) -> SuppressSequences:
        """Over a shortlist's columns: a sequence with a token outside the shortlist can never be
        produced, so it is dropped (an all-pad row); its tokens do not join the shortlist."""
        possible = tf.reduce_all(vocabulary.holds(self.sequences), axis=1, keepdims=True)  # [S, 1]
        return SuppressSequences(tf.where(possible, vocabulary.to_columns(self.sequences), PAD_ID))  # [S, T]


def controls(search, suppress_ids=()) -> tuple[Modifier, ...]:
    """The modifiers of the controls that `search` (`config.SearchSettings`) turns on;
    `suppress_ids`: its `suppress_sequences` as token ids (a tuple of tuples, tokenized by the
    caller, which has the tokenizer)."""
    modifiers = []
    if search.min_decoding_length > 0:
        modifiers.append(MinLength(search.min_decoding_length))
    if search.repetition_penalty != 1.0:
        modifiers.append(RepetitionPenalty(search.repetition_penalty))
    if search.no_repeat_ngram_size > 0:
        modifiers.append(NoRepeatNgram(search.no_repeat_ngram_size))
    if suppress_ids:
        width = max(map(len, suppress_ids))
        modifiers.append(SuppressSequences([list(ids) + [PAD_ID] * (width - len(ids)) for ids in suppress_ids]))
    return tuple(modifiers)


def suppressed_ids(tokenizer, texts) -> tuple[tuple[int, ...], ...]:
    """The token ids of each `suppress_sequences` text as the decoder would write it (after a
    space, as `constraints.phrase_rows` tokenizes a phrase), or a ValueError for a text with a
    character the vocabulary lacks (it could never be matched)."""
    rows = tokenizer.tokenize(list(texts)).to_list() if texts else []
    for text, row in zip(texts, rows):
        if UNK_ID in row or not row:
            raise ValueError(f"suppressed sequence {text!r} has characters the model's vocabulary lacks")
    return tuple(tuple(row) for row in rows)
