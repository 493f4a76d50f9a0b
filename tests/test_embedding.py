import math

import numpy as np
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
