"""The one search loop of every decoding workflow (§3, §6.1): a strategy and modifiers over the
model's key/value cache.

The loop never sees layers: it drives the decoding protocol (`DecodingModel`) and reorders the
cache by hypothesis (every cache leaf has the hypotheses on axis 0; the context's rows, per
sentence, are never copied). Each step it asks the model for the next token's logits of every
alive hypothesis, lets each `Modifier` change them (before the softmax: the controls of
`controls.py`, CTranslate2's logits processors) and rule tokens out (after it: a forced prefix,
an EOS before the phrases are met), and hands the log-probabilities to the `Strategy`
(`beam.BeamSearch`, `sampling.Sampling`), which picks the next tokens, ends hypotheses and
reorders the cache. The fairseq `Search.step` / OpenNMT-tf `DecodingStrategy` shape, in the graph.

The search state has one open slot per modifier (`ModifierState`): its per-sentence leaves and
its per-hypothesis leaves, which the strategy gathers with the hypotheses they belong to and the
loop drops with the sentences that stop, without knowing what they hold.

By default the cache grows by one position per step and a sentence that stops leaves the batch,
so shapes change from step to step (the TensorFlow graph and TFLite builtins run that). With
static shapes (`static_shapes=True` or a `max_decode_length`) the cache has a fixed length and
the whole batch runs to the end: what XLA compiles.

With a vocabulary shortlist (`lexical_shortlist`) the search runs over the union of the batch's
shortlists only (`shortlist.py`).

Maximum output length per sentence (§6.1): `a * source_length + b` tokens, EOS included
(paper: a = 1, b = 50), capped at the model's `max_length` (and `max_decoding_length`). A
hypothesis that reaches it without EOS ends there.
"""

from __future__ import annotations

import dataclasses
import threading
import weakref
from typing import Any, NamedTuple, Protocol

import numpy as np
import tensorflow as tf

from keras_transformer.config import DecodingConfig, RuntimeSettings
from keras_transformer.search.log_probs import NEG_INF, LogProbs, gather_beams
from keras_transformer.search.shortlist import STATIC_SHAPES, restrict
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """Hypotheses best first: `ids` int32 [batch, n, length] (pad after EOS), `scores` float32 [batch, n]."""

    ids: tf.Tensor
    scores: tf.Tensor


class DecodingModel(Protocol):
    """What a search reads of a model: `Transformer`, `Ensemble` and the tests' scripted models."""

    config: Any  # vocab_size and max_length

    def start_decoding(self, source_ids, hypotheses, max_length=None, vocabulary=None):
        """source_ids [B, S] -> (`model.DecodingContext`, cache with every leaf [B * hypotheses, ...]);
        `vocabulary` [V'] int32: the steps' logits over those ids only (a shortlist: `shortlist.py`)."""

    def decode_step(self, token_ids, position, cache, context):
        """token_ids [B'] at `position` -> (logits [B', V] (or [B', V']), the cache with this position)."""

    def cross_attention(self, source_ids, target_in_ids, layer: int):
        """The cross-attention [B, T, S] of decoder layer `layer`, averaged over heads (alignments)."""


def length_penalty(length, alpha):
    """lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha   (Wu et al., 2016, §7, Eq. 14)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


def length_limit(source_length, max_length, a: float, b: int):
    """min(a * source_length + b, max_length), at least 1 (int32, any shape)."""
    limit = tf.cast(tf.math.ceil(a * tf.cast(source_length, tf.float32)), tf.int32) + b
    return tf.clip_by_value(limit, 1, max_length)


def decode_limits(source_ids, max_length, a: float = 1.0, b: int = 50):
    """Per-sentence maximum number of generated tokens, [B] int32: min(a * |source| + b, max_length)."""
    source_length = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # [B]
    # An empty source (a batch's padding row) ends at once rather than keep the batch's search going.
    return tf.where(source_length > 0, length_limit(source_length, max_length, a, b), 1)


def longest(limits):
    """[] int32: the longest of the per-sentence limits [B] (1 for an empty batch)."""
    return tf.reduce_max(tf.concat([limits, [1]], axis=0))


def check_source_ids(source_ids, max_length: int) -> tf.Tensor:
    """`source_ids` as [batch, length] int32, or a ValueError: another rank, or longer than the
    model's `max_length` (`Translator` truncates longer texts with a warning). The one check of
    every entry point's sources (search, sampling, scoring)."""
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    if source_ids.shape.rank != 2:
        raise ValueError(f"source_ids must be [batch, length], got shape {source_ids.shape}")
    if source_ids.shape[1] is not None and source_ids.shape[1] > max_length:
        raise ValueError(f"source of {source_ids.shape[1]} tokens is longer than the model's max_length {max_length}")
    return source_ids


def refuse_reserved(ids, name: str, verb: str = "holds") -> None:
    """A ValueError naming the first row of `ids` (a NumPy-convertible tensor of token ids) that
    holds the start or EOS id: a target prefix or a phrase is generated tokens, which pad ends."""
    reserved = np.isin(np.asarray(ids), [START_ID, EOS_ID])
    if reserved.any():
        raise ValueError(f"{name} {verb} the start or EOS id (row {int(np.argwhere(reserved)[0][0])})")


class ModifierState(NamedTuple):
    """A modifier's slot in the search state."""

    sentence: Any = ()  # per sentence: every leaf [B, ...]
    alive: Any = ()  # per alive hypothesis: every leaf [B, K, ...]


class Step(NamedTuple):
    """What a step's hooks read besides their own state."""

    position: tf.Tensor  # [] int32, tokens generated so far (the decoder position of this step)
    alive_ids: tf.Tensor  # [B, K, L] int32, each alive hypothesis' tokens, pad from `position` on
    limits: tf.Tensor  # [B] int32, each sentence's length limit
    hypotheses: Any  # K, an int (or a tensor: a beam size given per request)


class Modifier:
    """A change to what a search may produce; every hook's default changes nothing. Adding a
    control is one subclass (the README's Decoding section shows one).

    - `start(batch, hypotheses, length)`: the initial `ModifierState` (L = `length` output positions).
    - `logits(state, logits [B*K, V], step)`: the next token's logits, before the softmax.
    - `forces(state, step)`: [B*K] bool, the hypotheses whose next token this modifier forces (a
      target prefix), which every modifier's `logits` leaves alone (CTranslate2's logits processors
      skip a prefix alike: a suppressed token in a prefix is still written), or None.
    - `log_probs(state, log_probs: LogProbs, step)`: after it (rule tokens out without
      renormalising: a forced prefix keeps its tokens' own log-probabilities).
    - `candidates(state, log_probs, tokens [B, K, P], step)`: beam search only, more candidate
      tokens than each hypothesis' best (tokens, log-probabilities [B, K, C]), or None.
    - `rank(state, scores [B, N], beams [N], tokens [B, N], count, step)`: beam search only, the
      `count` candidates to keep [B, count] (indices into N), or None for the best by score.
    - `advance(state, parent [B, M], tokens [B, M], step)`: the per-hypothesis state of M new
      hypotheses, each its parent hypothesis (index into K) extended by its token.
    - `complete(alive)`: with `completes`, [B, M] bool, the hypotheses whose modifier is
      satisfied (finished ones rank above those that are not).
    - `token_ids()`: the tensors of token ids that its inputs hold (a target prefix, phrases),
      which a vocabulary shortlist keeps; `over(vocabulary)`: the same modifier with those ids
      mapped to the shortlist's columns (`shortlist.ShortlistColumns.to_columns`). A modifier whose
      inputs hold no token id needs neither: the search's own ids are columns already.
    """

    completes = False  # whether `complete` ranks the finished hypotheses

    def start(self, batch, hypotheses, length) -> ModifierState:
        return ModifierState()

    def logits(self, state: ModifierState, logits, step: Step):
        return logits

    def forces(self, state: ModifierState, step: Step):
        return None

    def log_probs(self, state: ModifierState, log_probs: LogProbs, step: Step) -> LogProbs:
        return log_probs

    def candidates(self, state: ModifierState, log_probs: LogProbs, tokens, step: Step):
        return None

    def rank(self, state: ModifierState, scores, beams, tokens, count, step: Step):
        return None

    def advance(self, state: ModifierState, parent, tokens, step: Step):
        return tf.nest.map_structure(lambda leaf: gather_beams(leaf, parent), state.alive)

    def complete(self, alive):
        raise NotImplementedError

    def token_ids(self) -> tuple:
        return ()

    def over(self, vocabulary) -> Modifier:
        return self


class SearchState(NamedTuple):
    """The loop state: B sentences, K hypotheses each, L output positions."""

    position: tf.Tensor  # [] int32, decoder position of the next step = tokens generated so far
    alive_ids: tf.Tensor  # [B, K, L] int32, generated tokens, pad from `position` on
    alive_log_probs: tf.Tensor  # [B, K] float32, sum of token log-probabilities; -inf: empty slot
    alive_token: tf.Tensor  # [B, K] int32, the last token (START_ID before the first step)
    finished_ids: tf.Tensor  # [B, K, L] int32, ending in EOS (or at the length limit), pad after
    finished_scores: tf.Tensor  # [B, K] float32, log-probability / lp; -inf: empty slot
    finished_count: tf.Tensor  # [B] int32, hypotheses that have ended so far (more than K may have)
    finished_complete: Any  # [B, K] bool, every modifier satisfied (`Modifier.complete`), or () if none asks
    cache: Any  # the model's decoding cache, every leaf [B * K, ...]
    modifiers: tuple  # each modifier's `ModifierState`

    @classmethod
    def initial(cls, alive_log_probs, length, cache, states: tuple, complete: bool = False) -> SearchState:
        """The state before the first step: the hypotheses of `alive_log_probs` [B, K] (-inf: an
        empty slot), each at START_ID with no token yet, L = `length`; `complete`: the finished
        set keeps `finished_complete` (a modifier ranks finished hypotheses)."""
        batch, k = tf.shape(alive_log_probs)[0], alive_log_probs.shape[1] or tf.shape(alive_log_probs)[1]  # K static
        return cls(
            position=tf.constant(0),
            alive_ids=tf.zeros([batch, k, length], tf.int32),
            alive_log_probs=alive_log_probs,
            alive_token=tf.fill([batch, k], START_ID),
            finished_ids=tf.zeros([batch, k, length], tf.int32),
            finished_scores=tf.fill([batch, k], NEG_INF),
            finished_count=tf.zeros([batch], tf.int32),
            finished_complete=tf.zeros([batch, k], tf.bool) if complete else (),
            cache=cache,
            modifiers=states,
        )


class Strategy(Protocol):
    """How a search picks tokens (`beam.BeamSearch`, `sampling.Sampling`)."""

    hypotheses: Any  # K per sentence

    def start(self, batch, length, cache, modifiers: tuple, states: tuple) -> SearchState:
        """The state before the first step, the modifiers' initial `states` in its slots."""

    def select(self, state: SearchState, log_probs: LogProbs, step: Step, modifiers: tuple) -> SearchState:
        """The state after this step's tokens, its cache reordered to the alive hypotheses."""

    def stopped(self, state: SearchState, limits):
        """[B] bool: the sentences that stop searching."""

    def result(self, ids, scores):
        """The outputs of the finished sets ids [B, K, L], scores [B, K]: (ids, scores), best first."""


class _Loop(NamedTuple):
    """The loop state of a search whose batch shrinks: B' of the B sentences still search."""

    state: SearchState  # of the B' sentences still searching
    rows: Any  # their rows of the model's decoding context, every leaf [B', ...]
    limits: tf.Tensor  # [B'] int32, their length limits
    sentences: tf.Tensor  # [B'] int32, their rows in the batch
    ids: tf.Tensor  # [B, K, L] int32, the finished hypotheses of every sentence that stopped
    scores: tf.Tensor  # [B, K] float32


def search(
    model: DecodingModel,
    source_ids,
    strategy: Strategy,
    modifiers: tuple[Modifier, ...] = (),
    *,
    length_a: float = 1.0,
    length_b: int = 50,
    max_decoding_length=None,
    max_decode_length: int | None = None,
    static_shapes: bool = False,
    lexical_shortlist=None,
):
    """The traceable search: source_ids [B, S] int32 -> the strategy's result (ids [B, K, L]
    int32, scores [B, K] float32), best first. Length limits as the module docstring says
    (`max_decoding_length` may be a tensor). L = `max_decode_length` if given; else, with
    `static_shapes` (every shape follows from the input's), the limit of a source as long as the
    input; else the longest per-sentence limit in the batch. `lexical_shortlist` (a
    `data.shortlist.Shortlist`): the search's vocabulary is the union of the batch's shortlists
    (`shortlist.py`; not with static shapes)."""
    source_ids = tf.cast(source_ids, tf.int32)  # [B, S]
    static_shapes = static_shapes or max_decode_length is not None  # the one rule: a fixed length is static
    vocabulary = None
    if lexical_shortlist is not None:
        if static_shapes:
            raise ValueError(STATIC_SHAPES)
        model, modifiers, vocabulary = restrict(model, tuple(modifiers), lexical_shortlist, source_ids)
    batch = tf.shape(source_ids)[0]
    cap = model.config.max_length if max_decode_length is None else min(max_decode_length, model.config.max_length)
    sentence_cap = cap if max_decoding_length is None else tf.minimum(cap, max_decoding_length)
    limits = decode_limits(source_ids, sentence_cap, length_a, length_b)  # [B]
    if max_decode_length is not None:
        length = cap
    elif static_shapes:
        length = length_limit(tf.shape(source_ids)[1], cap, length_a, length_b)  # from the shape alone
    else:
        length = longest(limits)
    # A fixed-size cache keeps every shape static (XLA). Otherwise the cache grows with the search:
    # most searches end long before `length`, and every step reads and copies the whole cache.
    fixed = length if static_shapes else None
    context, cache = model.start_decoding(source_ids, strategy.hypotheses, fixed)  # cache leaves [B*K, ...]
    states = tuple(modifier.start(batch, strategy.hypotheses, length) for modifier in modifiers)
    state = strategy.start(batch, length, cache, modifiers, states)

    def step(state: SearchState, rows, limits) -> SearchState:
        token_ids = tf.reshape(state.alive_token, [-1])  # [B*K]
        logits, cache = model.decode_step(token_ids, state.position, state.cache, context._replace(rows=rows))
        here = Step(state.position, state.alive_ids, limits, strategy.hypotheses)
        logits = own = tf.cast(logits, tf.float32)  # [B*K, V]
        for modifier, slot in zip(modifiers, state.modifiers):
            logits = modifier.logits(slot, logits, here)
        forced = [
            found
            for modifier, slot in zip(modifiers, state.modifiers)
            if (found := modifier.forces(slot, here)) is not None
        ]
        if forced:  # a forced token keeps its own logits: the controls do not rule out a prefix
            logits = tf.where(tf.reduce_any(tf.stack(forced), axis=0)[:, None], own, logits)  # [B*K, V]
        log_probs = LogProbs.of(logits)  # over the full vocabulary
        for modifier, slot in zip(modifiers, state.modifiers):
            log_probs = modifier.log_probs(slot, log_probs, here)
        return strategy.select(state._replace(cache=cache), log_probs, here, modifiers)

    if fixed is not None:  # static shapes: the whole batch runs until its last sentence stops
        state = tf.while_loop(
            lambda state: tf.logical_and(state.position < length, tf.reduce_any(~strategy.stopped(state, limits))),
            lambda state: (step(state, context.rows, limits),),
            (state,),
        )[0]
        return strategy.result(state.finished_ids, state.finished_scores)  # static shapes: never a shortlist
    # The batch shrinks as sentences stop, and the cache grows: every shape but the position's may change.
    loop = _Loop(state, context.rows, limits, tf.range(batch), state.finished_ids, state.finished_scores)
    loop = tf.while_loop(
        lambda loop: tf.logical_and(loop.state.position < length, tf.size(loop.sentences) > 0),
        lambda loop: (_retire(loop._replace(state=step(loop.state, loop.rows, loop.limits)), strategy),),
        (loop,),
        shape_invariants=(tf.nest.map_structure(lambda value: tf.TensorShape([None] * value.shape.rank), loop),),
    )[0]
    ids, scores = strategy.result(loop.ids, loop.scores)
    return (ids, scores) if vocabulary is None else (vocabulary.to_ids(ids), scores)


def _retire(loop: _Loop, strategy: Strategy) -> _Loop:
    """Take the sentences that stopped searching out of the loop: their finished sets go to the
    results, and every row of theirs leaves the state (the cache in one gather), so that later
    steps compute only the sentences still searching."""
    stopped = strategy.stopped(loop.state, loop.limits)  # [B']

    def retire():
        out = tf.where(stopped)[:, 0]  # [stopped]
        rows = tf.gather(loop.sentences, out)[:, None]  # [stopped, 1]
        ids = tf.tensor_scatter_nd_update(loop.ids, rows, tf.gather(loop.state.finished_ids, out))
        scores = tf.tensor_scatter_nd_update(loop.scores, rows, tf.gather(loop.state.finished_scores, out))
        keep = tf.cast(tf.where(tf.logical_not(stopped))[:, 0], tf.int32)  # [B'']
        k = strategy.hypotheses
        hypotheses = tf.reshape(keep[:, None] * k + tf.range(k), [-1])  # [B'' * K]
        kept = {
            name: tf.nest.map_structure(lambda leaf: tf.gather(leaf, keep), value)
            for name, value in loop.state._asdict().items()
            if name not in ("position", "cache")
        }
        state = loop.state._replace(
            **kept, cache=tf.nest.map_structure(lambda leaf: tf.gather(leaf, hypotheses), loop.state.cache)
        )
        rows_kept = tf.nest.map_structure(lambda leaf: tf.gather(leaf, keep), loop.rows)
        return _Loop(state, rows_kept, tf.gather(loop.limits, keep), tf.gather(loop.sentences, keep), ids, scores)

    return tf.cond(tf.reduce_any(stopped), retire, lambda: loop)


def graph_function(function, **options):
    """`tf.function(function, autograph=False, **options)`. Every loop and branch of the searches is
    an explicit `tf.while_loop` or `tf.cond`, so AutoGraph's rewriting of the package's Python
    would only cost time: about half of a first trace (the tiny model's first translation, 5.7 ->
    2.9 CPU-s)."""
    return tf.function(function, autograph=False, **options)


_COMPILED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_COMPILING = threading.Lock()

SOURCE_SPEC = tf.TensorSpec([None, None], tf.int32, name="source_ids")


def compiled(model, name: str, function, jit_compile: bool = False, inputs=(SOURCE_SPEC,), **static):
    """`function(model, *inputs, **static)` as a `tf.function` over `inputs` (default: source_ids
    [batch, length] int32), traced once per model, `name` and static arguments (with
    `jit_compile`, compiled by XLA once per input shape).

    The functions live as long as the model: they are kept by a weak reference to it, and reach
    the model only through it, so that a model (an `Ensemble`, a `with_dtype` copy) that nothing
    else holds is freed with its graphs."""
    key = (name, jit_compile, tuple(sorted(static.items())))
    with _COMPILING:  # threads' first calls (a service's pool) share one function, so one trace
        functions = _COMPILED.setdefault(model, {})
        if key not in functions:
            reference = weakref.ref(model)
            functions[key] = graph_function(
                lambda *args: function(reference(), *args, **static),
                input_signature=list(inputs),
                jit_compile=jit_compile,
            )
        return functions[key]


def traced_settings(decoding: DecodingConfig) -> DecodingConfig:
    """The settings that shape a search's graph: those of `decoding` but for where and how it runs
    (dtype, XLA, batch size, concurrent searches; not the static length) and what is read after
    it (the alignment layer), so that one traced search serves them all."""
    runtime = RuntimeSettings(max_decode_length=decoding.runtime.max_decode_length)
    return DecodingConfig(search=decoding.search, sampling=decoding.sampling, runtime=runtime)
