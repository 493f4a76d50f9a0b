import dataclasses

import numpy as np
import pytest
from layer_contract import run_layer_test

from keras_transformer import TransformerConfig
from keras_transformer.layers import Decoder, DecoderLayer, Encoder, EncoderLayer, SublayerConnection

RNG = np.random.default_rng(0)
X = RNG.normal(size=(2, 5, 16)).astype("float32")
MEMORY = RNG.normal(size=(2, 6, 16)).astype("float32")
CONFIG = TransformerConfig(num_layers=2, d_model=16, num_heads=4, d_ff=32, dropout=0.1)
LAYER = {"config": CONFIG.to_dict()}


def configured(**overrides):
    return dataclasses.replace(CONFIG, **overrides)


def test_encoder_layer_contract():
    # self-attention (6) + feed-forward (4) + two layer norms (4)
    run_layer_test(EncoderLayer, LAYER, (X,), expected_output_shape=X.shape, expected_trainable_weights=14)


def test_decoder_layer_contract():
    run_layer_test(
        DecoderLayer,
        {**LAYER, "cross_attention": True},
        (X, MEMORY),
        expected_output_shape=X.shape,
        expected_trainable_weights=22,
    )


def test_decoder_layer_without_cross_attention_contract():
    run_layer_test(
        DecoderLayer,
        {**LAYER, "cross_attention": False},
        (X,),
        expected_output_shape=X.shape,
        expected_trainable_weights=14,
    )


def test_stacks_contract():
    run_layer_test(Encoder, LAYER, (X,), expected_output_shape=X.shape, expected_trainable_weights=28)
    run_layer_test(
        Decoder,
        {**LAYER, "cross_attention": True},
        (X, MEMORY),
        expected_output_shape=X.shape,
        expected_trainable_weights=44,
    )


def test_stacks_of_their_own_depths_contract():
    """The encoder and decoder take their depths apart (3 and 1), and every option of the layers."""
    options = configured(num_encoder_layers=3, num_decoder_layers=1, ffn_activation="swish")
    encoder = run_layer_test(
        Encoder, {"config": options.to_dict()}, (X,), expected_output_shape=X.shape, expected_trainable_weights=42
    )
    decoder = run_layer_test(
        Decoder,
        {"config": options.to_dict(), "cross_attention": True},
        (X, MEMORY),
        expected_output_shape=X.shape,
        expected_trainable_weights=22,
    )
    assert (len(encoder.blocks), len(decoder.blocks), len(decoder.init_cache(2, 0))) == (3, 1, 1)
    assert {block.feed_forward.activation for block in encoder.blocks + decoder.blocks} == {"swish"}


def test_layers_take_their_settings_from_the_config_and_check_the_width():
    layer = EncoderLayer(configured(d_ff=24, num_heads=2, layer_norm_epsilon=1e-3, norm_first=True))
    layer(X)
    assert layer.self_attention.num_heads == 2 and layer.feed_forward.inner.units == 24
    assert layer.feed_forward_residual.layer_norm.epsilon == 1e-3 and layer.feed_forward_residual.norm_first
    assert len(Decoder(configured(num_layers=3)).get_config()["config"]) == len(CONFIG.to_dict())
    with pytest.raises(ValueError, match=r"^EncoderLayer: input width 16 != config.d_model 32$"):
        EncoderLayer(configured(d_model=32))(X)


def test_cross_attention_structure_is_explicit():
    with pytest.raises(ValueError, match="needs `memory`"):
        DecoderLayer(CONFIG, cross_attention=True)(X)
    with pytest.raises(ValueError, match="takes no `memory`"):
        DecoderLayer(CONFIG, cross_attention=False)(X, MEMORY)


def test_decoder_self_attention_is_causal():
    layer = DecoderLayer(configured(dropout=0.0))
    out = np.asarray(layer(X, MEMORY))
    changed = X.copy()
    changed[:, 3:] = RNG.normal(size=changed[:, 3:].shape)
    np.testing.assert_allclose(np.asarray(layer(changed, MEMORY))[:, :3], out[:, :3], atol=1e-5)


def test_encoder_padding_mask_hides_padded_positions():
    layer = EncoderLayer(configured(dropout=0.0))
    mask = np.array([[True] * 5, [True, True, True, False, False]])
    out = np.asarray(layer(X, padding_mask=mask))
    changed = X.copy()
    changed[1, 3:] = 100.0
    np.testing.assert_allclose(np.asarray(layer(changed, padding_mask=mask))[1, :3], out[1, :3], atol=1e-5)


def test_dropout_only_in_training():
    layer = EncoderLayer(configured(dropout=0.5))
    np.testing.assert_allclose(layer(X, training=False), layer(X, training=False))
    assert not np.allclose(layer(X, training=True), layer(X, training=False))


def test_sublayer_connection_is_post_ln_by_default_and_pre_ln_with_norm_first():
    def layer_norm(v):
        return (v - v.mean(-1, keepdims=True)) / np.sqrt(v.var(-1, keepdims=True) + 1e-6)

    sublayer = lambda v: 2.0 * v + 1.0  # noqa: E731
    post, pre = SublayerConnection(dropout=0.0), SublayerConnection(dropout=0.0, norm_first=True)
    post.build(X.shape)
    pre.build(X.shape)
    np.testing.assert_allclose(post(X, sublayer=sublayer), layer_norm(X + sublayer(X)), atol=1e-5)
    np.testing.assert_allclose(pre(X, sublayer=sublayer), X + sublayer(layer_norm(X)), atol=1e-5)


def test_sublayer_connection_passes_a_sublayers_extra_outputs_through():
    connection = SublayerConnection(dropout=0.0)
    x, extra = connection(X, sublayer=lambda v: (2.0 * v, {"cache": 7}))
    np.testing.assert_array_equal(x, connection(X, sublayer=lambda v: 2.0 * v))
    assert extra == {"cache": 7}


def test_pre_ln_stacks_end_with_a_layer_norm():
    encoder = Encoder(configured(norm_first=True))
    out = np.asarray(encoder(X))
    np.testing.assert_allclose(out.mean(-1), 0.0, atol=1e-5)
    np.testing.assert_allclose(out.std(-1), 1.0, atol=1e-3)
    assert len(encoder.trainable_weights) == 28 + 2  # the post-LN stack's weights and the final gamma, beta
    decoder = Decoder(configured(norm_first=True))
    decoder(X, MEMORY)
    assert len(decoder.trainable_weights) == 44 + 2
