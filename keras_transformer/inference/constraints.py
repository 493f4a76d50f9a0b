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

Each step (`_constrained_step`), the candidates of every alive hypothesis are its model's best
2K tokens (as in the unconstrained search) plus, for each unmet phrase, the phrase's next id
after its longest partial match (its first id when none), with that id's log-probability from
the full log-softmax; a constraint id already among the hypothesis' candidates is not added
twice. A candidate's bank is its number of constraint ids met: the ids of the phrases it has
met plus its longest partial match of an unmet phrase. The 2K candidates kept are taken
round-robin over the banks, fullest bank first, each bank's best first (fairseq's order; Post &
Vilar allocate K / (C + 1) slots per bank and hand unfilled ones on); of these, the ending ones
among the first K are finished (as in the unconstrained search), and the first K that do not
end stay alive. EOS gets log-probability -inf for a hypothesis with an unmet phrase, except at
its length limit, where every hypothesis ends anyway (an output is never empty): a hypothesis
that cannot fit its phrases before the limit ends unmet. Finished hypotheses that meet every
phrase rank above those that do not, by score within each group.

With every phrase empty the banks are all 0, nothing is banned, and the search returns exactly
the unconstrained search's ids and scores (tests/test_constraints.py). A constrained search is
a separate traced search (never XLA's), so the unconstrained one keeps its graph and speed.
Beam size 1 (greedy) with constraints always takes the candidate of the fullest bank, so it
writes the phrases first: allowed, but weak; use K >= 2 x (phrases + 1).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.inference.decoding import NEG_INF, _gather_beams, best_tokens, length_penalty
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

CONSTRAINTS_SPEC = tf.TensorSpec([None, None, None], tf.int32, name="constraints")


class ConstrainedState(NamedTuple):
    """The loop state of the constrained search: `decoding.BeamState`'s fields (the names that
    `decoding._retire` and `decoding._stopped` read), and the constraints' own; C phrases of T ids."""

    position: tf.Tensor  # [] int32
    alive_ids: tf.Tensor  # [B, K, L] int32
    alive_log_probs: tf.Tensor  # [B, K] float32, descending; -inf: empty slot
    alive_token: tf.Tensor  # [B, K] int32
    finished_ids: tf.Tensor  # [B, K, L] int32
    finished_scores: tf.Tensor  # [B, K] float32, those meeting every phrase first, then descending
    finished_count: tf.Tensor  # [B] int32
    cache: list
    alive_met: tf.Tensor  # [B, K, C] bool, phrase c appears in the hypothesis
    alive_partial: tf.Tensor  # [B, K, C, T] bool, the hypothesis ends with the first j + 1 ids of phrase c
    finished_complete: tf.Tensor  # [B, K] bool, the finished hypothesis meets every phrase


def padded_constraints(constraints):
    """constraints [B, C, T] -> [B, C + 1, T + 1], one more empty phrase and one more pad column,
    so that no dimension is empty (a batch without phrases, phrases of no ids)."""
    return tf.pad(tf.cast(constraints, tf.int32), [[0, 0], [0, 1], [0, 1]], constant_values=PAD_ID)


def phrase_lengths(constraints):
    """[B, C] int32: the ids of each phrase (its non-pad ids)."""
    return tf.reduce_sum(tf.cast(constraints != PAD_ID, tf.int32), axis=-1)


def constrained_state(state, constraints, beam_size: int) -> ConstrainedState:
    """The initial state of the search from `decoding.BeamState` `state` and `padded_constraints`:
    the empty phrases met, no partial match."""
    shape = tf.shape(constraints)  # [B, C, T]
    met = tf.tile(tf.expand_dims(phrase_lengths(constraints) == 0, 1), [1, beam_size, 1])  # [B, K, C]
    return ConstrainedState(
        **state._asdict(),
        alive_met=met,
        alive_partial=tf.zeros([shape[0], beam_size, shape[1], shape[2]], tf.bool),
        finished_complete=tf.zeros([shape[0], beam_size], tf.bool),
    )


def _first_k(keep, k: int):
    """The positions [B, k] of the first k entries of each row whose `keep` [B, M] is True, in the
    row's order, then those that are not, in order (`top_k` is stable)."""
    position = tf.cast(tf.range(tf.shape(keep)[1]), tf.float32)  # [M]
    _, index = tf.math.top_k(tf.where(keep, -position, NEG_INF), k=k)
    return index


def _banks_round_robin(scores, banks, most, count: int):
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


def _constrained_step(
    state: ConstrainedState, tokens_to_log_probs, limits, phrases, *, beam_size: int, alpha: float, banned
) -> ConstrainedState:
    """One step of dynamic beam allocation; `phrases` [B, C, T] int32 (`padded_constraints`) of the
    sentences in `state`. See the module docstring."""
    k = beam_size
    batch = tf.shape(state.alive_log_probs)[0]
    length = tf.shape(state.alive_ids)[2]
    phrase_count, width = tf.shape(phrases)[1], tf.shape(phrases)[2]
    lengths = phrase_lengths(phrases)  # [B, C]
    generated = state.position + 1  # |y| of every candidate
    log_probs, cache = tokens_to_log_probs(tf.reshape(state.alive_token, [-1]), state.position, state.cache)  # [B*K, V]
    vocab_size = log_probs.logits.shape[-1]

    # EOS is banned while a phrase is unmet, but at the length limit (where every candidate ends).
    unmet = ~state.alive_met  # [B, K, C]
    limits = tf.expand_dims(limits, 1)  # [B, 1]
    ban_eos = tf.reduce_any(unmet, axis=-1) & (generated < limits)  # [B, K]
    is_eos = tf.range(vocab_size) == EOS_ID  # [V]
    log_probs = log_probs.rule_out(tf.reshape(ban_eos, [-1, 1]) & is_eos)  # [B*K, V]

    # The model's best 2K (+ banned) tokens of each hypothesis, as in the unconstrained search.
    model_values, model_tokens = best_tokens(log_probs, 2 * k, banned)  # [B*K, P]
    per_beam = model_tokens.shape[-1]
    model_tokens = tf.reshape(model_tokens, [batch, k, per_beam])  # [B, K, P]

    # The next id of every unmet phrase after the hypothesis' longest partial match of it.
    steps = tf.range(1, width + 1)  # [T]: ids matched
    progress = tf.reduce_max(tf.where(state.alive_partial, steps, 0), axis=-1)  # [B, K, C]
    next_tokens = tf.reduce_sum(tf.expand_dims(phrases, 1) * tf.one_hot(progress, width, dtype=tf.int32), axis=-1)
    next_values = tf.reshape(log_probs.take(tf.reshape(next_tokens, [batch * k, -1])), [batch, k, -1])  # [B, K, C]
    duplicate = tf.reduce_any(tf.expand_dims(next_tokens, 3) == tf.expand_dims(model_tokens, 2), axis=-1)  # [B, K, C]
    earlier = tf.expand_dims(tf.range(phrase_count), 0) < tf.expand_dims(tf.range(phrase_count), 1)  # [C, C']: c' < c
    same = tf.expand_dims(next_tokens, 3) == tf.expand_dims(next_tokens, 2)  # [B, K, C, C']
    same &= tf.expand_dims(unmet, 2) & earlier
    duplicate |= tf.reduce_any(same, axis=-1)
    next_values = tf.where(unmet & ~duplicate, next_values, NEG_INF)  # [B, K, C]

    # Every candidate: the model's first (flattened as the unconstrained search's), then the phrases'.
    tokens = tf.concat([tf.reshape(model_tokens, [batch, -1]), tf.reshape(next_tokens, [batch, -1])], axis=1)  # [B, N]
    values = tf.concat([tf.reshape(model_values, [batch, -1]), tf.reshape(next_values, [batch, -1])], axis=1)  # [B, N]
    beams = tf.concat([tf.range(k * per_beam) // per_beam, tf.range(k * phrase_count) // phrase_count], axis=0)  # [N]
    scores = tf.gather(state.alive_log_probs, beams, axis=1) + values  # [B, N]

    # Each candidate's matches: shift every partial match by one id, keep those the token continues.
    parent_partial = tf.gather(state.alive_partial, beams, axis=1)  # [B, N, C, T]
    # ends_with[j]: the parent ends with the phrase's first j ids (bit j - 1; always for j = 0); a
    # gather, not a slice: TFLite has no strided slice of booleans.
    previous = tf.gather(parent_partial, tf.maximum(tf.range(width) - 1, 0), axis=-1)  # [B, N, C, T]
    ends_with = previous | (tf.range(width) == 0)  # [B, N, C, T]
    within = tf.range(width) < tf.expand_dims(lengths, 2)  # [B, C, T]
    same_token = tf.expand_dims(phrases, 1) == tf.reshape(tokens, [batch, -1, 1, 1])  # [B, N, C, T]
    partial = ends_with & same_token & tf.expand_dims(within, 1)  # [B, N, C, T]
    last = tf.one_hot(lengths - 1, width, on_value=True, off_value=False, dtype=tf.bool)  # [B, C, T]
    met = tf.gather(state.alive_met, beams, axis=1) | tf.reduce_any(partial & tf.expand_dims(last, 1), axis=-1)
    progress = tf.where(met, 0, tf.reduce_max(tf.where(partial, steps, 0), axis=-1))  # [B, N, C]
    banks = tf.reduce_sum(tf.where(met, tf.expand_dims(lengths, 1), 0), axis=-1) + tf.reduce_max(progress, axis=-1)

    top_index = _banks_round_robin(scores, banks, tf.reduce_sum(lengths, axis=1), 2 * k)  # [B, 2K], DBA order
    top_log_probs = tf.gather(scores, top_index, batch_dims=1)  # [B, 2K]
    top_beam = tf.gather(beams, top_index)  # [B, 2K]
    top_token = tf.gather(tokens, top_index, batch_dims=1)  # [B, 2K]
    top_met = tf.gather(met, top_index, batch_dims=1)  # [B, 2K, C]
    write = tf.one_hot(state.position, length, dtype=tf.int32)  # [L]
    top_ids = _gather_beams(state.alive_ids, top_beam) + write * tf.expand_dims(top_token, 2)  # [B, 2K, L]
    ends = (top_token == EOS_ID) | (generated >= limits)  # [B, 2K]

    # Alive: the first K that do not end, in that order (at most K of the 2K end in EOS), by score.
    open_log_probs = tf.where(ends, NEG_INF, top_log_probs)  # [B, 2K]
    alive_rank = _first_k(~ends & (top_log_probs > NEG_INF), k)  # [B, K]
    alive_log_probs, by_score = tf.math.top_k(tf.gather(open_log_probs, alive_rank, batch_dims=1), k=k)  # [B, K]
    alive_rank = tf.gather(alive_rank, by_score, batch_dims=1)
    alive_beam = _gather_beams(top_beam, alive_rank)  # [B, K]
    cache_index = tf.reshape(alive_beam + tf.expand_dims(tf.range(batch), 1) * k, [-1])  # [B*K]

    # Finished: the ending candidates among the first K, merged with the finished set; those that
    # meet every phrase first, then by score (ties keep the older).
    ending_scores = tf.where(ends, top_log_probs / length_penalty(generated, alpha), NEG_INF)[:, :k]  # [B, K]
    merged_scores = tf.concat([state.finished_scores, ending_scores], axis=1)  # [B, 2K]
    complete = tf.gather(tf.reduce_all(top_met, axis=-1), tf.range(k), axis=1)  # [B, K], of the first K
    merged_complete = tf.concat([state.finished_complete, complete], axis=1)  # [B, 2K]
    merged_ids = tf.concat([state.finished_ids, top_ids[:, :k]], axis=1)  # [B, 2K, L]
    _, by_score = tf.math.top_k(merged_scores, k=2 * k)  # [B, 2K]
    tier = tf.where(merged_scores > NEG_INF, tf.where(merged_complete, 2, 1), 0)  # [B, 2K]
    _, by_tier = tf.math.top_k(tf.gather(tier, by_score, batch_dims=1), k=k)  # [B, K], stable: by score within
    finished_rank = tf.gather(by_score, by_tier, batch_dims=1)  # [B, K]
    ended = ending_scores > NEG_INF  # [B, K]

    return state._replace(
        position=generated,
        alive_ids=_gather_beams(top_ids, alive_rank),
        alive_log_probs=alive_log_probs,
        alive_token=_gather_beams(top_token, alive_rank),
        finished_ids=_gather_beams(merged_ids, finished_rank),
        finished_scores=_gather_beams(merged_scores, finished_rank),
        finished_count=state.finished_count + tf.reduce_sum(tf.cast(ended, tf.int32), axis=1),
        cache=tf.nest.map_structure(lambda leaf: tf.gather(leaf, cache_index), cache),
        alive_met=_gather_beams(top_met, alive_rank),
        alive_partial=_gather_beams(tf.gather(partial, top_index, batch_dims=1), alive_rank),
        finished_complete=_gather_beams(merged_complete, finished_rank),
    )


def constrained_search_step(state, constraints, *, beam_size: int, alpha: float, banned):
    """(initial state, step) of the constrained search for `decoding.search_beams`, from its
    `BeamState` and the constraints [B, C, T] of the whole batch; the step takes the rows of the
    sentences still searching (`sentences` [B'], None: all)."""
    phrases = padded_constraints(constraints)  # [B, C + 1, T + 1]

    def step(state, tokens_to_log_probs, limits, sentences):
        rows = phrases if sentences is None else tf.gather(phrases, sentences)
        settings = {"beam_size": beam_size, "alpha": alpha, "banned": banned}
        return _constrained_step(state, tokens_to_log_probs, limits, rows, **settings)

    return constrained_state(state, phrases, beam_size), step


def check_constraints(constraints, batch: int) -> tf.Tensor:
    """`constraints` as [batch, C, T] int32 ids (C, T may be 0), or a ValueError: the wrong number
    of rows, a start or EOS id (a phrase is generated tokens: pad ends it), or a pad before an
    id (phrases are left-aligned)."""
    constraints = tf.convert_to_tensor(constraints, tf.int32)
    if constraints.shape.rank != 3 or constraints.shape[0] != batch:
        raise ValueError(f"constraints must be [batch {batch}, phrases, length], got shape {constraints.shape}")
    reserved = np.isin(constraints.numpy(), [START_ID, EOS_ID])
    if reserved.any():
        raise ValueError(f"constraints hold the start or EOS id (row {int(np.argwhere(reserved)[0][0])})")
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


def phrase_rows(tokenizer, constraints, count: int, max_length: int) -> list[list[np.ndarray]] | None:
    """The token ids of every text's phrases, for `Translator`: `constraints` None (none), one
    phrase (a str) or one list of phrases for all `count` texts, or one list per text. A phrase
    is tokenized alone, which is the tokenization SentencePiece gives it after a space (its first
    piece starts with the word-boundary mark), so the detokenized output holds the phrase's text.
    A ValueError for an empty phrase, one with the unknown token (it detokenizes to nothing), or
    one of more than max_length - 1 tokens (no output is longer)."""
    if constraints is None:
        return None
    if isinstance(constraints, str):
        constraints = [constraints]
    constraints = list(constraints)
    if all(isinstance(phrase, str) for phrase in constraints):
        constraints = [constraints] * count
    if len(constraints) != count:
        raise ValueError(f"{count} texts but {len(constraints)} lists of constraints")
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
