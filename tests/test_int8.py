"""int8 weights for decoding (issue 39): `Linear`, `SharedEmbedding` and `Transformer.with_int8`.

Dynamic-range quantisation, as Keras' `AbsMaxQuantizer` rounds: W_q = round(127 W / m), m the
largest |w| of the weight's unit (a Linear's output unit, an embedding's row), and W ~= W_q m / 127;
each weight is off by at most m / 254, so a product x W by at most sum_i |x_i| m_j / 254."""

import warnings

import numpy as np
import pytest

from keras_transformer import DecodingConfig, Transformer, TransformerConfig, Translator
from keras_transformer.layers import SharedEmbedding
from keras_transformer.layers.linear import Linear
from keras_transformer.special_tokens import START_ID


def rounded(weights: np.ndarray, axis: int) -> np.ndarray:
    """`weights` rounded to int8 and back by hand, one scale per slice along `axis` (the max |w|)."""
    largest = np.abs(weights).max(axis=axis, keepdims=True)
    return np.round(weights * 127 / largest) * largest / 127


def test_an_int8_linear_stores_int8_weights_and_multiplies_by_them():
    rng = np.random.default_rng(0)
    layer = Linear(6, activation="relu")
    x = rng.normal(size=(2, 3, 5)).astype("float32")  # [B, T, d_in]
    layer.build(x.shape)
    layer.bias.assign(rng.normal(size=6).astype("float32"))
    kernel, bias = layer.kernel.numpy(), layer.bias.numpy()
    floats = np.asarray(layer(x))
    layer.quantize("int8")
    assert layer.kernel.dtype == "int8" and layer.kernel.shape == (5, 6) and layer.kernel_scale.shape == (6,)
    got = np.asarray(layer(x))
    assert got.shape == (2, 3, 6)
    np.testing.assert_allclose(got, np.maximum(x @ rounded(kernel, axis=0) + bias, 0), rtol=1e-5, atol=1e-6)
    bound = np.abs(x).sum(-1, keepdims=True) * np.abs(kernel).max(0) / 254  # [B, T, units]
    assert (np.abs(got - floats) <= bound + 1e-6).all()
    assert not np.array_equal(got, floats)  # the rounding is real


def test_an_int8_shared_embedding_rounds_each_row_for_the_lookup_and_the_projection():
    rng = np.random.default_rng(1)
    layer = SharedEmbedding(vocab_size=11, d_model=4, output_bias=True)
    ids = np.array([[1, 5, 0], [10, 3, 3]])
    layer.build()
    layer.logit_bias.assign(rng.normal(size=11).astype("float32"))
    table, bias = layer.embeddings.numpy(), layer.logit_bias.numpy()
    layer.quantize("int8")
    assert layer.quantized_embeddings.dtype == "int8" and layer.embeddings_scale.shape == (11,)
    by_hand = rounded(table, axis=1)  # [vocab, d_model]
    np.testing.assert_allclose(layer(ids), by_hand[ids] * 2.0, rtol=1e-5, atol=1e-6)  # sqrt(4) = 2 (§3.4)
    np.testing.assert_allclose(layer(ids, zero_id=3)[1, 1:], 0.0)
    x = rng.normal(size=(2, 3, 4)).astype("float32")
    np.testing.assert_allclose(layer.project(x), x @ by_hand.T + bias, rtol=1e-5, atol=1e-5)
    projection, projection_bias = layer.output_projection()  # E^T [d_model, vocab], b [vocab]
    np.testing.assert_allclose(projection, by_hand.T, rtol=1e-6)
    np.testing.assert_allclose(projection_bias, bias, rtol=1e-6)
    other = SharedEmbedding(vocab_size=11, d_model=4)
    other.build()
    with pytest.raises(NotImplementedError, match="SharedEmbedding quantizes to int8 only, not int4"):
        other.quantize("int4")


@pytest.fixture(scope="module")
def models():
    model = Transformer(TransformerConfig.tiny(vocab_size=50, dropout=0.0, max_length=16))
    model.build()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        int8 = model.with_int8()
    return model, int8, [str(w.message) for w in caught if "copy keyword" not in str(w.message)]


def test_with_int8_quantizes_every_weight_matrix_and_nothing_else(models):
    """Every 2-D weight is int8, with a float scale per unit; the float model keeps its float32
    weights; Keras' `Model.quantize` warns of no layer (our `quantize` picks the layers with weights)."""
    model, int8, warned = models
    assert warned == []
    matrices = {v.path: v.dtype for v in int8.variables if len(v.shape) == 2}
    assert len(matrices) == len([v for v in model.variables if len(v.shape) == 2]) > 0
    assert set(matrices.values()) == {"int8"}, matrices
    assert {v.dtype for v in int8.variables if len(v.shape) < 2} == {"float32"}
    assert {v.dtype for v in model.variables} == {"float32"}
    assert int8.with_int8() is int8
    matrix_bytes = lambda m: sum(
        np.prod(v.shape) * np.dtype(v.dtype).itemsize for v in m.variables if len(v.shape) == 2
    )
    assert matrix_bytes(int8) * 4 == matrix_bytes(model)


def test_with_int8_keeps_the_logits_close_and_decodes(models):
    model, int8, _ = models
    rng = np.random.default_rng(2)
    source, target = rng.integers(4, 50, size=(3, 7)), rng.integers(4, 50, size=(3, 5))
    target[:, 0] = START_ID
    floats, got = np.asarray(model((source, target))), np.asarray(int8((source, target)))
    assert np.abs(got - floats).max() <= 0.02 * np.abs(floats).max()
    assert not np.array_equal(got, floats)
    context, cache = int8.start_decoding(source, hypotheses=1)
    logits, _ = int8.decode_step(np.full(3, START_ID), 0, cache, context)  # [B, vocab]
    np.testing.assert_allclose(logits, got[:, 0], rtol=1e-4, atol=1e-4)  # = the teacher-forced pass


def test_a_translator_decodes_with_int8_weights(models, tokenizer):
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, num_layers=1, max_length=16))
    model.build()
    translator = Translator(model, tokenizer, int8=True)
    assert translator.decoding == DecodingConfig(int8=True)
    assert {v.dtype for v in translator.model.variables if len(v.shape) == 2} == {"int8"}
    assert isinstance(translator.translate("Jesus wept."), str)


def test_the_int8_flag_reaches_the_decoding_settings_but_not_export():
    """`translate --int8` (and evaluate, score) decodes with int8 weights; export has no such flag:
    it writes the int8 SavedModel beside the float ones whatever the flags."""
    from keras_transformer.cli.flags import decoding
    from keras_transformer.cli.main import parser

    for command in ("translate", "evaluate", "score"):
        args = parser().parse_args([command, "--model-dir", "m", "--int8"])
        assert decoding(args).runtime.int8, command
    assert not decoding(parser().parse_args(["translate", "--model-dir", "m"])).runtime.int8
    with pytest.raises(SystemExit):
        parser().parse_args(["export", "--model-dir", "m", "--out", "o", "--int8"])
