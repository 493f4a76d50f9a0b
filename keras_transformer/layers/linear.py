"""The learned linear transformations of the sub-layers (Vaswani et al., 2017, §3.2.2, §3.3)."""

from __future__ import annotations

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_transformer")
class Linear(keras.layers.Dense):
    """`keras.layers.Dense` applied to every position as one 2-D matmul: x [..., d_in] ->
    [..., units].

    The same weights and arithmetic as `Dense`, whose TensorFlow backend runs `tf.tensordot` on
    [B, T, d] inputs: about 15 shape ops per call, which made up a quarter of a beam-search
    step's ops (measured with `python bench/profiles.py decode`); here a reshape on each side, to a shape
    known when traced wherever only the first dimension is not (a decoding step's [B', 1, d]).
    """

    def call(self, inputs, training=None):
        x = ops.matmul(ops.reshape(inputs, (-1, ops.shape(inputs)[-1])), self.kernel)  # [N, units]
        if self.bias is not None:
            x = ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return ops.reshape(x, (*leading_shape(inputs), self.units))  # [..., units]


def leading_shape(x) -> tuple:
    """The dimensions of `x` but the last, for a reshape: -1 for the first where the others are
    known and nonzero when traced (a constant shape: no shape ops run), else the dynamic shape."""
    middle = tuple(x.shape[1:-1])
    if all(size for size in middle):
        return (-1, *middle)
    return tuple(ops.shape(x)[:-1])
