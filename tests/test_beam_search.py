"""Beam search (§6.1; Wu et al., 2016): hand-derived beams on scripted probabilities, exactness
against brute force, cached == uncached, greedy, tracing, XLA, TFLite, and bad input."""

import itertools
import math

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2
from test_decoding import CONFIG, model, reference_greedy  # noqa: F401  (model: the shared fixture)

from keras_transformer import DecodingConfig, TransformerConfig, beam_search
from keras_transformer.model import DecodingContext
from keras_transformer.search.decoding import compiled, search_beams, traced_beam_search
from keras_transformer.special_tokens import PAD_ID, START_ID

EOS = 2
SOURCE = np.array([[5, 6, 7, 2], [8, 2, 0, 0]], np.int32)


def decoding_context(rows, max_length):
    """A `DecodingContext` of `rows`, its flag of a fixed-size cache set by `max_length`."""
    return DecodingContext(rows=rows, shared=(), fixed_cache=max_length is not None)


def empty_inputs(source_ids, hypotheses, max_length):
    """A cache of decoder inputs: growing (max_length None) or of max_length fixed slots."""
    return {"fed": tf.zeros([tf.shape(source_ids)[0] * hypotheses, max_length or 0], tf.int32)}


def feed(fed, token_ids, position, context):
    """`token_ids` [B] appended to a growing cache of inputs, or written at `position` in a fixed one."""
    if not context.fixed_cache:
        return tf.concat([fed, token_ids[:, None]], axis=1)
    return fed + tf.one_hot(position, tf.shape(fed)[1], dtype=tf.int32)[None, :] * token_ids[:, None]


class ScriptedModel:
    """The decoding protocol the search drives (`search.DecodingModel`), with
    next-token probabilities looked up by the generated prefix; unlisted tokens get ~1e-9.
    Counts the decoding steps it runs."""

    def __init__(self, probabilities, vocab_size=6, max_length=8):
        self.config = TransformerConfig.tiny(vocab_size=vocab_size, max_length=max_length)
        self.probabilities = probabilities  # prefix tuple -> {token: p} or an array of logits [V]
        self.steps = 0

    def start_decoding(self, source_ids, hypotheses, max_length=None):
        return decoding_context((), max_length), empty_inputs(source_ids, hypotheses, max_length)

    def decode_step(self, token_ids, position, cache, context):
        fed = feed(cache["fed"], token_ids, position, context)  # [B, position + 1 or L]
        logits = tf.numpy_function(self._logits, [fed, position], tf.float32)
        logits.set_shape([None, self.config.vocab_size])
        return logits, {"fed": fed}

    def _logits(self, fed, position):
        self.steps += 1
        logits = np.full((len(fed), self.config.vocab_size), np.log(1e-9), np.float32)
        for row, prefix in zip(logits, fed[:, 1 : position + 1]):  # fed[:, 0] is start_id
            script = self.probabilities(tuple(int(t) for t in prefix))
            if isinstance(script, dict):
                for token, p in script.items():
                    row[token] = np.log(p)
            else:
                row[:] = script
        return logits


def lp(length, alpha):
    return ((5 + length) / 6) ** alpha


# K = 2, alpha = 0. Step 1: [3] .5, [4] .3 alive; [EOS] .15 ranks 3rd of the 2K, so it never
# enters the finished set. Step 2: [3 EOS] .3 finishes; [4 3] .27 and [3 4] .2 stay alive.
# Step 3: [4 3 EOS] .27 and [3 4 EOS] .14 end; finished = {[3 EOS] .3, [4 3 EOS] .27}, and the
# best alive, [3 4 5] .06, cannot beat .27: the search stops after 3 of its 6 steps.
EOS_SCRIPT = {
    (): {3: 0.5, 4: 0.3, EOS: 0.15, 5: 0.05},
    (3,): {EOS: 0.6, 4: 0.4},
    (4,): {EOS: 0.1, 3: 0.9},
    (4, 3): {EOS: 1.0},
    (3, 4): {EOS: 0.7, 5: 0.3},
}


def test_eos_ends_hypotheses_and_the_search_stops_early():
    model = ScriptedModel(lambda prefix: EOS_SCRIPT.get(prefix, {}))
    result = beam_search(model, [[5, 2]], beam_size=2, alpha=0.0, max_decode_length=6)
    np.testing.assert_array_equal(result.ids.numpy()[0], [[3, EOS, 0, 0, 0, 0], [4, 3, EOS, 0, 0, 0]])
    np.testing.assert_allclose(result.scores.numpy()[0], np.log([0.3, 0.27]), rtol=1e-5)
    assert model.steps == 3


# K = 2. The alive hypotheses go [3], [4] -> [4 5] .36, [3 3] .27 (while [3 EOS] .3 finishes)
# -> [4 5 5] .324, [3 3 3] .216 -> at the limit of 4 tokens, [4 5 5 EOS] .2754 and [3 3 3 EOS]
# .1296 end. alpha 0: [3 EOS] wins (log .3 > log .2754); alpha 0.6 favours the longer one:
# log .3 / lp(2) = -1.0976 < log .2754 / lp(4) = -1.0111.
LENGTH_SCRIPT = {
    (): {3: 0.6, 4: 0.4},
    (3,): {EOS: 0.5, 3: 0.45, 5: 0.05},
    (4,): {5: 0.9, EOS: 0.1},
    (3, 3): {3: 0.8, EOS: 0.2},
    (4, 5): {5: 0.9, EOS: 0.1},
    (3, 3, 3): {EOS: 0.6, 3: 0.4},
    (4, 5, 5): {EOS: 0.85, 5: 0.15},
}


@pytest.mark.parametrize(
    "alpha, best, second",
    [(0.0, [3, EOS, 0, 0], [4, 5, 5, EOS]), (0.6, [4, 5, 5, EOS], [3, EOS, 0, 0])],
)
def test_length_penalty_changes_the_winner(alpha, best, second):
    model = ScriptedModel(lambda prefix: LENGTH_SCRIPT.get(prefix, {}))
    result = beam_search(model, [[5, 2]], beam_size=2, alpha=alpha, max_decode_length=4)
    np.testing.assert_array_equal(result.ids.numpy()[0], [best, second])
    short, long = math.log(0.3) / lp(2, alpha), math.log(0.4 * 0.9 * 0.9 * 0.85) / lp(4, alpha)
    np.testing.assert_allclose(result.scores.numpy()[0], sorted([short, long], reverse=True), rtol=1e-5)


def random_logits(prefix):
    return np.random.default_rng([len(prefix), *prefix]).normal(size=5).astype(np.float32)


def brute_force(limit, alpha, vocab_size=5):
    """Every hypothesis over the tokens 2..V-1 (EOS only last, at most `limit` tokens), scored
    as the contract says, best first."""
    hypotheses = []
    for length in range(1, limit + 1):
        for ids in itertools.product(range(EOS, vocab_size), repeat=length):
            if EOS in ids[:-1] or (length < limit and ids[-1] != EOS):
                continue
            log_prob = 0.0
            for t, token in enumerate(ids):
                log_probs = tf.nn.log_softmax(random_logits(ids[:t])).numpy()
                log_prob += log_probs[token]
            hypotheses.append((log_prob / lp(length, alpha), list(ids) + [0] * (limit - length)))
    return sorted(hypotheses, reverse=True)


def test_a_beam_as_wide_as_the_search_space_is_exact():
    expected = brute_force(limit=3, alpha=0.6)
    assert len(expected) == 15  # 1 + 2 + 4 ending in EOS, 8 stopped at the limit
    result = beam_search(
        ScriptedModel(random_logits, vocab_size=5), [[3, 2]], beam_size=15, alpha=0.6, max_decode_length=3
    )
    np.testing.assert_array_equal(result.ids.numpy()[0], [ids for _, ids in expected])
    np.testing.assert_allclose(result.scores.numpy()[0], [score for score, _ in expected], rtol=1e-5)


class Uncached:
    """The real model without its key/value cache: every step runs the whole decoder over the prefix."""

    def __init__(self, model):
        self.model, self.config = model, model.config

    def start_decoding(self, source_ids, hypotheses, max_length=None):
        memory, source_mask = self.model.encode(source_ids, training=False)
        return decoding_context((memory, source_mask), max_length), empty_inputs(source_ids, hypotheses, max_length)

    def decode_step(self, token_ids, position, cache, context):
        fed = feed(cache["fed"], token_ids, position, context)  # [B, position + 1 or L]
        hypotheses = tf.shape(fed)[0] // tf.shape(context.rows[0])[0]  # the beams of each sentence
        memory, source_mask = (tf.repeat(rows, hypotheses, axis=0) for rows in context.rows)
        logits = self.model.decode(fed, memory, source_mask, training=False)  # [B, L, V]
        return tf.gather(logits, position, axis=1), {"fed": fed}


@pytest.mark.parametrize("b", [5, pytest.param(30, marks=pytest.mark.slow)], ids=["short", "long"])  # issue 50 item 10
def test_n_best_contract_and_cached_equals_uncached(model, b):
    result = beam_search(model, SOURCE, beam_size=3, alpha=0.6, length_b=b)
    ids, scores = result.ids.numpy(), result.scores.numpy()
    assert ids.dtype == np.int32 and ids.shape == (2, 3, min(4 + b, CONFIG.max_length))  # |source| + b
    assert scores.dtype == np.float32
    assert np.all(np.diff(scores, axis=1) <= 0) and np.all(np.isfinite(scores))
    for hypothesis in ids.reshape(-1, ids.shape[-1]):
        length = np.count_nonzero(hypothesis)
        assert np.all(hypothesis[:length] > START_ID) and np.all(hypothesis[length:] == PAD_ID)
        assert EOS not in hypothesis[: length - 1]
    assert len({tuple(h) for h in ids[0]}) == 3  # n distinct hypotheses
    uncached = beam_search(Uncached(model), SOURCE, beam_size=3, alpha=0.6, length_b=b)
    np.testing.assert_array_equal(uncached.ids.numpy(), ids)
    np.testing.assert_allclose(uncached.scores.numpy(), scores, rtol=1e-4)


def test_beam_1_with_alpha_0_is_greedy(model):
    """K = 1: the best candidate either ends (and is finished) or stays alive, as greedy's argmax."""
    ids = beam_search(model, SOURCE, beam_size=1, alpha=0.0, length_b=5).ids.numpy()[:, 0]
    expected = reference_greedy(model, SOURCE, ids.shape[1])
    for row, reference, limit in zip(ids, expected, [9, 7]):  # |source| + 5
        eos = np.flatnonzero(reference == EOS)
        end = min(eos[0] + 1 if len(eos) else limit, limit)
        np.testing.assert_array_equal(row[:end], reference[:end])
        assert np.all(row[end:] == PAD_ID)


def test_no_retracing_on_new_shapes(model):
    beam_search(model, SOURCE)
    function = traced_beam_search(model, DecodingConfig())
    beam_search(model, np.array([[5, 6, 7, 8, 9, 2]], np.int32))
    beam_search(model, SOURCE)
    assert function.experimental_get_tracing_count() == 1


# ~8 CPU-s of compilation: `make test` holds XLA's beams to the graph's (the same model and search_beams, beam 3,
# a fixed-length cache) in test_decoding.py's test_xla_on_bucket_shapes_gives_the_graphs_beams.
@pytest.mark.slow
def test_xla_gives_the_same_beams(model):
    expected = beam_search(model, SOURCE, beam_size=3, max_decode_length=12)
    xla = tf.function(
        lambda s: search_beams(model, s, DecodingConfig(beam_size=3, max_decode_length=12)), jit_compile=True
    )
    ids, scores = xla(tf.constant(SOURCE))
    np.testing.assert_array_equal(ids.numpy(), expected.ids.numpy())
    np.testing.assert_allclose(scores.numpy(), expected.scores.numpy(), rtol=1e-4)


def tflite_beam_search(model, decoding: DecodingConfig) -> bytes:
    """The compiled beam search as a TFLite flatbuffer of builtin ops only (no Flex).

    The variables are frozen first: the converter leaves those read inside the `while` body as
    READ_VARIABLE ops, which fail at run time ("read_variable.cc ... variable != nullptr").
    """
    concrete = compiled(model, "beam", search_beams, decoding=decoding).get_concrete_function()
    frozen = convert_variables_to_constants_v2(concrete)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen])
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    return converter.convert()


def assert_tflite_gives_the_graphs_beams(model, decoding: DecodingConfig):
    """`tflite_beam_search` run by LiteRT on SOURCE: the TensorFlow graph's ids and scores."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=tflite_beam_search(model, decoding))
    (source,) = interpreter.get_input_details()
    interpreter.resize_tensor_input(source["index"], SOURCE.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(source["index"], SOURCE)
    interpreter.invoke()
    outputs = {d["dtype"]: interpreter.get_tensor(d["index"]) for d in interpreter.get_output_details()}
    expected = beam_search(model, SOURCE, decoding)
    np.testing.assert_array_equal(outputs[np.int32], expected.ids.numpy())
    np.testing.assert_allclose(outputs[np.float32], expected.scores.numpy(), rtol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("patience", [1.0, None])
def test_tflite_builtins_give_the_same_beams(model, patience):
    assert_tflite_gives_the_graphs_beams(model, DecodingConfig(beam_size=3, length_b=30, patience=patience))


@pytest.mark.parametrize(
    "arguments, message",
    [
        (dict(beam_size=0), "beam_size must be >= 1, got 0"),
        (dict(alpha=-0.1), "alpha must be >= 0, got -0.1"),
        (dict(max_decode_length=0), "max_decode_length must be >= 1, got 0"),
        (dict(nbest=5), "nbest must be between 1 and the beam size 4, got 5"),
        (dict(patience=0.0), r"patience must keep at least nbest hypotheses, round\(patience x beam_size\) >= 4"),
        (dict(patience=0.5), r"round\(patience x beam_size\) >= 4, got 0.5"),
    ],
)
def test_bad_settings_are_refused(model, arguments, message):
    with pytest.raises(ValueError, match=message):
        beam_search(model, SOURCE, **arguments)


def test_a_source_longer_than_max_length_is_refused(model):
    with pytest.raises(ValueError, match="source of 21 tokens is longer than the model's max_length 20"):
        beam_search(model, np.full((1, 21), 5, np.int32))


def test_an_empty_batch_gives_empty_results(model):
    result = beam_search(model, np.zeros((0, 4), np.int32), beam_size=2)
    assert result.ids.shape[:2] == (0, 2) and result.scores.shape == (0, 2)


@pytest.mark.parametrize("block", [16, None])
@pytest.mark.parametrize("vocab_size, k", [(1000, 8), (300, 2), (129, 4), (64, 8), (8000, 10), (1009, 10)])
def test_top_k_rows_equals_top_k_with_ties(vocab_size, k, block):
    from keras_transformer.search.log_probs import top_k_rows

    rng = np.random.default_rng(vocab_size)
    values = np.round(rng.normal(size=(6, vocab_size)), 1).astype(np.float32)  # many exact ties
    values[1] = 0.0  # a row of ties only
    values[2, :5] = np.inf
    expected = tf.math.top_k(values, k=k)
    result = top_k_rows(tf.constant(values), k, block=block)
    np.testing.assert_array_equal(result[0], expected.values)
    np.testing.assert_array_equal(result[1], expected.indices)


def test_top_k_blocks_divide_the_vocabulary_when_they_can():
    """No padded copy of the logits where V has a divisor from sqrt(V) / 2 to sqrt(V); else the
    narrowest block of that range, and a pad."""
    from keras_transformer.search.log_probs import top_k_block

    assert top_k_block(8000) == 50 and top_k_block(32000) == 100 and top_k_block(37000) == 100
    assert top_k_block(1009) == 16  # a prime: ceil(sqrt(1009) / 2), padded
    for vocab_size in range(64, 5000, 37):
        block = top_k_block(vocab_size)
        assert np.sqrt(vocab_size) / 2 <= block <= max(np.sqrt(vocab_size), np.ceil(np.sqrt(vocab_size) / 2))


def test_step_log_probabilities_equal_log_softmax_in_every_tail():
    """`LogProbs` gives log_softmax's values for the tokens the search reads, also where the
    probabilities underflow float32 (a peaked row: tokens 200 nats below the best) and after
    tokens are ruled out (which keeps the full vocabulary's normalizer)."""
    from keras_transformer.search.log_probs import LogProbs, best_tokens

    rng = np.random.default_rng(0)
    logits = (rng.normal(size=(5, 3000)) * 4).astype(np.float32)
    logits[1] *= 60.0  # a peaked row: most probabilities are 0 in float32
    logits[2, 7] = 400.0
    want = tf.nn.log_softmax(logits).numpy()
    log_probs = LogProbs.of(tf.constant(logits))
    ids = rng.integers(0, 3000, size=(5, 40)).astype(np.int32)
    got = log_probs.take(tf.constant(ids)).numpy()
    np.testing.assert_allclose(got, np.take_along_axis(want, ids, axis=1), rtol=1e-6, atol=1e-4)
    assert np.isfinite(got).all() and (np.take_along_axis(want, ids, axis=1)[1] < -1000).any()
    values, tokens = best_tokens(log_probs, 6, banned=(0, 1))
    kept = values.numpy() > -np.inf  # pad and start rank last, at -inf
    np.testing.assert_allclose(values.numpy()[kept], np.take_along_axis(want, tokens.numpy(), 1)[kept], atol=1e-4)
    ruled_out = log_probs.rule_out(tf.range(3000) == int(tokens[0, 0])).take(tokens[:, :1]).numpy()
    assert ruled_out[0, 0] == -np.inf and np.allclose(ruled_out[1:, 0], values.numpy()[1:, 0], atol=1e-4)


def test_sentences_that_stop_early_leave_the_batch_and_keep_their_results(model):
    """The batch shrinks as sentences stop: each sentence's beams equal its beams decoded alone."""
    source = np.array([[5, 6, 7, 8, 9, 2], [8, 2, 0, 0, 0, 0], [11, 12, 2, 0, 0, 0], [5, 2, 0, 0, 0, 0]], np.int32)
    batched = beam_search(model, source, beam_size=3, alpha=0.6, length_b=8)
    lengths = [np.count_nonzero(h) for h in batched.ids.numpy()[:, 0]]
    assert len(set(lengths)) > 1  # the sentences stop at different steps
    for row in range(len(source)):
        alone = beam_search(model, source[row : row + 1], beam_size=3, alpha=0.6, length_b=8)
        width = alone.ids.shape[-1]
        np.testing.assert_array_equal(batched.ids.numpy()[row, :, :width], alone.ids.numpy()[0])
        assert not batched.ids.numpy()[row, :, width:].any()
        np.testing.assert_allclose(batched.scores.numpy()[row], alone.scores.numpy()[0], rtol=1e-5)


def test_one_best_stops_as_soon_as_the_best_is_final():
    """The exact rule. K = 2, alpha = 0. Step 1: [EOS] .6 finishes; [3] .4 stays alive, and no continuation of it
    can beat log .6 (log-probabilities only fall): the best is final after one step. The whole
    finished set needs a second hypothesis, which [3, ...] only gives at the length limit."""

    def script(prefix):
        return {EOS: 0.6, 3: 0.4} if not prefix else {3: 0.5, 4: 0.5}

    full, best = ScriptedModel(script), ScriptedModel(script)
    everything = beam_search(full, [[3, 2]], beam_size=2, alpha=0.0, max_decode_length=6, patience=None)
    one = beam_search(best, [[3, 2]], beam_size=2, alpha=0.0, max_decode_length=6, nbest=1, patience=None)
    assert (best.steps, full.steps) == (1, 6)
    assert one.ids.shape == (1, 1, 6)
    np.testing.assert_array_equal(one.ids, everything.ids[:, :1])
    np.testing.assert_allclose(one.scores, everything.scores[:, :1])


def test_one_best_equals_the_full_search_best_on_the_model(model):
    for b in (5, 30):
        everything = beam_search(model, SOURCE, beam_size=3, alpha=0.6, length_b=b, patience=None)
        one = beam_search(model, SOURCE, beam_size=3, alpha=0.6, length_b=b, nbest=1, patience=None)
        np.testing.assert_array_equal(one.ids[:, 0, : everything.ids.shape[-1]], everything.ids[:, 0])
        np.testing.assert_allclose(one.scores[:, 0], everything.scores[:, 0], rtol=1e-5)


# K = 1, alpha = 1. Step 1: [EOS] (.5, ties go to the lower id) ends with log .5 / lp(1) = -0.693;
# [3] stays alive, and could still reach log .5 / lp(4) = -0.462 at the limit. Step 2: [3 EOS]
# ends with log .5 / lp(2) = -0.594 and wins. Patience 1 stops when the first hypothesis ends.
PATIENCE_SCRIPT = {(): {EOS: 0.5, 3: 0.5}, (3,): {EOS: 1.0}}


@pytest.mark.parametrize("patience, steps, best", [(None, 2, [3, EOS]), (1.0, 1, [EOS, 0]), (2.0, 2, [3, EOS])])
def test_patience_stops_after_round_p_k_ended_hypotheses(patience, steps, best):
    """Kasai et al. (2022): patience p stops once round(p * K) hypotheses have ended, cutting
    off a longer hypothesis that the length penalty prefers; the exact rule (None) finds it."""
    model = ScriptedModel(lambda prefix: PATIENCE_SCRIPT.get(prefix, {}))
    result = beam_search(model, [[3, 2]], beam_size=1, alpha=1.0, max_decode_length=4, patience=patience)
    assert model.steps == steps
    np.testing.assert_array_equal(result.ids.numpy()[0, 0, :2], best)
    assert not result.ids.numpy()[0, 0, 2:].any()


# XLA: ~12 CPU-s of compilation, slow (XLA's beams against the graph's: test_decoding.py's bucket test).
@pytest.mark.parametrize("jit_compile", [False, pytest.param(True, marks=pytest.mark.slow)])
def test_patience_counts_every_ended_hypothesis(model, jit_compile):
    """Stopping after more hypotheses than can ever end runs every sentence to its limit, which
    finds what the exact rule finds (it stops only when nothing can change); patience 1 stops
    sooner on the same beams, so its hypotheses are among what the longer search saw."""
    exact = beam_search(model, SOURCE, beam_size=3, alpha=0.6, length_b=6, patience=None, jit_compile=jit_compile)
    never = beam_search(model, SOURCE, beam_size=3, alpha=0.6, length_b=6, patience=100.0, jit_compile=jit_compile)
    np.testing.assert_array_equal(never.ids[..., : exact.ids.shape[-1]], exact.ids)
    np.testing.assert_allclose(never.scores, exact.scores, rtol=1e-5)
    first = beam_search(
        model, SOURCE, beam_size=3, alpha=0.6, length_b=6, patience=1.0, nbest=1, jit_compile=jit_compile
    )
    assert np.all(np.isfinite(first.scores))
    assert np.all(first.scores[:, 0] <= exact.scores[:, 0] + 1e-5)
