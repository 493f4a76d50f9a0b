"""Position-wise feed-forward network (Vaswani et al., 2017, §3.3).

FFN(x) = max(0, x W_1 + b_1) W_2 + b_2                                     (Eq. 2)

Deviation from the paper, off by default (`activation="swish"`): swish(x W_1 + b_1) W_2 + b_2 with
swish(z) = z sigmoid(z) (SiLU; Ramachandran et al., 2017), as most OPUS-MT (Marian) models have it.
"""

from __future__ import annotations

import keras
from keras import ops

from keras_transformer.layers.linear import Linear


@keras.saving.register_keras_serializable(package="keras_transformer")
class PositionwiseFeedForward(keras.layers.Layer):
    """Two linear maps with a ReLU (or swish) between, applied to each position alone: d_model -> d_ff -> d_model."""

    def __init__(self, d_ff: int, activation: str = "relu", **kwargs):
        super().__init__(**kwargs)
        self.d_ff = d_ff
        self.activation = activation

    def build(self, input_shape):
        d_model = input_shape[-1]
        if d_model is None:
            raise ValueError("PositionwiseFeedForward: the last input dimension (d_model) must be known")
        # swish written as z sigmoid(z): with Keras' "swish" (tf.nn.silu) the TFLite converter of
        # TF 2.21 writes a model without its signatures (exporters/tensorflow.py serves by signature).
        relu = "relu" if self.activation == "relu" else None
        self.inner = Linear(self.d_ff, activation=relu, name="inner", dtype=self.dtype_policy)
        self.outer = Linear(d_model, name="outer", dtype=self.dtype_policy)
        self.inner.build(input_shape)
        self.outer.build((*input_shape[:-1], self.d_ff))

    def call(self, x):
        hidden = self.inner(x)  # [B, T, d_ff]
        if self.activation == "swish":
            hidden = hidden * ops.sigmoid(hidden)  # swish(z) = z sigmoid(z)
        return self.outer(hidden)  # [B, T, d_model]

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {**super().get_config(), "d_ff": self.d_ff, "activation": self.activation}
