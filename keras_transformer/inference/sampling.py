"""Random sampling: translations drawn from the model's distribution, one token at a time.

Over the same key/value cache as the beam search (`model.start_decoding` with `num_samples`
hypotheses per sentence, `model.decode_step`). At each step the log-probabilities (over the full
vocabulary, pad and start banned, as in the search) are divided by the temperature T, cut to the
K most likely tokens (`sampling_topk`, 0: all), then to the nucleus, the fewest most likely
tokens whose renormalised probability reaches P (`sampling_topp`; Holtzman et al., 2020), and one
token is drawn from the renormalised rest (the order of CTranslate2 and Hugging Face). A sample
ends at EOS or at its sentence's length limit (`decoding.decode_limits`), as a hypothesis does.

Stateless random ops: a step draws with `stateless_categorical(seed = fold_in(seed, step))`, so
the same seed, model and batch give the same samples. A sample's score is a hypothesis's: the
sum of its tokens' log-probabilities under the model itself (not the tempered, cut
distribution it was drawn from) over lp(|y|) (`scoring.score` gives the same number); the samples
of a sentence come best first.
"""

from __future__ import annotations

import random

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.inference.decoding import (
    NEG_INF,
    SOURCE_SPEC,
    DecodeResult,
    _cap,
    _gather_beams,
    _longest,
    compiled,
    decode_limits,
    length_penalty,
    search_settings,
)
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

SEED_SPEC = tf.TensorSpec([2], tf.int64, name="seed")


def sampling_log_probs(log_probs, topk: int, topp: float, temperature: float):
    """log_probs [N, V] -> the logits that `sample` draws from [N, V]: log_probs / T, -inf outside
    the K best (K = 0: none cut), then outside the nucleus of probability P of what is left."""
    logits = log_probs / temperature  # [N, V]
    vocab_size = log_probs.shape[-1]
    if 0 < topk < vocab_size:
        kth = tf.math.top_k(logits, k=topk).values[:, -1:]  # [N, 1]
        logits = tf.where(logits < kth, NEG_INF, logits)
    if topp < 1.0:
        ranked = tf.sort(logits, axis=-1, direction="DESCENDING")  # [N, V]
        before = tf.math.cumsum(tf.nn.softmax(ranked, axis=-1), axis=-1, exclusive=True)  # [N, V]
        kept = tf.reduce_sum(tf.cast(before < topp, tf.int32), axis=-1)  # [N], >= 1: the first has 0 before it
        smallest = tf.gather(ranked, kept - 1, batch_dims=1)[:, None]  # [N, 1]
        logits = tf.where(logits < smallest, NEG_INF, logits)
    return logits


def sample_search(model, source_ids, seed, *, decoding: DecodingConfig):
    """The traceable sampling: source_ids [B, S] int32, seed [2] int64 -> (ids [B, n, L] int32,
    scores [B, n] float32), n = `decoding.num_samples` samples per sentence, best first."""
    n = decoding.num_samples
    source_ids = tf.cast(source_ids, tf.int32)  # [B, S]
    batch = tf.shape(source_ids)[0]
    cap = _cap(model.config, decoding.max_decode_length)
    limits = decode_limits(source_ids, cap, decoding.length_a, decoding.length_b)  # [B]
    length = _longest(limits)
    row_limits = tf.repeat(limits, n)  # [B * n]
    context, cache = model.start_decoding(source_ids, n)  # cache leaves [B * n, ...], growing
    banned = tf.reduce_any(tf.range(model.config.vocab_size)[:, None] == [PAD_ID, START_ID], axis=-1)  # [V]

    def step(position, ids, token, log_prob, done, cache):
        logits, cache = model.decode_step(token, position, cache, context)  # [B * n, V]
        log_probs = tf.where(banned, NEG_INF, tf.nn.log_softmax(tf.cast(logits, tf.float32), axis=-1))
        drawn = sampling_log_probs(
            log_probs, decoding.sampling_topk, decoding.sampling_topp, decoding.sampling_temperature
        )
        step_seed = tf.random.experimental.stateless_fold_in(seed, tf.cast(position, tf.int64))
        sampled = tf.cast(tf.random.stateless_categorical(drawn, 1, step_seed)[:, 0], tf.int32)  # [B * n]
        sampled = tf.where(done, PAD_ID, sampled)
        log_prob += tf.where(done, 0.0, tf.gather(log_probs, sampled, batch_dims=1))
        ids += tf.one_hot(position, length, dtype=tf.int32) * sampled[:, None]  # [B * n, L]
        done |= (sampled == EOS_ID) | (position + 1 >= row_limits)
        return position + 1, ids, sampled, log_prob, done, cache

    rows = batch * n
    state = (
        tf.constant(0),
        tf.zeros([rows, length], tf.int32),
        tf.fill([rows], START_ID),
        tf.zeros([rows], tf.float32),
        tf.zeros([rows], tf.bool),
        cache,
    )
    invariants = tf.nest.map_structure(lambda value: tf.TensorShape([None] * value.shape.rank), state)
    _, ids, _, log_prob, _, _ = tf.while_loop(
        lambda position, ids, token, log_prob, done, cache: tf.logical_and(
            position < length, tf.logical_not(tf.reduce_all(done))
        ),
        step,
        state,
        shape_invariants=invariants,
    )
    tokens = tf.reduce_sum(tf.cast(ids != PAD_ID, tf.int32), axis=1)  # [B * n], EOS included
    scores = tf.reshape(log_prob / length_penalty(tokens, decoding.alpha), [batch, n])  # [B, n]
    scores, order = tf.math.top_k(scores, k=n)  # best first
    return _gather_beams(tf.reshape(ids, [batch, n, length]), order), scores


def sample(model, source_ids, decoding: DecodingConfig | None = None, **overrides) -> DecodeResult:
    """`decoding.num_samples` translations per sentence drawn by `decoding`'s sampling settings
    (with `overrides` of its fields; sampling must be on: `sampling_topk` 0 or K > 1), best
    first: ids [B, n, L], scores [B, n]. `decoding.seed` (default: a new one per call) gives
    the same samples for the same batch; source_ids as `beam_search` takes them."""
    decoding = (decoding or DecodingConfig()).replace(**overrides)
    if not decoding.sampling:
        raise ValueError("sampling needs sampling_topk 0 (the whole vocabulary) or K > 1")
    source_ids = tf.convert_to_tensor(source_ids, tf.int32)
    if source_ids.shape.rank != 2:
        raise ValueError(f"source_ids must be [batch, length], got shape {source_ids.shape}")
    seed = random.getrandbits(62) if decoding.seed is None else decoding.seed
    return DecodeResult(*sample_with_seed(model, source_ids, tf.constant([seed, 0], tf.int64), decoding))


def sample_with_seed(model, source_ids, seed, decoding: DecodingConfig):
    """`sample_search` traced once per model and settings, with the seed [2] int64 an input."""
    settings = search_settings(decoding).replace(seed=None)
    search = compiled(model, "sample", sample_search, inputs=(SOURCE_SPEC, SEED_SPEC), decoding=settings)
    return search(source_ids, seed)
