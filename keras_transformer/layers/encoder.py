"""Encoder layer and encoder stack (Vaswani et al., 2017, §3.1).

Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))): residual connection
(He et al., 2016), layer normalisation (Ba et al., 2016) after it ("post-LN"), and dropout on
the sub-layer output (§5.4).

Deviation, off by default (`norm_first=True`): "pre-LN", x + Dropout(Sublayer(LayerNorm(x))),
with one more LayerNorm at the top of each stack (Xiong et al., 2020). It trains without the
long early plateau that post-LN shows at the learning rates a short CPU budget needs.
"""

from __future__ import annotations

import keras

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.masking import key_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class SublayerConnection(keras.layers.Layer):
    """LayerNorm(x + Dropout(Sublayer(x))) (§3.1, §5.4), or with `norm_first`
    x + Dropout(Sublayer(LayerNorm(x))).

    The sub-layer runs outside: `y = residual.sublayer_input(x)`, then `residual(x, sublayer(y))`.
    """

    def __init__(self, dropout: float = 0.1, layer_norm_epsilon: float = 1e-6, norm_first: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm_first = norm_first
        self.dropout_layer = keras.layers.Dropout(dropout, dtype=self.dtype_policy)
        self.layer_norm = keras.layers.LayerNormalization(epsilon=layer_norm_epsilon, dtype=self.dtype_policy)

    def build(self, input_shape):
        self.layer_norm.build(input_shape)

    def sublayer_input(self, x):
        """What the sub-layer reads: x, or LayerNorm(x) with `norm_first`."""
        return self.layer_norm(x) if self.norm_first else x

    def call(self, x, sublayer_output, training=None):
        x = x + self.dropout_layer(sublayer_output, training=training)
        return x if self.norm_first else self.layer_norm(x)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "norm_first": self.norm_first,
        }


def final_layer_norm(stack: keras.layers.Layer, input_shape):
    """The LayerNorm that ends a pre-LN stack (its layers' outputs are not normalised), or None."""
    if not stack.norm_first:
        return None
    norm = keras.layers.LayerNormalization(epsilon=stack.layer_norm_epsilon, name="final_layer_norm", dtype=stack.dtype_policy)
    norm.build(input_shape)
    return norm


@keras.saving.register_keras_serializable(package="keras_transformer")
class EncoderLayer(keras.layers.Layer):
    """Self-attention then a position-wise feed-forward network, each a residual sub-layer (§3.1).

    Call: `layer(x, padding_mask=None)` with x [B, S, d_model] and padding_mask [B, S], True at
    real tokens; returns [B, S, d_model] (and per-head weights [B, h, S, S] when
    `return_attention_scores=True`).
    """

    def __init__(
        self, num_heads: int, d_ff: int, dropout: float = 0.1, layer_norm_epsilon: float = 1e-6, norm_first: bool = False, **kwargs
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm_first = norm_first

    def build(self, input_shape):
        policy = self.dtype_policy

        def residual(name):
            return SublayerConnection(self.dropout, self.layer_norm_epsilon, self.norm_first, name=name, dtype=policy)

        self.self_attention = MultiHeadAttention(self.num_heads, name="self_attention", dtype=policy)
        self.self_attention_residual = residual("self_attention_residual")
        self.feed_forward = PositionwiseFeedForward(self.d_ff, name="feed_forward", dtype=policy)
        self.feed_forward_residual = residual("feed_forward_residual")
        for layer in (self.self_attention, self.self_attention_residual, self.feed_forward, self.feed_forward_residual):
            layer.build(input_shape)

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        mask = None if padding_mask is None else key_mask(padding_mask)  # [B, 1, S]
        y = self.self_attention_residual.sublayer_input(x)
        attention, weights = self.self_attention(y, y, attention_mask=mask, return_attention_scores=True)
        x = self.self_attention_residual(x, attention, training=training)  # [B, S, d_model]
        y = self.feed_forward_residual.sublayer_input(x)
        x = self.feed_forward_residual(x, self.feed_forward(y), training=training)  # [B, S, d_model]
        return (x, weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "norm_first": self.norm_first,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class Encoder(keras.layers.Layer):
    """A stack of N identical encoder layers (§3.1) over embedded inputs [B, S, d_model]
    (with `norm_first`, a final LayerNorm on top)."""

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-6,
        norm_first: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.norm_first = norm_first

    def build(self, input_shape):
        for i in range(self.num_layers):
            layer = EncoderLayer(
                self.num_heads, self.d_ff, self.dropout, self.layer_norm_epsilon, self.norm_first, name=f"layer_{i}", dtype=self.dtype_policy
            )
            layer.build(input_shape)
            setattr(self, f"layer_{i}", layer)  # an attribute, not a list: tf.train.Checkpoint follows attributes only
        self.final_layer_norm = final_layer_norm(self, input_shape)

    @property
    def blocks(self) -> list:
        """The N encoder layers, bottom first."""
        return [getattr(self, f"layer_{i}") for i in range(self.num_layers)]

    def call(self, x, padding_mask=None, training=None, return_attention_scores=False):
        all_weights = []
        for layer in self.blocks:
            x, weights = layer(x, padding_mask=padding_mask, training=training, return_attention_scores=True)
            all_weights.append(weights)
        x = self.final_layer_norm(x) if self.final_layer_norm else x
        return (x, all_weights) if return_attention_scores else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "norm_first": self.norm_first,
        }
