"""Lexically constrained beam search: given target phrases must appear in every output.

Dynamic beam allocation (Post & Vilar, 2018, "Fast Lexically Constrained Decoding with Dynamic
Beam Allocation for Neural Machine Translation"), vectorised over sentences and beams as in Hu et
al. (2019, "Improved Lexically Constrained Decoding for Translation and Monolingual Rewriting")
and fairseq's `LexicallyConstrainedBeamSearch`, in the TensorFlow graph (so in the SavedModel).

Input: `constraints` int32 [B, C, T]: C phrases per sentence of at most T subword ids each,
left-aligned and padded with PAD_ID; an all-pad phrase is no constraint. Unordered: each phrase
must appear somewhere in the output, as a contiguous run of its ids.

Per hypothesis the search keeps which phrases it has met ([B, K, C] bool) and which prefixes of
each phrase it ends with ([B, K, C, T] bool: bit j says "the hypothesis ends with the phrase's
first j + 1 ids"; updated per token by a shift and a compare, the shift-and string matcher of
Baeza-Yates & Gonnet, 1992, so overlapping and repeated partial matches are exact). Deviation
from Post & Vilar, who track one phrase in progress and drop it on any other token: a
hypothesis here keeps every partial match it still ends with.

Each step (`Constraints`, a modifier of the beam search: `beam.py`), the candidates of every
alive hypothesis are its model's best 2K tokens (as in the unconstrained search) plus, for each
unmet phrase, the phrase's next id after its longest partial match (its first id when none),
with that id's log-probability from the full log-softmax; a constraint id already among the
hypothesis' candidates is not added twice. A candidate's bank is its number of constraint ids
met: the ids of the phrases it has met plus its longest partial match of an unmet phrase. The 2K
candidates kept are taken round-robin over the banks, fullest bank first, each bank's best first
(fairseq's order; Post & Vilar allocate K / (C + 1) slots per bank and hand unfilled ones on);
of these, the ending ones among the first K are finished (as in the unconstrained search), and
the first K that do not end stay alive. EOS gets log-probability -inf for a hypothesis with an
unmet phrase, except at its length limit, where every hypothesis ends anyway (an output is never
empty): a hypothesis that cannot fit its phrases before the limit ends unmet. Finished
hypotheses that meet every phrase rank above those that do not, by score within each group.

With every phrase empty the banks are all 0, nothing is banned, and the search returns exactly
the unconstrained search's ids and scores (tests/test_constraints.py). A constrained search is
a separate traced search (never XLA's), so the unconstrained one keeps its graph and speed.
Beam size 1 (greedy) with constraints always takes the candidate of the fullest bank, so it
writes the phrases first: allowed, but weak; use K >= 2 x (phrases + 1).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from keras_transformer.search.log_probs import NEG_INF, gather_beams, vocabulary_size
from keras_transformer.search.search import Modifier, ModifierState, Step, refuse_reserved
from keras_transformer.special_tokens import EOS_ID, PAD_ID

CONSTRAINTS_SPEC = tf.TensorSpec([None, None, None], tf.int32, name="constraints")


def padded_constraints(constraints):
    """constraints [B, C, T] -> [B, C + 1, T + 1], one more empty phrase and one more pad column,
    so that no dimension is empty (a batch without phrases, phrases of no ids)."""
    return tf.pad(tf.cast(constraints, tf.int32), [[0, 0], [0, 1], [0, 1]], constant_values=PAD_ID)


def phrase_lengths(constraints):
    """[B, C] int32: the ids of each phrase (its non-pad ids)."""
    return tf.reduce_sum(tf.cast(constraints != PAD_ID, tf.int32), axis=-1)


def _banks_round_robin(scores, banks, most, count):
    """The `count` candidates [B, count] (indices into N) that dynamic beam allocation keeps:
    sorted by score, then round-robin over the banks (fullest first): the best of every bank,
    then the second of every bank, ... (fairseq's order). Candidates at -inf come last, in
    index order. scores [B, N] float32, banks [B, N] int32 in 0..most, most [B] int32."""
    ranked_scores, by_score = tf.math.top_k(scores, k=tf.shape(scores)[1])  # [B, N], stable
    ranked_banks = tf.gather(banks, by_score, batch_dims=1)  # [B, N]
    width = tf.reduce_max(tf.concat([most, [0]], axis=0)) + 1  # banks 0..most
    in_bank = tf.one_hot(ranked_banks, width, dtype=tf.int32)  # [B, N, banks]
    rank = tf.reduce_sum(tf.math.cumsum(in_bank, axis=1, exclusive=True) * in_bank, axis=-1)  # [B, N] within bank
    most = tf.expand_dims(most, 1)  # [B, 1]
    slot = rank * (most + 1) + (most - ranked_banks)  # [B, N] round-robin slot
    slot = tf.where(ranked_scores > NEG_INF, slot, tf.int32.max)
    _, picked = tf.math.top_k(-slot, k=count)  # [B, count], ties (-inf candidates) keep the score order
    return tf.gather(by_score, picked, batch_dims=1)


class Constraints(Modifier):
    """Every phrase of row b of `constraints` [B, C, T] int32 in every output of sentence b, by
    dynamic beam allocation (see the module docstring). Its slot: per sentence, the phrases
    (`padded_constraints`); per hypothesis, (met [B, K, C] bool: phrase c appears in it;
    partial [B, K, C, T] bool: it ends with the first j + 1 ids of phrase c)."""

    completes = True

    def __init__(self, constraints):
        self.constraints = tf.cast(constraints, tf.int32)  # [B, C, T]
        self.phrases = padded_constraints(constraints)  # [B, C + 1, T + 1]

    def start(self, batch, hypotheses, length) -> ModifierState:
        shape = tf.shape(self.phrases)  # [B, C, T]
        met = tf.tile(tf.expand_dims(phrase_lengths(self.phrases) == 0, 1), [1, hypotheses, 1])  # [B, K, C]
        partial = tf.zeros([shape[0], hypotheses, shape[1], shape[2]], tf.bool)  # [B, K, C, T]
        return ModifierState(sentence=self.phrases, alive=(met, partial))

    def log_probs(self, state: ModifierState, log_probs, step: Step):
        """EOS is banned while a phrase is unmet, but at the length limit (where every candidate ends)."""
        met, _ = state.alive
        unmet = tf.reduce_any(~met, axis=-1)  # [B, K]
        ban_eos = unmet & (step.position + 1 < tf.expand_dims(step.limits, 1))  # [B, K]
        is_eos = tf.range(vocabulary_size(log_probs.logits)) == EOS_ID  # [V]
        return log_probs.rule_out(tf.reshape(ban_eos, [-1, 1]) & is_eos)  # [B*K, V]

    def candidates(self, state: ModifierState, log_probs, tokens, step: Step):
        """The next id of every unmet phrase after the hypothesis' longest partial match of it (its
        first id when none), with its log-probability; -inf where already among `tokens` [B, K, P]."""
        phrases, (met, partial) = state.sentence, state.alive
        batch, k = tf.shape(tokens)[0], tf.shape(tokens)[1]
        count, width = tf.shape(phrases)[1], tf.shape(phrases)[2]
        unmet = ~met  # [B, K, C]
        progress = tf.reduce_max(tf.where(partial, tf.range(1, width + 1), 0), axis=-1)  # [B, K, C]
        next_tokens = tf.reduce_sum(tf.expand_dims(phrases, 1) * tf.one_hot(progress, width, dtype=tf.int32), axis=-1)
        next_values = tf.reshape(log_probs.take(tf.reshape(next_tokens, [batch * k, -1])), [batch, k, -1])  # [B, K, C]
        duplicate = tf.reduce_any(tf.expand_dims(next_tokens, 3) == tf.expand_dims(tokens, 2), axis=-1)  # [B, K, C]
        earlier = tf.expand_dims(tf.range(count), 0) < tf.expand_dims(tf.range(count), 1)  # [C, C']: c' < c
        same = tf.expand_dims(next_tokens, 3) == tf.expand_dims(next_tokens, 2)  # [B, K, C, C']
        duplicate |= tf.reduce_any(same & tf.expand_dims(unmet, 2) & earlier, axis=-1)
        return next_tokens, tf.where(unmet & ~duplicate, next_values, NEG_INF)  # [B, K, C] each

    def _matches(self, phrases, met, partial, tokens):
        """Each candidate's (met [B, N, C], partial [B, N, C, T], bank [B, N]) from its parent's met
        and partial [B, N, ...] and its token [B, N]: every partial match shifted by one id, kept
        where the token continues it; its bank counts the constraint ids it has met."""
        width = tf.shape(phrases)[2]
        lengths = phrase_lengths(phrases)  # [B, C]
        # ends_with[j]: the parent ends with the phrase's first j ids (bit j - 1; always for j = 0); a
        # gather, not a slice: TFLite has no strided slice of booleans.
        previous = tf.gather(partial, tf.maximum(tf.range(width) - 1, 0), axis=-1)  # [B, N, C, T]
        ends_with = previous | (tf.range(width) == 0)  # [B, N, C, T]
        within = tf.range(width) < tf.expand_dims(lengths, 2)  # [B, C, T]
        same_token = tf.expand_dims(phrases, 1) == tf.reshape(tokens, [tf.shape(tokens)[0], -1, 1, 1])  # [B, N, C, T]
        partial = ends_with & same_token & tf.expand_dims(within, 1)  # [B, N, C, T]
        last = tf.one_hot(lengths - 1, width, on_value=True, off_value=False, dtype=tf.bool)  # [B, C, T]
        met = met | tf.reduce_any(partial & tf.expand_dims(last, 1), axis=-1)  # [B, N, C]
        progress = tf.where(met, 0, tf.reduce_max(tf.where(partial, tf.range(1, width + 1), 0), axis=-1))  # [B, N, C]
        bank = tf.reduce_sum(tf.where(met, tf.expand_dims(lengths, 1), 0), axis=-1) + tf.reduce_max(progress, axis=-1)
        return met, partial, bank

    def rank(self, state: ModifierState, scores, beams, tokens, count, step: Step):
        """Dynamic beam allocation's order: round-robin over the banks, fullest first."""
        phrases, (met, partial) = state.sentence, state.alive
        _, _, banks = self._matches(phrases, tf.gather(met, beams, axis=1), tf.gather(partial, beams, axis=1), tokens)
        return _banks_round_robin(scores, banks, tf.reduce_sum(phrase_lengths(phrases), axis=1), count)

    def advance(self, state: ModifierState, parent, tokens, step: Step):
        phrases, (met, partial) = state.sentence, state.alive
        met, partial, _ = self._matches(phrases, gather_beams(met, parent), gather_beams(partial, parent), tokens)
        return met, partial

    def complete(self, alive):
        met, _ = alive
        return tf.reduce_all(met, axis=-1)  # [B, M]

    def token_ids(self) -> tuple:
        return (self.constraints,)

    def over(self, vocabulary) -> Constraints:
        return Constraints(vocabulary.to_columns(self.constraints))


def check_constraints(constraints, batch: int) -> tf.Tensor:
    """`constraints` as [batch, C, T] int32 ids (C, T may be 0), or a ValueError: the wrong number
    of rows, a start or EOS id (a phrase is generated tokens: pad ends it), or a pad before an
    id (phrases are left-aligned)."""
    constraints = tf.convert_to_tensor(constraints, tf.int32)
    if constraints.shape.rank != 3 or constraints.shape[0] != batch:
        raise ValueError(f"constraints must be [batch {batch}, phrases, length], got shape {constraints.shape}")
    refuse_reserved(constraints, "constraints", "hold")
    ids = constraints.numpy() != PAD_ID  # [B, C, T]
    gaps = ids[..., 1:] & ~np.logical_and.accumulate(ids, axis=-1)[..., :-1]  # an id after a pad
    if gaps.any():
        raise ValueError(f"constraints must be left-aligned, pad only at the end (row {int(np.argwhere(gaps)[0][0])})")
    return constraints


def meets(ids, phrases) -> bool:
    """Whether the id sequence `ids` (a list) holds every phrase (lists of ids; empty: none) as a
    contiguous run: the contract the search keeps, for tests and benchmarks."""
    text = [int(t) for t in ids]
    return all(
        not phrase or any(text[i : i + len(phrase)] == list(phrase) for i in range(len(text) - len(phrase) + 1))
        for phrase in phrases
    )


def per_text(constraints, count: int) -> list[list[str]] | None:
    """`constraints` as `Translator` takes them (None, one phrase, one list of phrases for all
    `count` texts, or one list per text) as one list of phrases per text (None for None)."""
    if constraints is None:
        return None
    if isinstance(constraints, str):
        constraints = [constraints]
    constraints = list(constraints)
    if all(isinstance(phrase, str) for phrase in constraints):
        constraints = [constraints] * count
    if len(constraints) != count:
        raise ValueError(f"{count} texts but {len(constraints)} lists of constraints")
    return [list(text) for text in constraints]


def phrase_rows(tokenizer, constraints, count: int, max_length: int) -> list[list[np.ndarray]] | None:
    """The token ids of every text's phrases, for `Translator`: `constraints` None (none), one
    phrase (a str) or one list of phrases for all `count` texts, or one list per text. A phrase
    is tokenized alone, which is the tokenization SentencePiece gives it after a space (its first
    piece starts with the word-boundary mark), so the detokenized output holds the phrase's text.
    A ValueError for an empty phrase, one with the unknown token (it detokenizes to nothing), or
    one of more than max_length - 1 tokens (no output is longer)."""
    constraints = per_text(constraints, count)
    if constraints is None:
        return None
    from keras_transformer.data.tokenizer import UNK_ID

    phrases = sorted({phrase for text in constraints for phrase in text})
    for phrase in phrases:
        if not isinstance(phrase, str) or not phrase.strip():
            raise ValueError(f"a constraint phrase must be non-empty text, got {phrase!r}")
    ids = dict(zip(phrases, tokenizer.tokenize(phrases).to_list() if phrases else []))
    for phrase, row in ids.items():
        if UNK_ID in row:
            raise ValueError(f"constraint phrase {phrase!r} has characters the model's vocabulary lacks")
        if len(row) > max_length - 1:
            raise ValueError(
                f"constraint phrase {phrase!r} has {len(row)} tokens, more than max_length - 1 = {max_length - 1}"
            )
    return [[np.array(ids[phrase], np.int32) for phrase in text] for text in constraints]


def padded_phrases(rows: list[list[np.ndarray]]) -> np.ndarray:
    """[B, C, T] int32 from every text's phrase ids (C: the most phrases, T: the longest; at
    least 1 each), padded with PAD_ID."""
    phrases = max([1, *map(len, rows)])
    width = max([1, *(len(ids) for text in rows for ids in text)])
    batch = np.full((len(rows), phrases, width), PAD_ID, np.int32)
    for i, text in enumerate(rows):
        for j, ids in enumerate(text):
            batch[i, j, : len(ids)] = ids
    return batch
