"""Decoder layer and decoder stack (Vaswani et al., 2017, §3.1), with incremental decoding.

The decoder's self-attention is masked so that position i attends only to positions <= i
(§3.2.3). The same `call` runs training and decoding: given a `cache`, it runs one position
against a fixed-size key/value cache (the new key and value are written at `position`, the
future is masked), so every decoding step has the same static shapes (what `tf.function`, XLA
and TFLite want). Decoding also takes the encoder output's keys and values projected once
(`project_memory`) instead of the encoder output.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.block import TransformerBlock
from keras_transformer.layers.masking import causal_mask, key_mask


@keras.saving.register_keras_serializable(package="keras_transformer")
class DecoderLayer(TransformerBlock):
    """Masked self-attention, then (if `cross_attention`) attention over the encoder output,
    then a position-wise feed-forward network; each a residual sub-layer (§3.1).

    `DecoderLayer(config, cross_attention=True)`; call:
    `layer(x, memory, padding_mask=None, memory_padding_mask=None)` with x [B, T, d_model], memory
    [B, S, d_model] (the encoder output; required iff `cross_attention`), and boolean padding
    masks [B, T] and [B, S]. Returns [B, T, d_model], and with `return_attention_scores=True` also
    a dict of per-head weights: "self" [B, h, T, T] and "cross" [B, h, T, S].

    Incremental decoding: `layer(x, memory, memory_padding_mask=..., cache=cache, position=i)`
    with x [B', 1, d_model] at position i, `cache` from `init_cache` (`position` None for a
    growing cache) and `memory` from `project_memory` -> ([B', 1, d_model], updated cache). B' may
    be a multiple of the memory's batch B: each memory row serves B' / B consecutive rows (the
    beams of one sentence).
    """

    def __init__(self, config, cross_attention: bool = True, **kwargs):
        super().__init__(config, **kwargs)
        self.cross_attention = cross_attention

    def build(self, x_shape, memory_shape=None):
        self.check_width(x_shape)
        policy, heads = self.dtype_policy, self.config.num_heads
        self.self_attention = MultiHeadAttention(heads, name="self_attention", dtype=policy)
        self.self_attention.build(x_shape)
        self.self_attention_residual = self.residual("self_attention_residual", x_shape)
        if self.cross_attention:
            self.cross_attention_layer = MultiHeadAttention(heads, name="cross_attention", dtype=policy)
            self.cross_attention_layer.build(x_shape, x_shape if memory_shape is None else memory_shape)
            self.cross_attention_residual = self.residual("cross_attention_residual", x_shape)
        self.feed_forward = self.feed_forward_network(x_shape)
        self.feed_forward_residual = self.residual("feed_forward_residual", x_shape)

    def call(
        self,
        x,
        memory=None,
        padding_mask=None,
        memory_padding_mask=None,
        cache=None,
        position=None,
        training=None,
        return_attention_scores=False,
    ):
        if self.cross_attention and memory is None:
            raise ValueError("DecoderLayer(cross_attention=True) needs `memory`, the encoder output")
        if not self.cross_attention and memory is not None:
            raise ValueError("DecoderLayer(cross_attention=False) takes no `memory`")
        weights = {"cross": None}
        if cache is None:
            mask = causal_mask(ops.shape(x)[1])  # [1, T, T]
            if padding_mask is not None:
                mask = ops.logical_and(mask, key_mask(padding_mask))  # [B, T, T]
            x, weights["self"] = self.self_attention_residual(
                x,
                sublayer=lambda y: self.self_attention(y, y, attention_mask=mask, return_attention_scores=True),
                training=training,
            )  # [B, T, d_model], [B, h, T, T]
        else:
            x, cache = self.self_attention_residual(
                x, sublayer=lambda y: self.self_attention(y, y, cache=cache, position=position), training=False
            )  # [B', 1, d_model]
        if self.cross_attention:
            memory_mask = None if memory_padding_mask is None else key_mask(memory_padding_mask)  # [B, 1, S]
            x, weights["cross"] = self.cross_attention_residual(
                x,
                sublayer=lambda y: self.cross_attention_layer(
                    y, memory, attention_mask=memory_mask, return_attention_scores=True
                ),
                training=training,
            )  # [B, T, d_model], [B, h, T, S]
        x = self.feed_forward_residual(x, sublayer=self.feed_forward, training=training)  # [B, T, d_model]
        if cache is not None:
            return x, cache
        return (x, weights) if return_attention_scores else x

    def init_cache(self, batch_size, length):
        """An empty self-attention cache for `batch_size` rows (`MultiHeadAttention.init_cache`)."""
        return self.self_attention.init_cache(batch_size, length)

    def project_memory(self, memory):
        """The encoder output's keys and values for cross-attention, projected once per source:
        a pair [B, h, S, d_k] (None without cross-attention)."""
        return self.cross_attention_layer.project_key_value(memory) if self.cross_attention else None

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        return {**super().get_config(), "cross_attention": self.cross_attention}


@keras.saving.register_keras_serializable(package="keras_transformer")
class Decoder(TransformerBlock):
    """A stack of N = `config.decoder_depth` identical decoder layers (§3.1) over embedded inputs
    [B, T, d_model] (pre-LN: a final LayerNorm on top). Calls as `DecoderLayer`, where an
    incremental step takes one cache per layer (`init_cache`) and one projected memory per layer
    (`project_memory`)."""

    def __init__(self, config, cross_attention: bool = True, **kwargs):
        super().__init__(config, **kwargs)
        self.cross_attention = cross_attention

    def build(self, x_shape, memory_shape=None):
        for i in range(self.config.decoder_depth):
            layer = DecoderLayer(self.config, self.cross_attention, name=f"layer_{i}", dtype=self.dtype_policy)
            layer.build(x_shape, memory_shape)
            setattr(self, f"layer_{i}", layer)  # an attribute, not a list: tf.train.Checkpoint follows attributes only
        self.final_layer_norm = self.closing_layer_norm(x_shape)

    @property
    def blocks(self) -> list:
        """The N decoder layers, bottom first."""
        return [getattr(self, f"layer_{i}") for i in range(self.config.decoder_depth)]

    def call(self, x, memory=None, cache=None, position=None, training=None, return_attention_scores=False, **masks):
        """As `DecoderLayer.call`, layer after layer; `masks` (`padding_mask`, `memory_padding_mask`)
        go to every layer, as does `memory` unless it is a list of one projected memory per layer."""
        layers = self.blocks
        memories = memory if isinstance(memory, list) else [memory] * len(layers)
        caches = [None] * len(layers) if cache is None else cache
        all_weights, new_cache = [], []
        for layer, layer_memory, layer_cache in zip(layers, memories, caches):
            x, extra = layer(
                x,
                layer_memory,
                cache=layer_cache,
                position=position,
                training=training,
                return_attention_scores=True,
                **masks,
            )
            (all_weights if cache is None else new_cache).append(extra)
        x = self.final_layer_norm(x) if self.final_layer_norm else x
        if cache is not None:
            return x, new_cache
        return (x, all_weights) if return_attention_scores else x

    def init_cache(self, batch_size, length):
        """One empty self-attention cache per layer (see `DecoderLayer.init_cache`)."""
        return [layer.init_cache(batch_size, length) for layer in self.blocks]

    def project_memory(self, memory):
        """One projected memory per layer (see `DecoderLayer.project_memory`)."""
        return [layer.project_memory(memory) for layer in self.blocks]

    def compute_output_shape(self, x_shape, memory_shape=None):
        return x_shape

    def get_config(self):
        return {**super().get_config(), "cross_attention": self.cross_attention}
