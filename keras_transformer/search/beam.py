"""Beam search (§6.1: beam size 4, length penalty alpha 0.6), a strategy of `search.search`.

An alive and a finished set of K hypotheses each, as in Wu et al. (2016) and tensor2tensor: each
step takes the best 2K one-token extensions of the alive set; those that end (EOS, or the length
limit) among the best K enter the finished set (as in fairseq, so that K = 1 is greedy
decoding), and the best K that do not end stay alive. A hypothesis's score is the sum of its
tokens' log-probabilities over the full vocabulary (the never-generated ids masked to -inf after
the log-softmax: `special_tokens.never_generated`) divided by the length penalty lp(|y|), |y|
counting EOS. A sentence stops once round(patience x K) of its hypotheses have ended (patience 1
by default: the rule of fairseq and CTranslate2; Kasai et al., 2022), or, with `patience=None`,
once no alive hypothesis can beat the kept ones (exact, as tensor2tensor; slower, and the same
BLEU on the held-out verses: bench/RESULTS.md, "Stopping rules: patience 1 against exact").

Modifiers may add candidates (`Modifier.candidates`: a constraint's next token) and order them
(`Modifier.rank`: dynamic beam allocation's banks); then "the best K" means the first K in that
order. Finished hypotheses that satisfy every modifier (`Modifier.complete`) rank first.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from keras_transformer.search.log_probs import NEG_INF, LogProbs, best_tokens, gather_beams
from keras_transformer.search.search import Modifier, SearchState, Step, length_penalty
from keras_transformer.special_tokens import EOS_ID


def first_k(keep, k):
    """The positions [B, k] of the first k entries of each row whose `keep` [B, M] is True, in the
    row's order, then those that are not, in order (`top_k` is stable)."""
    position = tf.cast(tf.range(tf.shape(keep)[1]), tf.float32)  # [M]
    _, index = tf.math.top_k(tf.where(keep, -position, NEG_INF), k=k)
    return index


@dataclasses.dataclass(frozen=True)
class BeamSearch:
    """K = `beam_size` hypotheses per sentence; `alpha`, `patience` as the module docstring says
    (`beam_size` and `alpha` may be tensors: a served model's per-request settings); `nbest`:
    the hypotheses kept for the exact stopping rule; `banned`: the ids never generated."""

    beam_size: Any
    alpha: Any
    patience: float | None
    nbest: int
    banned: tuple[int, ...]

    @property
    def hypotheses(self):
        return self.beam_size

    def start(self, batch, length, cache, modifiers: tuple, states: tuple) -> SearchState:
        ranking = [type(modifier).__name__ for modifier in modifiers if type(modifier).rank is not Modifier.rank]
        if len(ranking) > 1:  # two orders of the candidates cannot both hold
            raise ValueError(
                f"modifiers {', '.join(ranking)} each rank the candidates (Modifier.rank): a beam search keeps one "
                "order; compose them into one modifier"
            )
        first_beam = tf.one_hot(0, self.beam_size, on_value=0.0, off_value=NEG_INF)  # [K]: one, the empty one
        complete = any(modifier.completes for modifier in modifiers)
        return SearchState.initial(tf.tile(first_beam[None], [batch, 1]), length, cache, states, complete)

    def select(self, state: SearchState, log_probs: LogProbs, step: Step, modifiers: tuple) -> SearchState:
        """Extend every alive hypothesis by one token; refill the alive and the finished sets."""
        k = self.beam_size
        batch = tf.shape(state.alive_log_probs)[0]
        length = tf.shape(state.alive_ids)[2]
        slots = list(zip(modifiers, state.modifiers))
        # The best 2K of the K x V one-token extensions are among each hypothesis' best 2K tokens.
        token_log_probs, tokens = best_tokens(log_probs, 2 * k, self.banned)  # [B*K, P]
        per_beam = tokens.shape[-1] if tokens.shape[-1] is not None else tf.shape(tokens)[-1]
        tokens = tf.reshape(tokens, [-1, k, per_beam])  # [B, K, P]
        values = tf.reshape(token_log_probs, [-1, k, per_beam])  # [B, K, P]
        beams = tf.range(k * per_beam) // per_beam  # [N]: the hypothesis each candidate extends
        tokens, values = tf.reshape(tokens, [batch, -1]), tf.reshape(values, [batch, -1])  # [B, N]
        for modifier, slot in slots:  # more candidates: [B, K, C] each, after the model's
            extra = modifier.candidates(slot, log_probs, tf.reshape(tokens, [batch, k, per_beam]), step)
            if extra is not None:
                extra_tokens, extra_values = extra
                count = tf.shape(extra_tokens)[2]
                tokens = tf.concat([tokens, tf.reshape(extra_tokens, [batch, -1])], axis=1)
                values = tf.concat([values, tf.reshape(extra_values, [batch, -1])], axis=1)
                beams = tf.concat([beams, tf.range(k * count) // count], axis=0)
        scores = tf.gather(state.alive_log_probs, beams, axis=1) + values  # [B, N]

        ranked = [
            index
            for index in (modifier.rank(slot, scores, beams, tokens, 2 * k, step) for modifier, slot in slots)
            if index is not None
        ]
        if ranked:  # the modifier's order (one at most: `start`)
            top_index = ranked[0]  # [B, 2K]
            top_log_probs = tf.gather(scores, top_index, batch_dims=1)
        else:
            top_log_probs, top_index = tf.math.top_k(scores, k=2 * k)  # [B, 2K], by score
        top_beam = tf.gather(beams, top_index)  # [B, 2K], the alive hypothesis each candidate extends
        top_token = tf.gather(tokens, top_index, batch_dims=1)  # [B, 2K]
        write = tf.one_hot(state.position, length, dtype=tf.int32)  # [L]
        top_ids = gather_beams(state.alive_ids, top_beam) + write * top_token[:, :, None]  # [B, 2K, L]
        generated = state.position + 1  # |y| of every candidate
        ends = (top_token == EOS_ID) | (generated >= step.limits[:, None])  # [B, 2K]
        advanced = [modifier.advance(slot, top_beam, top_token, step) for modifier, slot in slots]  # [B, 2K, ...]

        # Alive: the first K candidates that do not end (at most K of the 2K end in EOS), by score.
        open_log_probs = tf.where(ends, NEG_INF, top_log_probs)  # [B, 2K]
        if ranked:
            alive_rank = first_k(~ends & (top_log_probs > NEG_INF), k)  # [B, K], in the modifier's order
            alive_log_probs, by_score = tf.math.top_k(tf.gather(open_log_probs, alive_rank, batch_dims=1), k=k)
            alive_rank = tf.gather(alive_rank, by_score, batch_dims=1)
        else:
            alive_log_probs, alive_rank = tf.math.top_k(open_log_probs, k=k)  # [B, K]
        alive_beam = gather_beams(top_beam, alive_rank)  # [B, K]
        cache_index = tf.reshape(alive_beam + tf.range(batch)[:, None] * k, [-1])  # [B*K]

        # Finished: the ending candidates among the first K, merged with the finished set.
        ending_scores = tf.where(ends, top_log_probs / length_penalty(generated, self.alpha), NEG_INF)[:, :k]
        merged_scores = tf.concat([state.finished_scores, ending_scores], axis=1)  # [B, 2K]
        merged_ids = tf.concat([state.finished_ids, top_ids[:, :k]], axis=1)  # [B, 2K, L]
        complete = [modifier.complete(alive) for (modifier, _), alive in zip(slots, advanced) if modifier.completes]
        finished_complete = state.finished_complete
        if complete:  # those satisfying every modifier first, then by score (ties keep the older)
            now = tf.reduce_all(tf.stack(complete), axis=0)[:, :k]  # [B, K]
            merged_complete = tf.concat([state.finished_complete, now], axis=1)  # [B, 2K]
            _, by_score = tf.math.top_k(merged_scores, k=2 * k)  # [B, 2K]
            tier = tf.where(merged_scores > NEG_INF, tf.where(merged_complete, 2, 1), 0)  # [B, 2K]
            _, by_tier = tf.math.top_k(tf.gather(tier, by_score, batch_dims=1), k=k)  # [B, K], stable
            finished_rank = tf.gather(by_score, by_tier, batch_dims=1)  # [B, K]
            finished_scores = gather_beams(merged_scores, finished_rank)
            finished_complete = gather_beams(merged_complete, finished_rank)
        else:
            finished_scores, finished_rank = tf.math.top_k(merged_scores, k=k)  # [B, K], ties keep the older
        ended = ending_scores > NEG_INF  # [B, K]: real hypotheses (not empty slots) that end

        return state._replace(
            position=generated,
            alive_ids=gather_beams(top_ids, alive_rank),
            alive_log_probs=alive_log_probs,
            alive_token=gather_beams(top_token, alive_rank),
            finished_ids=gather_beams(merged_ids, finished_rank),
            finished_scores=finished_scores,
            finished_count=state.finished_count + tf.reduce_sum(tf.cast(ended, tf.int32), axis=1),
            finished_complete=finished_complete,
            cache=tf.nest.map_structure(lambda leaf: tf.gather(leaf, cache_index), state.cache),
            modifiers=tuple(
                slot._replace(alive=tf.nest.map_structure(lambda leaf: gather_beams(leaf, alive_rank), alive))
                for (_, slot), alive in zip(slots, advanced)
            ),
        )

    def stopped(self, state: SearchState, limits):
        """[B] bool: whether each sentence stops searching.

        patience None (exact): no alive hypothesis of the sentence can beat its `nbest`-th best
        finished one, so its `nbest` best hypotheses are final (with nbest = K: the whole finished
        set). Log-probabilities only fall and lp grows with length, so the best an alive hypothesis
        can reach is its log-probability / lp(limit).

        patience p: round(p * K) hypotheses have ended (Kasai et al., 2022: "first come, first
        served" with a patience factor; p = 1 is the rule of fairseq and CTranslate2). Stops sooner;
        a longer hypothesis that the length penalty would have preferred may be cut off.
        """
        if self.patience is not None:
            k = self.beam_size
            needed = (
                round(self.patience * k)
                if isinstance(k, int)
                else tf.cast(tf.round(self.patience * tf.cast(k, tf.float32)), tf.int32)
            )
            return (state.finished_count >= needed) | (state.position >= limits)  # at its limit, all have ended
        best_alive = state.alive_log_probs[:, 0] / length_penalty(limits, self.alpha)  # [B]
        last_kept = state.finished_scores[:, self.nbest - 1]  # [B], descending; -inf while the slot is empty
        return last_kept >= best_alive

    def result(self, ids, scores):
        return ids[:, : self.nbest], scores[:, : self.nbest]
