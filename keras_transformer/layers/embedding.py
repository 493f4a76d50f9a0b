"""Shared token embedding (Vaswani et al., 2017, §3.4) and sinusoidal positions (§3.5)."""

from __future__ import annotations

import keras
import numpy as np
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class SharedEmbedding(keras.layers.Layer):
    """One [vocab, d_model] matrix for the source embedding, the target embedding and the
    pre-softmax projection (§3.4; Press & Wolf, 2017). Embeddings are multiplied by sqrt(d_model).

    `layer(ids)` -> [B, L, d_model]; `layer.project(x)` -> logits [B, L, vocab] in float32.
    """

    def __init__(self, vocab_size: int, d_model: int, **kwargs):
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.d_model = d_model

    def build(self, input_shape=None):
        # N(0, d_model^-1/2): after the sqrt(d_model) scaling the embeddings have unit variance.
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.vocab_size, self.d_model),
            initializer=keras.initializers.RandomNormal(stddev=self.d_model**-0.5),
        )

    def call(self, ids):
        x = ops.take(self.embeddings, ops.cast(ids, "int32"), axis=0)  # [B, L, d_model]
        return x * ops.cast(self.d_model**0.5, x.dtype)

    def output_projection(self, dtype="float32"):
        """E^T [d_model, vocab] in `dtype`: the pre-softmax linear transformation's matrix laid out
        for x E^T. Decoding makes it once per search and multiplies every step by it: oneDNN's
        matmul against the [vocab, d_model] matrix itself, transposed inside the op (what `project`
        alone runs), took 1.3-2.2x as long on a decoding step's shapes (bench/RESULTS.md,
        "2026-12-02 (midday)")."""
        return ops.transpose(ops.cast(self.embeddings, dtype))  # [d_model, vocab]

    def project(self, x, output_projection=None):
        """The pre-softmax linear transformation x E^T (§3.4), in float32; `output_projection`: E^T
        made beforehand (`output_projection()`), as a decoding step reads it."""
        weights = self.output_projection(x.dtype) if output_projection is None else output_projection
        return ops.cast(ops.matmul(x, weights), "float32")  # [..., vocab]

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.d_model)

    def get_config(self):
        return {**super().get_config(), "vocab_size": self.vocab_size, "d_model": self.d_model}


def sinusoid_table(max_length: int, d_model: int) -> np.ndarray:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))  (§3.5).

    Sines on even dimensions and cosines on odd ones, interleaved as in the paper.
    """
    positions = np.arange(max_length, dtype=np.float64)[:, None]  # [L, 1]
    rates = 1.0 / np.power(10000.0, np.arange(0, d_model, 2, dtype=np.float64) / d_model)  # [d_model/2]
    table = np.zeros((max_length, d_model), dtype=np.float64)
    table[:, 0::2] = np.sin(positions * rates)
    table[:, 1::2] = np.cos(positions * rates)
    return table.astype(np.float32)  # [L, d_model]


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionalEncoding(keras.layers.Layer):
    """Adds the fixed sinusoidal encoding of §3.5 to embeddings [B, L, d_model].

    `layer(x)` encodes positions 0..L-1; `layer(x, position=i)` encodes one step at position i
    (incremental decoding). The table is a constant, not a weight.
    """

    def __init__(self, max_length: int, **kwargs):
        super().__init__(**kwargs)
        self.max_length = max_length

    def build(self, input_shape):
        self.table = sinusoid_table(self.max_length, input_shape[-1])

    def call(self, x, position=None):
        table = ops.cast(self.table, x.dtype)
        if position is None:
            return x + table[None, : ops.shape(x)[1]]  # [B, L, d_model]
        return x + ops.take(table, ops.reshape(position, (1,)), axis=0)[None]  # [B, 1, d_model]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "max_length": self.max_length}
