"""The learned linear transformations of the sub-layers (Vaswani et al., 2017, §3.2.2, §3.3)."""

from __future__ import annotations

import keras
from keras import ops

# `Linear.quantize`'s config: Keras' int8 weights, no activation quantizer (`_int8_call` multiplies
# float activations by the int8 kernel; the config is what `get_config` records of it).
WEIGHTS_ONLY = keras.quantizers.Int8QuantizationConfig(activation_quantizer=None)


@keras.saving.register_keras_serializable(package="keras_transformer")
class Linear(keras.layers.Dense):
    """`keras.layers.Dense` applied to every position as one 2-D matmul: x [..., d_in] ->
    [..., units].

    The same weights and arithmetic as `Dense`, whose TensorFlow backend runs `tf.tensordot` on
    [B, T, d] inputs: about 15 shape ops per call, which made up a quarter of a beam-search
    step's ops (measured with `python bench/profiles.py decode`); here a reshape on each side, to a shape
    known when traced wherever only the first dimension is not (a decoding step's [B', 1, d]).

    `quantize("int8")` (also through `Transformer.quantize`) stores the kernel as int8 with one
    float scale per output unit (Keras' `AbsMaxQuantizer(axis=0)`: W ~= W_q / s, W_q = round(127 W /
    max|W[:, j]|)), and the layer then computes (x cast(W_q)) / s + b with float activations
    (dynamic-range, weights-only quantisation). Not Keras' own int8 call, which also rounds the
    activations to int8 per row and multiplies int8 by int8 into int32: TensorFlow's CPU kernel for
    that (Eigen's; oneDNN does not run it) took 1.6-4.7x the float32 time of a decoding step's
    matrices, where this cast took 1.07-1.19x (`python bench/profiles.py int8-matmul`:
    bench/RESULTS.md, "int8 weights against float32"; `python bench/decoding.py int8` measures the
    whole search). Keras' `Dense.quantize` refuses subclasses (`type_check`): Keras' `model.quantize("int8")`
    skips every layer of this model.
    """

    def call(self, inputs, training=None):
        return self._apply(inputs, self.kernel)

    def quantize(self, mode=None, type_check=True, config=None):
        """int8 weights (see the class docstring); other modes are Keras' `Dense`'s, which
        `_apply` does not run: refused."""
        if mode != "int8":
            raise NotImplementedError(f"Linear quantizes to int8 only, not {mode}")
        super().quantize(mode, type_check=False, config=WEIGHTS_ONLY)

    def _int8_call(self, inputs, training=None):
        return self._apply(inputs, ops.cast(self._kernel, self.compute_dtype), self.kernel_scale)

    def _apply(self, inputs, kernel, kernel_scale=None):
        """activation(x kernel (/ kernel_scale, per unit) + bias) over the last axis of `inputs`."""
        x = ops.matmul(ops.reshape(inputs, (-1, ops.shape(inputs)[-1])), kernel)  # [N, units]
        if kernel_scale is not None:
            x = ops.divide(x, ops.cast(kernel_scale, x.dtype))  # [N, units]
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
