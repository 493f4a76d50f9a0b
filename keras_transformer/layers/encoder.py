"""Encoder layer and encoder stack (Vaswani et al., 2017, §3.1).

Each sub-layer sits in a residual connection (`residual.py`): post-LN as in the paper, or pre-LN
with `config.norm_first` (a deviation; the stack then ends with a LayerNorm).
"""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.block import TransformerBlock
from keras_transformer.layers.masking import key_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(TransformerBlock):
    """Self-attention then a position-wise feed-forward network, each a residual sub-layer (§3.1).

    `EncoderLayer(config)`; call: `layer(x, padding_mask=None)` with x [B, S, d_model] and
    padding_mask [B, S], True at real tokens; returns [B, S, d_model] (and per-head weights
    [B, h, S, S] when `return_attention_scores=True`).
    """

    def build(self, input_shape):
        self.check_width(input_shape)
        policy = self.dtype_policy
        self.self_attention = MultiHeadAttention(self.config.num_heads, name="self_attention", dtype=policy)
        self.self_attention.build(input_shape)
        self.self_attention_residual = self.residual("self_attention_residual", input_shape)
        self.feed_forward = self.feed_forward_network(input_shape)
        self.feed_forward_residual = self.residual("feed_forward_residual", input_shape)

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        mask = None if padding_mask is None else key_mask(padding_mask)  # [B, 1, S]
        x, weights = self.self_attention_residual(
            x,
            sublayer=lambda y: self.self_attention(y, y, attention_mask=mask, return_attention_scores=True),
            training=training,
        )  # [B, S, d_model], [B, h, S, S]
        x = self.feed_forward_residual(x, sublayer=self.feed_forward, training=training)  # [B, S, d_model]
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(TransformerBlock):
    """A stack of N = `config.encoder_depth` identical encoder layers (§3.1) over embedded inputs
    [B, S, d_model] (pre-LN: a final LayerNorm on top)."""

    def build(self, input_shape):
        for i in range(self.config.encoder_depth):
            layer = EncoderLayer(self.config, name=f"layer_{i}", dtype=self.dtype_policy)
            layer.build(input_shape)
            setattr(self, f"layer_{i}", layer)  # an attribute, not a list: tf.train.Checkpoint follows attributes only
        self.final_layer_norm = self.closing_layer_norm(input_shape)

    @property
    def blocks(self) -> list:
        """The N encoder layers, bottom first."""
        return [getattr(self, f"layer_{i}") for i in range(self.config.encoder_depth)]

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        all_weights = []
        for layer in self.blocks:
            x, weights = layer(x, padding_mask=padding_mask, training=training, return_attention_scores=True)
            all_weights.append(weights)
        x = self.final_layer_norm(x) if self.final_layer_norm else x
        return (x, all_weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape
