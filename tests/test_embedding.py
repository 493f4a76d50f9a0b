import math

import numpy as np
import pytest
from layer_contract import run_layer_test

from keras_transformer.layers import PositionalEncoding, SharedEmbedding, sinusoid_table


def test_positional_encoding_matches_section_3_5():
    max_length, d_model = 12, 6
    expected = np.zeros((max_length, d_model))
    for pos in range(max_length):
        for i in range(d_model // 2):
            angle = pos / 10000 ** (2 * i / d_model)
            expected[pos, 2 * i] = math.sin(angle)  # PE(pos, 2i)
            expected[pos, 2 * i + 1] = math.cos(angle)  # PE(pos, 2i+1)
    np.testing.assert_allclose(sinusoid_table(max_length, d_model), expected, atol=1e-6)


def test_positional_encoding_layer_adds_the_table_and_one_position():
    layer = PositionalEncoding(max_length=10)
    x = np.zeros((2, 4, 8), "float32")
    np.testing.assert_allclose(layer(x)[1], sinusoid_table(10, 8)[:4], atol=1e-6)
    np.testing.assert_allclose(layer(x[:, :1], position=7)[0, 0], sinusoid_table(10, 8)[7], atol=1e-6)
    run_layer_test(
        PositionalEncoding, {"max_length": 10}, (x,), expected_output_shape=(2, 4, 8), expected_trainable_weights=0
    )


def test_shared_embedding_scales_by_sqrt_d_model_and_ties_the_output_projection():
    layer = SharedEmbedding(vocab_size=11, d_model=4)
    ids = np.array([[1, 5, 0]])
    embedded = np.asarray(layer(ids))
    table = layer.embeddings.numpy()
    np.testing.assert_allclose(embedded[0], table[[1, 5, 0]] * 2.0, atol=1e-6)  # sqrt(4) = 2 (§3.4)
    x = np.random.default_rng(0).normal(size=(1, 2, 4)).astype("float32")
    np.testing.assert_allclose(layer.project(x), x @ table.T, atol=1e-5)
    assert len(layer.trainable_weights) == 1


def test_shared_embedding_contract():
    run_layer_test(
        SharedEmbedding,
        {"vocab_size": 9, "d_model": 4},
        (np.array([[1, 2, 3], [4, 5, 0]], "float32"),),
        expected_output_shape=(2, 3, 4),
        expected_trainable_weights=1,
    )


def sines_then_cosines(max_length, d_model, frequency):
    """[L, d_model] by hand: sin(pos * frequency(i)) at dimension i and cos(pos * frequency(i)) at
    d_model/2 + i, for i < d_model/2."""
    table = np.zeros((max_length, d_model))
    for pos in range(max_length):
        for i in range(d_model // 2):
            table[pos, i] = math.sin(pos * frequency(i))
            table[pos, d_model // 2 + i] = math.cos(pos * frequency(i))
    return table


def test_the_halves_layout_is_hugging_faces_marian_table():
    """Hugging Face's `MarianSinusoidalPositionalEmbedding` (and CTranslate2's Marian converter):
    the paper's frequencies 1 / 10000^(2i/d_model), sines first, then cosines."""
    want = sines_then_cosines(12, 8, lambda i: 1 / 10000 ** (2 * i / 8))
    np.testing.assert_allclose(sinusoid_table(12, 8, "halves"), want, atol=1e-6)


def test_the_tensor2tensor_layout_is_marians_table():
    """Marian's `sinusoidalPositionEmbeddings` (tensor2tensor's `get_timing_signal_1d`): frequencies
    exp(-i log(10000) / (d_model/2 - 1)), so the last is exactly 1/10000; sines first, then cosines."""
    increment = math.log(10000) / (8 / 2 - 1)
    want = sines_then_cosines(12, 8, lambda i: math.exp(-i * increment))
    table = sinusoid_table(12, 8, "tensor2tensor")
    np.testing.assert_allclose(table, want, atol=1e-6)
    np.testing.assert_allclose(table[1, 3], math.sin(1e-4), rtol=1e-6)  # the lowest frequency is 1/10000
    assert not np.allclose(table, sinusoid_table(12, 8, "halves"), atol=1e-3)


def test_an_unknown_layout_is_refused():
    with pytest.raises(
        ValueError, match=r"^unknown sinusoid layout 'spiral'; choose interleaved, halves or tensor2tensor$"
    ):
        sinusoid_table(4, 8, "spiral")


@pytest.mark.parametrize("layout", ["halves", "tensor2tensor"])
def test_positional_encoding_contract_in_another_layout(layout):
    layer = PositionalEncoding(max_length=10, layout=layout)
    x = np.zeros((2, 4, 8), "float32")
    np.testing.assert_allclose(layer(x)[1], sinusoid_table(10, 8, layout)[:4], atol=1e-6)
    np.testing.assert_allclose(layer(x[:, :1], position=7)[0, 0], sinusoid_table(10, 8, layout)[7], atol=1e-6)
    run_layer_test(
        PositionalEncoding,
        {"max_length": 10, "layout": layout},
        (x,),
        expected_output_shape=(2, 4, 8),
        expected_trainable_weights=0,
    )


def test_shared_embedding_with_an_output_bias_adds_it_to_the_logits():
    layer = SharedEmbedding(vocab_size=11, d_model=4, output_bias=True)
    layer.build()
    bias = np.random.default_rng(1).normal(size=11).astype("float32")
    layer.logit_bias.assign(bias)
    x = np.random.default_rng(0).normal(size=(1, 2, 4)).astype("float32")
    np.testing.assert_allclose(layer.project(x), x @ layer.embeddings.numpy().T + bias, atol=1e-5)
    np.testing.assert_allclose(layer.project(x, layer.output_projection()), layer.project(x), atol=1e-6)
    assert [w.path.split("/")[-1] for w in layer.trainable_weights] == ["embeddings", "output_bias"]
    assert SharedEmbedding(vocab_size=11, d_model=4).get_config()["output_bias"] is False


def test_shared_embedding_embeds_the_zero_id_to_zeros():
    layer = SharedEmbedding(vocab_size=11, d_model=4)
    ids = np.array([[1, 5, 1], [0, 1, 7]])
    zeroed, plain = np.asarray(layer(ids, zero_id=1)), np.asarray(layer(ids))
    is_one = ids == 1
    assert np.all(zeroed[is_one] == 0.0) and np.all(plain[is_one] != 0.0)
    np.testing.assert_array_equal(zeroed[~is_one], plain[~is_one])


def test_shared_embedding_contract_with_the_output_bias_and_a_zero_id():
    run_layer_test(
        SharedEmbedding,
        {"vocab_size": 9, "d_model": 4, "output_bias": True},
        (np.array([[1, 2, 3], [4, 1, 0]], "float32"),),
        call_kwargs={"zero_id": 1},
        expected_output_shape=(2, 3, 4),
        expected_trainable_weights=2,
    )
