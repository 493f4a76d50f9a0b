"""Shared token embedding (Vaswani et al., 2017, §3.4) and sinusoidal positions (§3.5).

Deviations from the paper, each off by default (`TransformerConfig`), as Marian's models (OPUS-MT)
have them: a learned bias on the output logits (`output_bias`), a decoder whose first input
embeds to a zero vector (`zero_id`), and the sines and cosines in two halves (`sinusoid_table`).
"""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """One [vocab, d_model] matrix for the source embedding, the target embedding and the
    pre-softmax projection (§3.4; Press & Wolf, 2017). Embeddings are multiplied by sqrt(d_model).

    `layer(ids)` -> [B, L, d_model]; `layer(ids, zero_id=i)`: id i embeds to a zero vector;
    `layer.project(x)` -> logits [B, L, vocab] in float32.

    Deviation from the paper (`output_bias=True`): the logits are x E^T + b with a learned [vocab]
    bias b, initially zero (Marian's `decoder_ff_logit_out_b`).

    `quantize("int8")` (also through `Transformer.quantize`) stores E as int8 with one float scale
    per row, E ~= E_q / s, E_q = round(127 E / max|E[i, :]|) (Keras' `abs_max_quantize`): a row is
    a token's embedding and its unit of the output projection, so one scale serves both. The lookup
    reads E_q[i] / s_i; the projection reads E^T made in float from E_q once per search
    (`output_projection`), so that a decoding step multiplies by float32, as `Linear`'s int8 path
    does (why: `Linear`). For decoding and export: an int8 layer is not saved as `.keras`.
    """

    def __init__(self, vocab_size: int, d_model: int, output_bias: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.output_bias = output_bias

    def build(self, input_shape=None):
        # N(0, d_model^-1/2): after the sqrt(d_model) scaling the embeddings have unit variance.
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )
        self.logit_bias = None
        if self.output_bias:
            self.logit_bias = self.add_weight(name="output_bias", shape=(self.vocab_size,), initializer="zeros")

    def quantize(self, mode=None, type_check=True, config=None):
        """int8 weights, one scale per row (see the class docstring); no other mode."""
        if mode != "int8":
            raise NotImplementedError(f"SharedEmbedding quantizes to int8 only, not {mode}")
        quantized, scale = keras.quantizers.abs_max_quantize(self.embeddings, axis=-1, to_numpy=True)
        del self.embeddings
        shape = (self.vocab_size, self.d_model)
        self.quantized_embeddings = self.add_weight(
            name="embeddings", shape=shape, initializer="zeros", dtype="int8", trainable=False
        )
        self.embeddings_scale = self.add_weight(
            name="embeddings_scale", shape=(self.vocab_size,), initializer="ones", trainable=False
        )
        self.quantized_embeddings.assign(quantized)  # [vocab, d_model]
        self.embeddings_scale.assign(ops.squeeze(scale, -1))  # [vocab]
        self._is_quantized = True  # first: a quantized policy set on a layer that is not quantizes it
        self.dtype_policy = keras.dtype_policies.get(f"int8_from_{self.dtype_policy.name}")

    def call(self, ids, zero_id=None):
        """ids [B, L] -> [B, L, d_model]. Deviation from the paper (`zero_id`, Marian's decoder start):
        where the id is `zero_id` the embedding is a zero vector."""
        return self._embed(ids, self.embeddings, zero_id)

    def _int8_call(self, ids, zero_id=None):
        return self._embed(ids, self.quantized_embeddings, zero_id, self.embeddings_scale)

    def _embed(self, ids, table, zero_id=None, row_scales=None):
        ids = ops.cast(ids, "int32")
        x = ops.cast(ops.take(table, ids, axis=0), self.compute_dtype)  # [B, L, d_model]
        scale = ops.cast(self.d_model**0.5, x.dtype)
        if row_scales is not None:  # int8 rows: E_q[i] / s_i
            scale = scale / ops.expand_dims(ops.cast(ops.take(row_scales, ids, axis=0), x.dtype), -1)  # [B, L, 1]
        if zero_id is not None:
            scale = ops.where(ops.expand_dims(ops.equal(ids, zero_id), -1), ops.zeros((), x.dtype), scale)  # [B, L, 1]
        return x * scale

    def output_projection(self, dtype="float32", ids=None):
        """(E^T [d_model, vocab] in `dtype`, the output bias [vocab] float32 or None): the pre-softmax
        linear transformation laid out for x E^T + b; with `ids` [V'] int32 (a vocabulary shortlist,
        `search/shortlist.py`), only those tokens' columns [d_model, V'] and biases [V'].
        Decoding makes it once per search and multiplies every step by it: oneDNN's matmul against
        the [vocab, d_model] matrix itself, transposed inside the op (what `project` alone runs),
        took 1.3-2.2x as long on a decoding step's shapes (bench/JOURNAL.md, "2026-12-02 (midday)").
        With int8 weights: E_q^T / s in `dtype`, transposed while int8."""
        int8 = self.quantization_mode == "int8"
        table = self.quantized_embeddings if int8 else self.embeddings  # [vocab, d_model]
        scale, bias = (self.embeddings_scale if int8 else None), self.logit_bias  # [vocab]
        if ids is not None:
            table = ops.take(table, ids, axis=0)  # [V', d_model]
            scale = None if scale is None else ops.take(scale, ids, axis=0)  # [V']
            bias = None if bias is None else ops.take(bias, ids, axis=0)  # [V']
        bias = None if bias is None else ops.cast(bias, "float32")
        if int8:
            return ops.cast(ops.transpose(table), dtype) / ops.cast(scale, dtype), bias  # [d_model, V']
        return ops.transpose(ops.cast(table, dtype)), bias  # [d_model, V']

    def project(self, x, output_projection=None):
        """The pre-softmax linear transformation x E^T (§3.4), plus the output bias if any, in float32;
        `output_projection`: (E^T, b) made beforehand (`output_projection()`), as a decoding step reads it."""
        weights, bias = self.output_projection(x.dtype) if output_projection is None else output_projection
        logits = ops.cast(ops.matmul(x, weights), "float32")  # [..., vocab]
        return logits if bias is None else logits + bias

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "d_model": self.d_model,
            "output_bias": self.output_bias,
        }


def sinusoid_table(max_length: int, d_model: int, layout: str = "interleaved") -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))  (§3.5).

    `layout` "interleaved": sines on even dimensions and cosines on odd ones, as in the paper.
    Deviations from the paper, the sines on dimensions [0, d_model/2) and the cosines on
    [d_model/2, d_model):
    - "halves": at the paper's frequencies, 1 / 10000^(2i/d_model) (Hugging Face's
      `MarianSinusoidalPositionalEmbedding`, CTranslate2's Marian converter);
    - "tensor2tensor": at frequencies exp(-i ln(10000) / (d_model/2 - 1)), from 1 to exactly
      1/10000 (tensor2tensor's `get_timing_signal_1d`, Marian's `sinusoidalPositionEmbeddings`).
    """
    positions = np.arange(max_length, dtype=np.float64)[:, None]  # [L, 1]
    i = np.arange(d_model // 2, dtype=np.float64)  # [d_model/2]
    if layout == "tensor2tensor":
        rates = np.exp(-i * np.log(10000.0) / (d_model // 2 - 1))  # [d_model/2]
    else:
        rates = 1.0 / np.power(10000.0, 2 * i / d_model)  # [d_model/2]
    sines, cosines = np.sin(positions * rates), np.cos(positions * rates)  # [L, d_model/2] each
    if layout == "interleaved":
        table = np.stack([sines, cosines], axis=-1).reshape(max_length, d_model)  # sin, cos, sin, cos, ...
    elif layout in ("halves", "tensor2tensor"):
        table = np.concatenate([sines, cosines], axis=-1)  # sin, ..., sin, cos, ..., cos
    else:
        raise ValueError(f"unknown sinusoid layout {layout!r}; choose interleaved, halves or tensor2tensor")
    return table.astype(np.float32)  # [L, d_model]


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of §3.5 to embeddings [B, L, d_model].

    `layer(x)` encodes positions 0..L-1; `layer(x, position=i)` encodes one step at position i
    (incremental decoding). The table is a constant, not a weight; `layout` as `sinusoid_table`'s.
    """

    def __init__(self, max_length: int, layout: str = "interleaved", **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length
        self.layout = layout

    def build(self, input_shape):
        self.table = sinusoid_table(self.max_length, input_shape[-1], self.layout)

    def call(self, x, position=None):
        table = ops.cast(self.table, x.dtype)
        if position is None:
            return x + table[None, : ops.shape(x)[1]]  # [B, L, d_model]
        return x + ops.take(table, ops.reshape(position, (1,)), axis=0)[None]  # [B, 1, d_model]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length, "layout": self.layout}
