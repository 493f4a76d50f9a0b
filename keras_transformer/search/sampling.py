"""Random sampling: translations drawn from the model's distribution, one token at a time; a
strategy of `search.search`.

`num_samples` hypotheses per sentence, each drawn on its own. At each step the log-probabilities
(over the full vocabulary, the never-generated ids banned, as in the beam search) are divided by
the temperature T, cut to the K most likely tokens (`sampling_topk`, 0: all), then to the
nucleus, the fewest most likely tokens whose renormalised probability reaches P (`sampling_topp`;
Holtzman et al., 2020), and one token is drawn from the renormalised rest (the order of
CTranslate2 and Hugging Face). A sample ends at EOS or at its sentence's length limit, as a
hypothesis does; a sentence stops once all of its samples have ended. The controls
(`controls.py`), a target prefix and the user's modifiers change the logits first, as in the
beam search.

Stateless random ops: a step draws with `stateless_categorical(seed = fold_in(seed, step))`, so
the same seed, model and batch give the same samples. A sample's score is a hypothesis's: the
sum of its tokens' log-probabilities under the model itself (not the tempered, cut
distribution it was drawn from) over lp(|y|) (`scoring.score` gives the same number); the samples
of a sentence come best first.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Any

import tensorflow as tf

from keras_transformer.config import DecodingConfig, SamplingSettings
from keras_transformer.search.inputs import SearchInputs, limits, user_modifiers
from keras_transformer.search.log_probs import NEG_INF, LogProbs, gather_beams, vocabulary_size
from keras_transformer.search.search import (
    SOURCE_SPEC,
    DecodeResult,
    SearchState,
    Step,
    check_source_ids,
    compiled,
    length_penalty,
    search,
    traced_settings,
)
from keras_transformer.search.shortlist import check_shortlist
from keras_transformer.special_tokens import EOS_ID, PAD_ID, never_generated

SEED_SPEC = tf.TensorSpec([2], tf.int64, name="seed")


def sampling_log_probs(log_probs, topk: int, topp: float, temperature: float):
    """log_probs [N, V] -> the logits that `sample` draws from [N, V]: log_probs / T, -inf outside
    the K best (K = 0: none cut), then outside the nucleus of probability P of what is left."""
    logits = log_probs / temperature  # [N, V]
    vocab_size = vocabulary_size(log_probs)  # a tensor over a shortlist
    if 0 < topk and (not isinstance(vocab_size, int) or topk < vocab_size):
        k = topk if isinstance(vocab_size, int) else tf.minimum(topk, vocab_size)
        kth = tf.math.top_k(logits, k=k).values[:, -1:]  # [N, 1]
        logits = tf.where(logits < kth, NEG_INF, logits)
    if topp < 1.0:
        ranked = tf.sort(logits, axis=-1, direction="DESCENDING")  # [N, V]
        before = tf.math.cumsum(tf.nn.softmax(ranked, axis=-1), axis=-1, exclusive=True)  # [N, V]
        kept = tf.reduce_sum(tf.cast(before < topp, tf.int32), axis=-1)  # [N], >= 1: the first has 0 before it
        smallest = tf.gather(ranked, kept - 1, batch_dims=1)[:, None]  # [N, 1]
        logits = tf.where(logits < smallest, NEG_INF, logits)
    return logits


@dataclasses.dataclass(frozen=True)
class Sampling:
    """`num_samples` samples per sentence drawn by `settings` (`config.SamplingSettings`), with
    the `seed` [2] int64; scores over the length penalty of `alpha`; `banned`: the ids never
    generated."""

    settings: Any
    seed: Any
    alpha: float
    banned: tuple[int, ...]

    @property
    def hypotheses(self) -> int:
        return self.settings.num_samples

    def start(self, batch, length, cache, modifiers: tuple, states: tuple) -> SearchState:
        every = tf.zeros([batch, self.hypotheses])  # [B, n]: every sample alive
        return SearchState.initial(every, length, cache, states)

    def select(self, state: SearchState, log_probs: LogProbs, step: Step, modifiers: tuple) -> SearchState:
        """Draw the next token of every sample; a sample that ends enters the finished set in its slot."""
        n, s = self.hypotheses, self.settings
        batch, length = tf.shape(state.alive_log_probs)[0], tf.shape(state.alive_ids)[2]
        dense = log_probs.dense(self.banned)  # [B*n, V]
        drawn = sampling_log_probs(dense, s.sampling_topk, s.sampling_topp, s.sampling_temperature)
        step_seed = tf.random.experimental.stateless_fold_in(self.seed, tf.cast(state.position, tf.int64))
        sampled = tf.cast(tf.random.stateless_categorical(drawn, 1, step_seed)[:, 0], tf.int32)  # [B*n]
        token_log_probs = tf.reshape(tf.gather(dense, sampled[:, None], batch_dims=1), [batch, n])  # [B, n]
        sampled = tf.reshape(sampled, [batch, n])  # [B, n]
        alive = state.alive_log_probs > NEG_INF  # [B, n]
        log_prob = state.alive_log_probs + token_log_probs  # [B, n]
        ids = state.alive_ids + tf.one_hot(state.position, length, dtype=tf.int32) * sampled[:, :, None]  # [B, n, L]
        generated = state.position + 1
        ends = alive & ((sampled == EOS_ID) | (generated >= step.limits[:, None]))  # [B, n]
        going = alive & ~ends
        slots = tf.tile(tf.range(n)[None], [batch, 1])  # [B, n]: every sample is its own parent
        return state._replace(
            position=generated,
            alive_ids=ids,
            alive_log_probs=tf.where(going, log_prob, NEG_INF),
            alive_token=tf.where(going, sampled, PAD_ID),
            finished_ids=tf.where(ends[:, :, None], ids, state.finished_ids),
            finished_scores=tf.where(ends, log_prob / length_penalty(generated, self.alpha), state.finished_scores),
            finished_count=state.finished_count + tf.reduce_sum(tf.cast(ends, tf.int32), axis=1),
            modifiers=tuple(
                slot._replace(alive=modifier.advance(slot, slots, sampled, step))
                for modifier, slot in zip(modifiers, state.modifiers)
            ),
        )

    def stopped(self, state: SearchState, limits):
        return (state.finished_count >= self.hypotheses) | (state.position >= limits)

    def result(self, ids, scores):
        scores, order = tf.math.top_k(scores, k=self.hypotheses)  # best first
        return gather_beams(ids, order), scores


def sample_search(
    model, source_ids, seed, inputs: SearchInputs = SearchInputs(), *, decoding: DecodingConfig, suppress_ids=(),
    modifiers=(),
):  # fmt: skip
    """The traceable sampling: source_ids [B, S] int32, seed [2] int64 -> (ids [B, n, L] int32,
    scores [B, n] float32), n = `num_samples` samples per sentence, best first; `inputs`
    (`inputs.SearchInputs`): a target prefix that every sample continues, constraint phrases
    (EOS is banned until a sample holds them, so a sample ends only once it has drawn them or at
    its length limit: sampling draws no phrase itself), a shortlist whose union the samples are
    drawn from (`shortlist.py`); `modifiers`: the user's, after the settings' controls."""
    settings = decoding.search
    drawn = decoding.sampling or SamplingSettings()  # sampling off: top-1 draws, greedy decoding
    strategy = Sampling(drawn, seed, settings.alpha, never_generated(settings.disable_unk))
    return search(
        model,
        source_ids,
        strategy,
        inputs.modifiers(decoding, suppress_ids, modifiers),
        **limits(decoding),
        lexical_shortlist=inputs.shortlist,
    )


def sample(
    model,
    source_ids,
    decoding: DecodingConfig | None = None,
    *,
    target_prefix=None,
    constraints=None,
    suppress_ids=(),
    lexical_shortlist=None,
    modifiers=(),
    **overrides,
):
    """`num_samples` translations per sentence drawn by `decoding`'s sampling settings (with
    `overrides` of its fields; sampling must be on: `sampling_topk` 0 or K > 1), best first: ids
    [B, n, L], scores [B, n]. `seed` (default: a new one per call) gives the same samples for the
    same batch; source_ids, `target_prefix`, `constraints`, `lexical_shortlist` and `modifiers` as
    `beam_search` takes them (`sample_search` says what constraints do here)."""
    decoding = (decoding or DecodingConfig()).replace(**overrides)
    if not decoding.sampling:
        raise ValueError("sampling needs sampling_topk 0 (the whole vocabulary) or K > 1")
    check_shortlist(decoding, lexical_shortlist)
    source_ids = check_source_ids(source_ids, model.config.max_length)
    seed = sampling_seed(decoding)
    options = dict(target_prefix=target_prefix, constraints=constraints, modifiers=modifiers)
    ids, scores = sample_with_seed(model, source_ids, seed, decoding, suppress_ids, lexical_shortlist, **options)
    return DecodeResult(ids, scores)


def _sample_with(model, source_ids, seed, structure, decoding: DecodingConfig, suppress_ids=(), modifiers=()):
    """`sample_search` with the inputs of a traced `structure` (`SearchInputs.structure`)."""
    inputs = SearchInputs.of(structure)
    return sample_search(
        model, source_ids, seed, inputs, decoding=decoding, suppress_ids=suppress_ids, modifiers=modifiers
    )


def sample_with_seed(
    model,
    source_ids,
    seed,
    decoding: DecodingConfig,
    suppress_ids=(),
    lexical_shortlist=None,
    *,
    target_prefix=None,
    constraints=None,
    modifiers=(),
):
    """`sample_search` traced once per model, settings, inputs given and user `modifiers`, with
    the seed [2] int64 and the inputs' tensors inputs."""
    inputs = SearchInputs(target_prefix, constraints, lexical_shortlist)
    if source_ids.shape[0] is not None:
        inputs = inputs.checked(source_ids.shape[0])
    spec = inputs.spec()
    static = dict(
        decoding=traced_settings(decoding.replace(seed=None)),
        suppress_ids=tuple(map(tuple, suppress_ids)),
        modifiers=user_modifiers(modifiers),
    )
    name = f"sample{tuple(map(bool, spec))}"  # another input signature per set of inputs given
    search_function = compiled(model, name, _sample_with, inputs=(SOURCE_SPEC, SEED_SPEC, spec), **static)
    return search_function(source_ids, seed, inputs.structure())


def sampling_seed(decoding: DecodingConfig, seed=None):
    """The [2] int64 seed of a sampling search: `seed` (an int or a [2] tensor), else the
    settings' `seed`, else a new one (in a graph: per call; eagerly: from Python's generator)."""
    if seed is None:
        seed = (decoding.sampling or SamplingSettings()).seed
    if seed is None:
        if tf.executing_eagerly():
            seed = random.getrandbits(62)
        else:
            return tf.random.uniform([2], maxval=tf.int64.max, dtype=tf.int64)
    if isinstance(seed, int):
        return tf.constant([seed, 0], tf.int64)
    return tf.convert_to_tensor(seed, tf.int64)
