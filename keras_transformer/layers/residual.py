"""The residual sub-layer connection around every attention and feed-forward sub-layer
(Vaswani et al., 2017, §3.1, §5.4).

    LayerNorm(x + Dropout(Sublayer(x)))

a residual connection (He et al., 2016) followed by layer normalisation (Ba et al., 2016),
"post-LN", with dropout on the sub-layer output (§5.4).

Deviation from the paper, off by default (`norm_first=True`): "pre-LN",
x + Dropout(Sublayer(LayerNorm(x))), with one more LayerNorm at the top of each stack
(Xiong et al., 2020). It trains without the long early plateau that post-LN shows at the
learning rates a short CPU budget needs.
"""

from __future__ import annotations

import keras


@keras.saving.register_keras_serializable(package="keras_transformer")
class SublayerConnection(keras.layers.Layer):
    """`residual(x, sublayer=f)` -> LayerNorm(x + Dropout(f(x))), or x + Dropout(f(LayerNorm(x)))
    with `norm_first`.

    `f` maps [B, T, d_model] to [B, T, d_model]. It may also return a tuple whose first element
    is that output (attention weights, an updated cache): the connection then returns the same
    tuple with the first element replaced by its result.
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

    def call(self, x, sublayer, training=None):
        result = sublayer(self.layer_norm(x) if self.norm_first else x)
        output, *extra = result if isinstance(result, tuple) else (result,)
        x = x + self.dropout_layer(output, training=training)  # [B, T, d_model]
        x = x if self.norm_first else self.layer_norm(x)
        return (x, *extra) if isinstance(result, tuple) else x

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        return {
            **super().get_config(),
            "dropout": self.dropout,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "norm_first": self.norm_first,
        }
