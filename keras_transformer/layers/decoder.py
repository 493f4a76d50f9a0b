"""Decoder layer and decoder stack (Vaswani et al., 2017, §3.1), with incremental decoding.

The decoder's self-attention is masked so that position i attends only to positions <= i
(§3.2.3). `decode_step` runs one position at a time against a fixed-size key/value cache:
the new key and value are written at `position` and the future is masked, so every step has
the same static shapes (what `tf.function`, XLA and TFLite want).
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.encoder import SublayerConnection, final_layer_norm
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.masking import causal_mask, key_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(keras.layers.Layer):
    """Masked self-attention, then (if `cross_attention`) attention over the encoder output,
    then a position-wise feed-forward network; each a residual sub-layer (§3.1).

    Call: `layer(x, memory, padding_mask=None, memory_padding_mask=None)` with x [B, T, d_model],
    memory [B, S, d_model] (the encoder output; required iff `cross_attention`), and boolean
    padding masks [B, T] and [B, S]. Returns [B, T, d_model], and with
    `return_attention_scores=True` also a dict of per-head weights: "self" [B, h, T, T] and
    "cross" [B, h, T, S].
    """

    def __init__(
        self,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-6,
        cross_attention: bool = True,
        norm_first: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.cross_attention = cross_attention
        self.norm_first = norm_first

    def build(self, x_shape, memory_shape=None):
        policy = self.dtype_policy

        def residual(name):
            return SublayerConnection(self.dropout, self.layer_norm_epsilon, self.norm_first, name=name, dtype=policy)

        self.self_attention = MultiHeadAttention(self.num_heads, name="self_attention", dtype=policy)
        self.self_attention_residual = residual("self_attention_residual")
        self.self_attention.build(x_shape)
        self.self_attention_residual.build(x_shape)
        if self.cross_attention:
            self.cross_attention_layer = MultiHeadAttention(self.num_heads, name="cross_attention", dtype=policy)
            self.cross_attention_residual = residual("cross_attention_residual")
            self.cross_attention_layer.build(x_shape, x_shape if memory_shape is None else memory_shape)
            self.cross_attention_residual.build(x_shape)
        self.feed_forward = PositionwiseFeedForward(self.d_ff, name="feed_forward", dtype=policy)
        self.feed_forward_residual = residual("feed_forward_residual")
        self.feed_forward.build(x_shape)
        self.feed_forward_residual.build(x_shape)

    def _check_memory(self, memory):
        if self.cross_attention and memory is None:
            raise ValueError("DecoderLayer(cross_attention=True) needs `memory`, the encoder output")
        if not self.cross_attention and memory is not None:
            raise ValueError("DecoderLayer(cross_attention=False) takes no `memory`")

    def _cross_and_feed_forward(self, x, attend_memory, training):
        """The sub-layers after self-attention; `attend_memory(query)` returns (output, weights)."""
        cross_weights = None
        if self.cross_attention:
            attention, cross_weights = attend_memory(self.cross_attention_residual.sublayer_input(x))
            x = self.cross_attention_residual(x, attention, training=training)  # [B, T, d_model]
        y = self.feed_forward_residual.sublayer_input(x)
        x = self.feed_forward_residual(x, self.feed_forward(y), training=training)  # [B, T, d_model]
        return x, cross_weights

    def call(
        self,
        x,
        memory=None,
        padding_mask=None,
        memory_padding_mask=None,
        training=None,
        return_attention_scores=False,
    ):
        self._check_memory(memory)
        mask = causal_mask(ops.shape(x)[1])  # [1, T, T]
        if padding_mask is not None:
            mask = ops.logical_and(mask, key_mask(padding_mask))  # [B, T, T]
        y = self.self_attention_residual.sublayer_input(x)
        attention, self_weights = self.self_attention(y, y, attention_mask=mask, return_attention_scores=True)
        x = self.self_attention_residual(x, attention, training=training)  # [B, T, d_model]
        memory_mask = None if memory_padding_mask is None else key_mask(memory_padding_mask)  # [B, 1, S]
        x, cross_weights = self._cross_and_feed_forward(
            x,
            lambda y: self.cross_attention_layer(y, memory, attention_mask=memory_mask, return_attention_scores=True),
            training,
        )
        if return_attention_scores:
            return x, {"self": self_weights, "cross": cross_weights}
        return x

    def init_cache(self, memory, max_length: int):
        """An empty self-attention cache of `max_length` positions, and the encoder output's keys and
        values projected once. Every entry has the batch on axis 0 (beam search reorders it)."""
        batch = ops.shape(memory)[0] if memory is not None else None
        shape = (batch, max_length, self.num_heads, self.self_attention.d_k)
        cache = {"key": ops.zeros(shape, self.compute_dtype), "value": ops.zeros(shape, self.compute_dtype)}
        if self.cross_attention:
            cache["memory_key"], cache["memory_value"] = self.cross_attention_layer.project_key_value(memory)
        return cache

    def decode_step(self, x, cache, position, memory_padding_mask=None):
        """One decoder position: x [B, 1, d_model] at `position` (a scalar) -> ([B, 1, d_model], cache).

        Equals `call` on the whole prefix, at the last position, in inference mode.
        """
        max_length = ops.shape(cache["key"])[1]
        y = self.self_attention_residual.sublayer_input(x)
        key_t, value_t = self.self_attention.project_key_value(y)  # [B, 1, h, d_k]
        write = ops.reshape(ops.one_hot(position, max_length, dtype=key_t.dtype), (1, max_length, 1, 1))
        key = cache["key"] + write * key_t  # [B, L, h, d_k], position `position` filled
        value = cache["value"] + write * value_t
        visible = ops.reshape(ops.less_equal(ops.arange(max_length), position), (1, 1, max_length))  # [1, 1, L]
        attention = self.self_attention.attend(y, key, value, attention_mask=visible)
        x = self.self_attention_residual(x, attention, training=False)  # [B, 1, d_model]
        memory_mask = None if memory_padding_mask is None else key_mask(memory_padding_mask)  # [B, 1, S]
        x, _ = self._cross_and_feed_forward(
            x,
            lambda y: (
                self.cross_attention_layer.attend(y, cache["memory_key"], cache["memory_value"], attention_mask=memory_mask),
                None,
            ),
            training=False,
        )
        return x, {**cache, "key": key, "value": value}

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "cross_attention": self.cross_attention,
            "norm_first": self.norm_first,
        }


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(keras.layers.Layer):
    """A stack of N identical decoder layers (§3.1) over embedded inputs [B, T, d_model]
    (with `norm_first`, a final LayerNorm on top)."""

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        d_ff: int,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-6,
        cross_attention: bool = True,
        norm_first: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_layers = num_layers
        self.num_heads = num_heads
        self.d_ff = d_ff
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.cross_attention = cross_attention
        self.norm_first = norm_first

    def build(self, x_shape, memory_shape=None):
        for i in range(self.num_layers):
            layer = DecoderLayer(
                self.num_heads,
                self.d_ff,
                self.dropout,
                self.layer_norm_epsilon,
                cross_attention=self.cross_attention,
                norm_first=self.norm_first,
                name=f"layer_{i}",
                dtype=self.dtype_policy,
            )
            layer.build(x_shape, memory_shape)
            setattr(self, f"layer_{i}", layer)  # an attribute, not a list: tf.train.Checkpoint follows attributes only
        self.final_layer_norm = final_layer_norm(self, x_shape)

    @property
    def blocks(self) -> list:
        """The N decoder layers, bottom first."""
        return [getattr(self, f"layer_{i}") for i in range(self.num_layers)]

    def call(self, x, memory=None, padding_mask=None, memory_padding_mask=None, training=None, return_attention_scores=False):
        all_weights = []
        for layer in self.blocks:
            x, weights = layer(
                x,
                memory,
                padding_mask=padding_mask,
                memory_padding_mask=memory_padding_mask,
                training=training,
                return_attention_scores=True,
            )
            all_weights.append(weights)
        x = self.final_layer_norm(x) if self.final_layer_norm else x
        return (x, all_weights) if return_attention_scores else x

    def init_cache(self, memory, max_length: int):
        """One cache per layer (see `DecoderLayer.init_cache`)."""
        return [layer.init_cache(memory, max_length) for layer in self.blocks]

    def decode_step(self, x, cache, position, memory_padding_mask=None):
        """x [B, 1, d_model] at `position` -> ([B, 1, d_model], updated cache)."""
        new_cache = []
        for layer, layer_cache in zip(self.blocks, cache):
            x, layer_cache = layer.decode_step(x, layer_cache, position, memory_padding_mask)
            new_cache.append(layer_cache)
        x = self.final_layer_norm(x) if self.final_layer_norm else x
        return x, new_cache

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        return {
            **super().get_config(),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "d_ff": self.d_ff,
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "cross_attention": self.cross_attention,
            "norm_first": self.norm_first,
        }
