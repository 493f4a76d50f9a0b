"""What the encoder and decoder layers and stacks share (Vaswani et al., 2017, §3.1): one owner
for their hyperparameters, the residual connections they are built from, and the LayerNorm that
ends a pre-LN stack."""

from __future__ import annotations

import keras

from keras_transformer.config import TransformerConfig
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import SublayerConnection


class TransformerBlock(keras.layers.Layer):
    """A layer configured by the model's `TransformerConfig` (h, d_ff and the FFN's activation,
    P_drop, the LayerNorm epsilon, `norm_first`, N for the stacks), given once as `config` (a
    dataclass or its dict).

    Sizes come from the input in `build`, which checks that its width is `config.d_model`.
    """

    def __init__(self, config: TransformerConfig | dict, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, TransformerConfig) else TransformerConfig.from_dict(config)

    def check_width(self, input_shape) -> None:
        if input_shape[-1] != self.config.d_model:
            raise ValueError(
                f"{type(self).__name__}: input width {input_shape[-1]} != config.d_model {self.config.d_model}"
            )

    def residual(self, name: str, input_shape) -> SublayerConnection:
        """A built residual connection around one sub-layer (§3.1)."""
        c = self.config
        connection = SublayerConnection(
            c.dropout, c.layer_norm_epsilon, c.norm_first, name=name, dtype=self.dtype_policy
        )
        connection.build(input_shape)
        return connection

    def feed_forward_network(self, input_shape) -> PositionwiseFeedForward:
        """A built position-wise feed-forward network (§3.3) of width d_ff and the configured activation."""
        ffn = PositionwiseFeedForward(
            self.config.d_ff, self.config.ffn_activation, name="feed_forward", dtype=self.dtype_policy
        )
        ffn.build(input_shape)
        return ffn

    def closing_layer_norm(self, input_shape):
        """The LayerNorm that ends a pre-LN stack (its layers' outputs are not normalised), or None."""
        if not self.config.norm_first:
            return None
        norm = keras.layers.LayerNormalization(
            epsilon=self.config.layer_norm_epsilon, name="final_layer_norm", dtype=self.dtype_policy
        )
        norm.build(input_shape)
        return norm

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}
