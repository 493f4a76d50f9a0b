"""Autoregressive decoding as `tf.function`s over the model's key/value cache (§3, §6.1).

The search never sees layers: it drives `model.start_decoding(source_ids, hypotheses,
max_length) -> (context, cache)` and `model.decode_step(token_ids, position, cache, context) ->
(logits, cache)`, and reorders the cache by beam (every cache leaf has the hypotheses on axis 0;
the context, per sentence but for its entry `SHARED_CONTEXT`, is never copied). By default the
cache grows by one position per step and a sentence that stops leaves the batch, so shapes change
from step to step (the TensorFlow graph and TFLite builtins run that). With static shapes
(`static_shapes=True` or a `max_decode_length`) the cache has a fixed length and the whole batch
runs to the end: what XLA compiles (`beam_search(jit_compile=True)` pads its input to a few bucket
shapes).

Beam search (§6.1: beam size 4, length penalty alpha 0.6) keeps an alive and a finished set of
K hypotheses each, as in Wu et al. (2016) and tensor2tensor: each step takes the best 2K
one-token extensions of the alive set; those that end (EOS, or the length limit) among the best
K enter the finished set (as in fairseq, so that K = 1 is greedy decoding), and the best K that
do not end stay alive. A hypothesis's score is the sum of its tokens' log-probabilities over the
full vocabulary (pad and start masked to -inf after the log-softmax) divided by the length
penalty lp(|y|), |y| counting EOS. A sentence stops once round(patience x K) of its hypotheses
have ended (patience 1 by default: the rule of fairseq and CTranslate2; Kasai et al., 2022), or,
with `patience=None`, once no alive hypothesis can beat the kept ones (exact, as tensor2tensor;
slower, and the same BLEU on the held-out verses: bench/RESULTS.md).

Maximum output length per sentence (§6.1): `a * source_length + b` tokens, EOS included
(paper: a = 1, b = 50), capped at the model's `max_length`. A hypothesis that reaches it
without EOS ends there.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import weakref
from typing import NamedTuple

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.inference.prefix import PREFIX_SPEC, check_prefix, forced_out
from keras_transformer.model import SHARED_CONTEXT
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

# Scores are float32 whatever the model's compute dtype; -inf is exact in every float dtype
# (unlike -1e9, which overflows float16) and marks "no hypothesis" in a beam slot.
NEG_INF = float("-inf")


@dataclasses.dataclass(frozen=True)
class DecodeResult:
    """Hypotheses best first: `ids` int32 [batch, beam, length] (pad after EOS), `scores` float32 [batch, beam]."""

    ids: tf.Tensor
    scores: tf.Tensor


def decode_limits(source_ids, max_length: int, a: float = DecodingConfig.length_a, b: int = DecodingConfig.length_b):
    """Per-sentence maximum number of generated tokens, [B] int32: min(a * |source| + b, max_length)."""
    source_length = tf.reduce_sum(tf.cast(source_ids != PAD_ID, tf.int32), axis=1)  # [B]
    # An empty source (a batch's padding row) ends at once rather than keep the batch's search going.
    return tf.where(source_length > 0, length_limit(source_length, max_length, a, b), 1)


def _cap(config, max_decode_length: int | None) -> int:
    """The most tokens any sentence may generate: the model's max_length, or less."""
    return config.max_length if max_decode_length is None else min(max_decode_length, config.max_length)


def _longest(limits):
    """[] int32: the longest of the per-sentence limits [B] (1 for an empty batch)."""
    return tf.reduce_max(tf.concat([limits, [1]], axis=0))


def length_limit(source_length, max_length: int, a: float, b: int):
    """min(a * source_length + b, max_length), at least 1 (int32, any shape)."""
    limit = tf.cast(tf.math.ceil(a * tf.cast(source_length, tf.float32)), tf.int32) + b
    return tf.clip_by_value(limit, 1, max_length)


class LogProbs(NamedTuple):
    """One decoding step's log-probabilities log_softmax(logits) over the full vocabulary, kept as
    `logits` [N, V] float32 (-inf where a token is ruled out: a forced prefix, a banned EOS),
    `probs`, the softmax of the logits before any was ruled out (oneDNN's on CPU: one pass), and
    `log_z` [N, 1], their log-normalizer, set when a token is ruled out. log_z = logit_j - log(p_j)
    for any token j; the best token's probability is at least 1/V, so that j gives it as exactly
    as log_softmax, and `best_tokens` has an intact row's best token at hand. The search reads a
    few tokens of each row (`best_tokens`, `take`), so it never writes the [N, V]
    log-probabilities, whose `log_softmax` costs as much as the blocked top-k over them (128 x
    8000 here: 1.3 and 1.0 ms; `bench/token_selection.py`)."""

    logits: tf.Tensor
    probs: tf.Tensor
    log_z: tf.Tensor | None = None

    @classmethod
    def of(cls, logits) -> LogProbs:
        """The log-probabilities of `logits` [N, V]."""
        logits = tf.cast(logits, tf.float32)
        return cls(logits, tf.nn.softmax(logits))

    def normalized(self) -> LogProbs:
        """The same with `log_z` set, from each row's largest logit and probability."""
        if self.log_z is not None:
            return self
        largest = tf.reduce_max(self.logits, axis=-1, keepdims=True)  # [N, 1]
        return self._replace(log_z=largest - tf.math.log(tf.reduce_max(self.probs, axis=-1, keepdims=True)))

    def rule_out(self, mask) -> LogProbs:
        """The same with log-probability -inf wherever `mask` (broadcast to [N, V]) is True."""
        return self.normalized()._replace(logits=tf.where(mask, NEG_INF, self.logits))

    def take(self, token_ids):
        """The log-probabilities of `token_ids` [N, C] int32 (C tokens of each row): [N, C]."""
        return tf.gather(self.logits, token_ids, batch_dims=1) - self.normalized().log_z


def best_tokens(log_probs: LogProbs, count: int, banned: tuple[int, ...]):
    """The `count` best tokens of every row of `log_probs` [N, V] other than the `banned` ids
    (pad and start: never generated), best first: (log-probabilities, ids) [N, count +
    len(banned)] with every banned id among them at -inf, so that they rank last. Masking after
    the top-k reads K x (2K + 2) values instead of the whole [N, V]."""
    values, ids = top_k_rows(log_probs.logits, min(count + len(banned), log_probs.logits.shape[-1]))  # [N, count + 2]
    log_z = log_probs.log_z
    if log_z is None:  # no token ruled out: the best is the row's largest logit and probability
        log_z = values[:, :1] - tf.math.log(tf.gather(log_probs.probs, ids[:, :1], batch_dims=1))  # [N, 1]
    is_banned = tf.reduce_any(ids[:, :, None] == tf.constant(banned, tf.int32), axis=-1)  # [N, count + 2]
    return tf.where(is_banned, NEG_INF, values - log_z), ids


def length_penalty(length, alpha: float):
    """lp(Y) = (5 + |Y|)^alpha / (5 + 1)^alpha   (Wu et al., 2016, §7, Eq. 14)."""
    return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


class BeamState(NamedTuple):
    """The loop state of `search_beams`; B sentences, K beams, L output positions."""

    position: tf.Tensor  # [] int32, decoder position of the next step = tokens generated so far
    alive_ids: tf.Tensor  # [B, K, L] int32, generated tokens, pad from `position` on
    alive_log_probs: tf.Tensor  # [B, K] float32, sum of token log-probabilities, descending; -inf: empty slot
    alive_token: tf.Tensor  # [B, K] int32, the last token (START_ID before the first step)
    finished_ids: tf.Tensor  # [B, K, L] int32, ending in EOS (or at the length limit), pad after
    finished_scores: tf.Tensor  # [B, K] float32, log-probability / lp, descending; -inf: empty slot
    finished_count: tf.Tensor  # [B] int32, hypotheses that have ended so far (more than K may have)
    cache: list  # the model's decoding cache, every leaf [B * K, ...]


def _gather_beams(values, indices):
    """values [B, N, ...], indices [B, M] into N -> [B, M, ...] (a flat gather: TFLite builtins)."""
    shape = tf.shape(values)
    batch, width = shape[0], shape[1]
    flat = tf.reshape(values, tf.concat([[batch * width], shape[2:]], axis=0))  # [B * N, ...]
    return tf.gather(flat, indices + tf.range(batch)[:, None] * width)  # [B, M, ...]


def top_k_block(vocab_size: int) -> int:
    """The block width of `top_k_rows` for rows of `vocab_size`: the smallest divisor of it from
    sqrt(V) / 2 to sqrt(V) (8000: 50; 32000: 100), so that the rows are cut into blocks without a
    padded copy, or else ceil(sqrt(V) / 2) and a padded copy. Near sqrt(V) / 2 the two top-k stages
    read about as much, and TensorFlow's top-k costs ~5 ns per value it reads
    (`bench/token_selection.py`)."""
    low, high = math.ceil(math.sqrt(vocab_size) / 2), math.isqrt(vocab_size)
    return next((width for width in range(low, high + 1) if vocab_size % width == 0), low)


def top_k_rows(values, k: int, block: int | None = None):
    """The k largest entries of every row of `values` [N, V] (V static), best first, ties to the
    lower index, as `tf.math.top_k`, which this equals.

    In two stages, because top_k over a large vocabulary is slow on CPU (~5 ms for 128 x 8000
    here, the largest single cost of a beam step): the rows are cut into blocks of `block`
    (default `top_k_block(V)`), the k blocks with the largest maxima (which hold the k largest
    entries) are gathered in index order, and top_k runs over their k * block entries only.
    """
    vocab_size = values.shape[-1]
    block = top_k_block(vocab_size) if block is None else block
    blocks = -(-vocab_size // block)
    if blocks <= k:
        return tf.math.top_k(values, k=k)
    if blocks * block != vocab_size:
        values = tf.pad(values, [[0, 0], [0, blocks * block - vocab_size]], constant_values=NEG_INF)
    padded = tf.reshape(values, [-1, blocks, block])  # [N, blocks, block]
    _, best_blocks = tf.math.top_k(tf.reduce_max(padded, axis=-1), k=k)  # [N, k]
    best_blocks = tf.sort(best_blocks, axis=-1)  # index order, so that ties go to the lower index
    candidates = tf.reshape(tf.gather(padded, best_blocks, batch_dims=1), [-1, k * block])  # [N, k * block]
    top_values, top_index = tf.math.top_k(candidates, k=k)  # [N, k]
    return top_values, tf.gather(best_blocks, top_index // block, batch_dims=1) * block + top_index % block


def _beam_step(state: BeamState, tokens_to_log_probs, limits, *, beam_size: int, alpha: float, banned) -> BeamState:
    """Extend every alive hypothesis by one token; refill the alive and the finished sets."""
    k = beam_size
    batch = tf.shape(state.alive_log_probs)[0]
    length = tf.shape(state.alive_ids)[2]
    log_probs, cache = tokens_to_log_probs(tf.reshape(state.alive_token, [-1]), state.position, state.cache)  # [B*K, V]
    # The best 2K of the K x V one-token extensions are among each hypothesis' best 2K tokens.
    token_log_probs, tokens = best_tokens(log_probs, 2 * k, banned)  # [B*K, per_beam]
    per_beam = tokens.shape[-1]
    candidates = state.alive_log_probs[:, :, None] + tf.reshape(token_log_probs, [-1, k, per_beam])  # [B, K, 2K]
    top_log_probs, top_index = tf.math.top_k(tf.reshape(candidates, [-1, k * per_beam]), k=2 * k)  # [B, 2K]
    top_beam = top_index // per_beam  # [B, 2K], the alive hypothesis each candidate extends
    top_token = tf.gather(tf.reshape(tokens, [-1, k * per_beam]), top_index, batch_dims=1)  # [B, 2K]
    write = tf.one_hot(state.position, length, dtype=tf.int32)  # [L]
    top_ids = _gather_beams(state.alive_ids, top_beam) + write * top_token[:, :, None]  # [B, 2K, L]
    generated = state.position + 1  # |y| of every candidate
    ends = (top_token == EOS_ID) | (generated >= limits[:, None])  # [B, 2K]

    # Alive: the best K candidates that do not end (at most K of the 2K end in EOS).
    alive_log_probs, alive_rank = tf.math.top_k(tf.where(ends, NEG_INF, top_log_probs), k=k)  # [B, K]
    alive_beam = _gather_beams(top_beam, alive_rank)  # [B, K]
    cache_index = tf.reshape(alive_beam + tf.range(batch)[:, None] * k, [-1])  # [B*K]

    # Finished: the ending candidates among the best K, merged with the finished set.
    ending_scores = tf.where(ends, top_log_probs / length_penalty(generated, alpha), NEG_INF)  # [B, 2K]
    merged_scores = tf.concat([state.finished_scores, ending_scores[:, :k]], axis=1)  # [B, 2K]
    merged_ids = tf.concat([state.finished_ids, top_ids[:, :k]], axis=1)  # [B, 2K, L]
    finished_scores, finished_rank = tf.math.top_k(merged_scores, k=k)  # [B, K], ties keep the older
    ended = ending_scores[:, :k] > NEG_INF  # [B, K]: real hypotheses (not empty slots) that end

    return state._replace(
        position=generated,
        alive_ids=_gather_beams(top_ids, alive_rank),
        alive_log_probs=alive_log_probs,
        alive_token=_gather_beams(top_token, alive_rank),
        finished_ids=_gather_beams(merged_ids, finished_rank),
        finished_scores=finished_scores,
        finished_count=state.finished_count + tf.reduce_sum(tf.cast(ended, tf.int32), axis=1),
        cache=tf.nest.map_structure(lambda leaf: tf.gather(leaf, cache_index), cache),
    )


def _stopped(state: BeamState, limits, alpha: float, nbest: int, patience: float | None):
    """[B] bool: whether each sentence stops searching.

    patience None (exact): no alive hypothesis of the sentence can beat its `nbest`-th best
    finished one, so its `nbest` best hypotheses are final (with nbest = K: the whole finished
    set). Log-probabilities only fall and lp grows with length, so the best an alive hypothesis
    can reach is its log-probability / lp(limit).

    patience p: round(p * K) hypotheses have ended (Kasai et al., 2022: "first come, first
    served" with a patience factor; p = 1 is the rule of fairseq and CTranslate2). Stops sooner;
    a longer hypothesis that the length penalty would have preferred may be cut off.
    """
    if patience is not None:
        ended = state.finished_count >= round(patience * state.finished_scores.shape[1])
        return ended | (state.position >= limits)  # at its limit, every hypothesis has ended
    best_alive = state.alive_log_probs[:, 0] / length_penalty(limits, alpha)  # [B]
    last_kept = state.finished_scores[:, nbest - 1]  # [B], descending; -inf while the slot is empty
    return last_kept >= best_alive


class Search(NamedTuple):
    """The loop state of a search whose batch shrinks: B' of the B sentences still search."""

    beams: BeamState  # of the B' sentences still searching
    context: dict  # theirs: the model's decoding context, every leaf [B', ...] (its shared entries apart)
    limits: tf.Tensor  # [B'] int32, their length limits
    sentences: tf.Tensor  # [B'] int32, their rows in the batch
    ids: tf.Tensor  # [B, K, L] int32, the finished hypotheses of every sentence that stopped
    scores: tf.Tensor  # [B, K] float32


def _shared_apart(context):
    """(`context` without its entries `SHARED_CONTEXT`, a function that puts them back into such a
    context): the entries of a model's context, or of each model's in an ensemble's tuple, that
    every sentence shares. The search carries the rest in its loop and captures these in the
    loop's body: a loop-invariant input, which TFLite's converter turns into a constant, so that
    the output projection stays a FULLY_CONNECTED op with the embedding as its (int8) weights;
    carried in the loop, it became a BATCH_MATMUL against a float32 copy."""
    if isinstance(context, dict):
        parts = {name: _shared_apart(value) for name, value in context.items() if name != SHARED_CONTEXT}

        def restore(rest):
            restored = {name: put_back(rest[name]) for name, (_, put_back) in parts.items()}
            return {**restored, SHARED_CONTEXT: context[SHARED_CONTEXT]} if SHARED_CONTEXT in context else restored

        return {name: rest for name, (rest, _) in parts.items()}, restore
    if isinstance(context, (list, tuple)):
        parts = [_shared_apart(value) for value in context]
        return (
            type(context)(rest for rest, _ in parts),
            lambda rest: type(context)(put_back(value) for (_, put_back), value in zip(parts, rest)),
        )
    return context, lambda leaf: leaf


def _retire(search: Search, beam_size: int, alpha: float, nbest: int, patience: float | None) -> Search:
    """Take the sentences that stopped searching out of the loop: their finished sets go to the
    results, and every row of theirs leaves the state (the cache in one gather), so that later
    steps compute only the sentences still searching."""
    stopped = _stopped(search.beams, search.limits, alpha, nbest, patience)  # [B']

    def retire():
        out = tf.where(stopped)[:, 0]  # [stopped]
        rows = tf.gather(search.sentences, out)[:, None]  # [stopped, 1]
        ids = tf.tensor_scatter_nd_update(search.ids, rows, tf.gather(search.beams.finished_ids, out))
        scores = tf.tensor_scatter_nd_update(search.scores, rows, tf.gather(search.beams.finished_scores, out))
        keep = tf.cast(tf.where(tf.logical_not(stopped))[:, 0], tf.int32)  # [B'']
        hypotheses = tf.reshape(keep[:, None] * beam_size + tf.range(beam_size), [-1])  # [B'' * K]
        beams = search.beams._replace(
            **{
                name: tf.gather(value, keep)
                for name, value in search.beams._asdict().items()
                if name.startswith(("alive", "finished"))
            },
            cache=tf.nest.map_structure(lambda leaf: tf.gather(leaf, hypotheses), search.beams.cache),
        )
        context = tf.nest.map_structure(lambda leaf: tf.gather(leaf, keep), search.context)
        return Search(beams, context, tf.gather(search.limits, keep), tf.gather(search.sentences, keep), ids, scores)

    return tf.cond(tf.reduce_any(stopped), retire, lambda: search)


def search_beams(
    model, source_ids, decoding: DecodingConfig, *, static_shapes: bool = False, target_prefix=None, constraints=None
):
    """The traceable beam search: source_ids [B, S] int32 -> (ids [B, n, L] int32, scores [B, n] float32),
    the n = `decoding.nbest` (default K) best hypotheses, by the stopping rule `decoding.patience`;
    with `target_prefix` [B, P] int32 (pad-padded), every hypothesis starts with its sentence's
    prefix (`prefix.forced_out`); with `constraints` [B, C, T] int32, the search of
    `constraints.py` (dynamic beam allocation: every phrase in the output).

    Wrap it in `tf.function` or a `tf.Module` signature; `beam_search` is the checked, compiled
    entry point. L = `max_decode_length` if given; else, with `static_shapes` (what XLA compiles:
    every shape follows from the input's), the limit of a source as long as the input,
    min(a * S + b, max_length); else the longest per-sentence limit in the batch.
    """
    config = model.config
    k, alpha, patience = decoding.beam_size, decoding.alpha, decoding.patience
    a, b, max_decode_length = decoding.length_a, decoding.length_b, decoding.max_decode_length
    nbest = k if decoding.nbest is None else decoding.nbest
    source_ids = tf.cast(source_ids, tf.int32)  # [B, S]
    batch = tf.shape(source_ids)[0]
    cap = _cap(config, max_decode_length)
    limits = decode_limits(source_ids, cap, a, b)  # [B]
    if max_decode_length is not None:
        length = cap
    elif static_shapes:
        length = length_limit(tf.shape(source_ids)[1], cap, a, b)  # from the shape alone
    else:
        length = _longest(limits)
    # A fixed-size cache keeps every shape static (XLA). Otherwise the cache grows with the search:
    # most searches end long before `length`, and every step reads and copies the whole cache.
    fixed = length if max_decode_length is not None or static_shapes else None
    context, cache = model.start_decoding(source_ids, k, fixed)  # cache leaves [B*K, ...]
    context, with_shared = _shared_apart(context)  # the loop carries the sentences' rows only

    def log_probs(context, sentences=None):
        def tokens_to_log_probs(token_ids, position, cache):
            logits, cache = model.decode_step(token_ids, position, cache, with_shared(context))  # [B*K, V]
            log_probs = LogProbs.of(logits)  # over the full vocabulary
            if target_prefix is not None:  # the prefixes of the sentences still searching
                prefix = target_prefix if sentences is None else tf.gather(target_prefix, sentences)
                log_probs = log_probs.rule_out(forced_out(prefix, position, k, log_probs.logits.shape[-1]))
            return log_probs, cache

        return tokens_to_log_probs

    banned = (PAD_ID, START_ID)
    first_beam = tf.one_hot(0, k, on_value=0.0, off_value=NEG_INF)  # [K]: one hypothesis, the empty one
    state = BeamState(
        position=tf.constant(0),
        alive_ids=tf.zeros([batch, k, length], tf.int32),
        alive_log_probs=tf.tile(first_beam[None], [batch, 1]),
        alive_token=tf.fill([batch, k], START_ID),
        finished_ids=tf.zeros([batch, k, length], tf.int32),
        finished_scores=tf.fill([batch, k], NEG_INF),
        finished_count=tf.zeros([batch], tf.int32),
        cache=cache,
    )

    def step(state, tokens_to_log_probs, limits, sentences):  # sentences [B'] still searching (None: all)
        return _beam_step(state, tokens_to_log_probs, limits, beam_size=k, alpha=alpha, banned=banned)

    if constraints is not None:  # its own state and step (constraints.py); the search loop is this one
        from keras_transformer.inference.constraints import constrained_search_step

        state, step = constrained_search_step(state, constraints, beam_size=k, alpha=alpha, banned=banned)
    if fixed is not None:  # static shapes: the whole batch runs until its last sentence stops
        state = tf.while_loop(
            lambda state: tf.logical_and(
                state.position < length, tf.reduce_any(~_stopped(state, limits, alpha, nbest, patience))
            ),
            lambda state: (step(state, log_probs(context), limits, None),),
            (state,),
        )[0]
        return state.finished_ids[:, :nbest], state.finished_scores[:, :nbest]
    # The batch shrinks as sentences stop, and the cache grows: every shape but the position's may change.
    search = Search(state, context, limits, tf.range(batch), state.finished_ids, state.finished_scores)
    search = tf.while_loop(
        lambda search: tf.logical_and(search.beams.position < length, tf.size(search.sentences) > 0),
        lambda search: (
            _retire(
                search._replace(
                    beams=step(
                        search.beams, log_probs(search.context, search.sentences), search.limits, search.sentences
                    )
                ),
                k,
                alpha,
                nbest,
                patience,
            ),
        ),
        (search,),
        shape_invariants=(tf.nest.map_structure(lambda value: tf.TensorShape([None] * value.shape.rank), search),),
    )[0]
    return search.ids[:, :nbest], search.scores[:, :nbest]


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
    `jit_compile`, compiled by XLA once per input shape)."""
    key = (name, jit_compile, tuple(sorted(static.items())))
    with _COMPILING:  # threads' first calls (a service's pool) share one function, so one trace
        functions = _COMPILED.setdefault(model, {})
        if key not in functions:
            functions[key] = graph_function(
                lambda *args: function(model, *args, **static), input_signature=list(inputs), jit_compile=jit_compile
            )
        return functions[key]


BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)  # XLA compiles once per shape: batches padded to these
LENGTH_BUCKET = 16  # and source lengths to multiples of this


def bucket_shape(batch, width, max_length: int):
    """The shape XLA compiles a [batch, width] input at: the batch rounded up to `BATCH_BUCKETS`
    (itself past the last), the width to a multiple of `LENGTH_BUCKET` (at most max_length)."""
    buckets = tf.constant(BATCH_BUCKETS, tf.int32)
    batch = tf.where(
        batch > BATCH_BUCKETS[-1], batch, tf.reduce_min(tf.where(buckets >= batch, buckets, BATCH_BUCKETS[-1]))
    )
    return batch, tf.minimum(-(-width // LENGTH_BUCKET) * LENGTH_BUCKET, max_length)


def _xla_search(model, source_ids, decoding: DecodingConfig):
    """`search_beams` compiled by XLA on the input padded to a bucket shape (padding rows and
    columns change no result: `decode_limits` ends an empty source at once, and pad tokens are
    masked), so that a few compilations serve every batch; the result is cut back to the input's
    batch and to the longest limit among its sentences, as `search_beams` returns it."""
    config = model.config
    batch, width = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
    padded_batch, padded_width = bucket_shape(batch, width, config.max_length)
    padding = [[0, padded_batch - batch], [0, padded_width - width]]
    search = compiled(model, "beam", search_beams, jit_compile=True, static_shapes=True, decoding=decoding)
    ids, scores = search(tf.pad(source_ids, padding, constant_values=PAD_ID))
    cap = _cap(config, decoding.max_decode_length)
    length = _longest(decode_limits(source_ids, cap, decoding.length_a, decoding.length_b))
    return ids[:batch, :, :length], scores[:batch]


def search_settings(decoding: DecodingConfig) -> DecodingConfig:
    """The settings that shape the search's graph: those of `decoding` but for where and how it
    runs (dtype, XLA, batch size, concurrent searches) and what is read after it (the alignment
    layer), so that one traced search serves them all."""
    defaults = DecodingConfig()
    return decoding.replace(
        dtype=defaults.dtype,
        jit_compile=defaults.jit_compile,
        batch_size=defaults.batch_size,
        concurrent_batches=defaults.concurrent_batches,
        alignment_layer=defaults.alignment_layer,
    )


def _prefix_search(model, source_ids, target_prefix, decoding: DecodingConfig):
    return search_beams(model, source_ids, decoding, target_prefix=target_prefix)


def _constrained_search(model, source_ids, constraints, decoding: DecodingConfig):
    return search_beams(model, source_ids, decoding, constraints=constraints)


def _prefix_constrained_search(model, source_ids, target_prefix, constraints, decoding: DecodingConfig):
    return search_beams(model, source_ids, decoding, target_prefix=target_prefix, constraints=constraints)


def _traced_search(model, source_ids, decoding: DecodingConfig, target_prefix, constraints):
    """The search of `beam_search`'s inputs: ids, scores."""
    settings = search_settings(decoding)
    if constraints is not None:  # the TensorFlow graph's search (constraints.py), with or without a prefix
        from keras_transformer.inference.constraints import CONSTRAINTS_SPEC, check_constraints

        constraints = check_constraints(constraints, source_ids.shape[0]) if tf.executing_eagerly() else constraints
        if target_prefix is None:
            inputs = (SOURCE_SPEC, CONSTRAINTS_SPEC)
            return compiled(model, "beam_constrained", _constrained_search, inputs=inputs, decoding=settings)(
                source_ids, constraints
            )
        inputs = (SOURCE_SPEC, PREFIX_SPEC, CONSTRAINTS_SPEC)
        search = compiled(model, "prefix_constrained", _prefix_constrained_search, inputs=inputs, decoding=settings)
        return search(source_ids, target_prefix, constraints)
    if target_prefix is not None:  # the TensorFlow graph's search, with or without jit_compile
        search = compiled(model, "beam_prefix", _prefix_search, inputs=(SOURCE_SPEC, PREFIX_SPEC), decoding=settings)
        return search(source_ids, target_prefix)
    if decoding.jit_compile:
        if not model.built:  # XLA cannot create the variables
            model.build()
        return compiled(model, "bucketed_xla", _xla_search, decoding=settings)(source_ids)
    return compiled(model, "beam", search_beams, decoding=settings)(source_ids)


def beam_search(
    model, source_ids, decoding: DecodingConfig | None = None, *, target_prefix=None, constraints=None, **overrides
) -> DecodeResult:
    """Beam search with the GNMT length penalty (§6.1; Wu et al., 2016): the `nbest` (default
    `beam_size`) best hypotheses of every sentence, best first.

    `decoding`: the settings (`DecodingConfig`, whose docstring says what each does; default:
    the paper's), with `overrides` of its fields, e.g. `beam_search(model, ids, beam_size=1,
    alpha=0.0)`. source_ids: [B, S] int32, padded with `PAD_ID`, at most the model's
    `max_length` long (`Translator` truncates longer sources with a warning).
    `max_decode_length`: a static output length (for fixed-shape exports), also a cap on every
    sentence's limit `length_a * |source| + length_b`. `jit_compile`: run the search compiled
    by XLA, on inputs padded to a few bucket shapes (each compiled once, seconds each; then
    several times faster than the TensorFlow graph at small batches). With the exact stopping
    rule (`patience=None`) a sentence stops once no alive hypothesis can beat its `nbest` best
    finished ones (so `nbest=1` stops sooner, with the same best hypothesis).
    `target_prefix`: [B, P] int32 token ids, left-aligned, padded with PAD_ID (no start or EOS):
    every hypothesis of sentence b starts with row b (`prefix.py`; a separate traced search, so
    the search without a prefix is unchanged; never compiled by XLA: `jit_compile` is ignored).
    `constraints`: [B, C, T] int32, C phrases of at most T token ids per sentence, left-aligned,
    padded with PAD_ID (an all-pad phrase: none): every phrase appears in the output, by dynamic
    beam allocation (`constraints.py`; a separate traced search, never XLA's; with a prefix too);
    hypotheses that meet every phrase come first, and a phrase is met only if the length limit
    leaves room for it. Returns ids [B, nbest, L] and scores [B, nbest].
    """
    decoding = (decoding or DecodingConfig()).replace(**overrides)
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    if source_ids.shape.rank != 2:
        raise ValueError(f"source_ids must be [batch, length], got shape {source_ids.shape}")
    if source_ids.shape[1] is not None and source_ids.shape[1] > model.config.max_length:
        raise ValueError(
            f"source of {source_ids.shape[1]} tokens is longer than the model's max_length {model.config.max_length}"
        )
    if target_prefix is not None and tf.executing_eagerly():
        target_prefix = check_prefix(target_prefix, source_ids.shape[0])
    ids, scores = _traced_search(model, source_ids, decoding, target_prefix, constraints)
    return DecodeResult(ids=ids, scores=scores)


def greedy_search(model, source_ids, *, target_prefix=None, constraints=None, **overrides) -> DecodeResult:
    """Greedy decoding, which is beam search with beam_size 1 and alpha 0: ids [B, 1, L], scores
    [B, 1] = the sum of the chosen tokens' log-probabilities; `overrides` of the other
    `DecodingConfig` fields (e.g. `length_b`); `target_prefix` and `constraints` as
    `beam_search`'s (greedy with constraints writes each phrase as soon as it can: weak)."""
    decoding = DecodingConfig.greedy(**overrides)
    return beam_search(model, source_ids, decoding, target_prefix=target_prefix, constraints=constraints)
