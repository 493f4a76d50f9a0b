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
    step's ops (measured with bench/profile_decode.py); here a reshape on each side.
    """

    def call(self, inputs, training=None):
        shape = ops.shape(inputs)
        x = ops.matmul(ops.reshape(inputs, (-1, shape[-1])), self.kernel)  # [N, units]
        if self.bias is not None:
            x = ops.add(x, self.bias)
        if self.activation is not None:
            x = self.activation(x)
        return ops.reshape(x, (*shape[:-1], self.units))  # [..., units]
