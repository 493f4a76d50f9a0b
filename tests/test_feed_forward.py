import numpy as np
from layer_contract import run_layer_test

from keras_transformer.layers import PositionwiseFeedForward


def test_contract():
    x = np.random.default_rng(0).normal(size=(2, 3, 8)).astype("float32")
    run_layer_test(
        PositionwiseFeedForward, {"d_ff": 16}, (x,), expected_output_shape=(2, 3, 8), expected_trainable_weights=4
    )


def test_equation_2():
    x = np.random.default_rng(1).normal(size=(2, 3, 8)).astype("float32")
    layer = PositionwiseFeedForward(d_ff=16)
    output = np.asarray(layer(x))
    w1, b1, w2, b2 = layer.get_weights()
    np.testing.assert_allclose(output, np.maximum(0, x @ w1 + b1) @ w2 + b2, atol=1e-5)  # Eq. 2
    # Position-wise: each position alone.
    np.testing.assert_allclose(np.asarray(layer(x[:, 1:2]))[:, 0], output[:, 1], atol=1e-5)


def test_swish_contract_and_equation():
    """swish(x W_1 + b_1) W_2 + b_2, swish(z) = z sigmoid(z) (SiLU), in place of Eq. 2's ReLU."""
    x = np.random.default_rng(2).normal(size=(2, 3, 8)).astype("float32")
    layer = run_layer_test(
        PositionwiseFeedForward,
        {"d_ff": 16, "activation": "swish"},
        (x,),
        expected_output_shape=(2, 3, 8),
        expected_trainable_weights=4,
    )
    w1, b1, w2, b2 = layer.get_weights()
    z = x @ w1 + b1
    np.testing.assert_allclose(np.asarray(layer(x)), (z / (1 + np.exp(-z))) @ w2 + b2, atol=1e-5)
    assert not np.allclose(np.asarray(layer(x)), np.maximum(0, z) @ w2 + b2, atol=1e-3)
