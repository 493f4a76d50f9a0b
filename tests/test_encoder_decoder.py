import numpy as np
import pytest

from keras_transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer
from layer_contract import run_layer_test

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 5, 16)).astype("float32")
MEMORY = RNG.normal(size=(2, 6, 16)).astype("float32")
LAYER = {"num_heads": 4, "d_ff": 32, "dropout": 0.1, "layer_norm_epsilon": 1e-6}


def test_encoder_layer_contract():
    # self-attention (6) + feed-forward (4) + two layer norms (4)
    run_layer_test(EncoderLayer, LAYER, (X,), expected_output_shape=X.shape, expected_trainable_weights=14)


def test_decoder_layer_contract():
    run_layer_test(
        DecoderLayer, {**LAYER, "cross_attention": True}, (X, MEMORY), expected_output_shape=X.shape, expected_trainable_weights=22
    )


def test_decoder_layer_without_cross_attention_contract():
    run_layer_test(
        DecoderLayer, {**LAYER, "cross_attention": False}, (X,), expected_output_shape=X.shape, expected_trainable_weights=14
    )


def test_stacks_contract():
    run_layer_test(Encoder, {"num_layers": 2, **LAYER}, (X,), expected_output_shape=X.shape, expected_trainable_weights=28)
    run_layer_test(
        Decoder, {"num_layers": 2, **LAYER, "cross_attention": True}, (X, MEMORY), expected_output_shape=X.shape, expected_trainable_weights=44
    )


def test_cross_attention_structure_is_explicit():
    with pytest.raises(ValueError, match="needs `memory`"):
        DecoderLayer(num_heads=4, d_ff=8, cross_attention=True)(X)
    with pytest.raises(ValueError, match="takes no `memory`"):
        DecoderLayer(num_heads=4, d_ff=8, cross_attention=False)(X, MEMORY)


def test_decoder_self_attention_is_causal():
    layer = DecoderLayer(num_heads=4, d_ff=32, dropout=0.0)
    out = np.asarray(layer(X, MEMORY))
    changed = X.copy()
    changed[:, 3:] = RNG.normal(size=changed[:, 3:].shape)
    np.testing.assert_allclose(np.asarray(layer(changed, MEMORY))[:, :3], out[:, :3], atol=1e-5)


def test_encoder_padding_mask_hides_padded_positions():
    layer = EncoderLayer(num_heads=4, d_ff=32, dropout=0.0)
    mask = np.array([[True] * 5, [True, True, True, False, False]])
    out = np.asarray(layer(X, padding_mask=mask))
    changed = X.copy()
    changed[1, 3:] = 100.0
    np.testing.assert_allclose(np.asarray(layer(changed, padding_mask=mask))[1, :3], out[1, :3], atol=1e-5)


def test_dropout_only_in_training():
    layer = EncoderLayer(num_heads=4, d_ff=32, dropout=0.5)
    np.testing.assert_allclose(layer(X, training=False), layer(X, training=False))
    assert not np.allclose(layer(X, training=True), layer(X, training=False))


def test_sublayer_connection_is_post_ln_by_default_and_pre_ln_with_norm_first():
    from keras_transformer.layers.encoder import SublayerConnection

    def layer_norm(v):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-6)

    sublayer = lambda v: 2.0 * v + 1.0  # noqa: E731
    post, pre = SublayerConnection(dropout=0.0), SublayerConnection(dropout=0.0, norm_first=True)
    post.build(X.shape)
    pre.build(X.shape)
    np.testing.assert_allclose(post(X, sublayer(np.asarray(post.sublayer_input(X)))), layer_norm(X + sublayer(X)), atol=1e-5)
    np.testing.assert_allclose(pre(X, sublayer(np.asarray(pre.sublayer_input(X)))), X + sublayer(layer_norm(X)), atol=1e-5)


def test_pre_ln_stacks_end_with_a_layer_norm():
    encoder = Encoder(num_layers=2, **LAYER, norm_first=True)
    out = np.asarray(encoder(X))
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(-1), 1.0, atol=1e-3)
    assert len(encoder.trainable_weights) == 28 + 2  # the post-LN stack's weights and the final gamma, beta
    decoder = Decoder(num_layers=2, **LAYER, norm_first=True)
    decoder(X, MEMORY)
    assert len(decoder.trainable_weights) == 44 + 2
