"""Keras 3 layers of the Transformer (Vaswani et al., 2017, §3)."""

from keras_transformer.layers.attention import MultiHeadAttention
from keras_transformer.layers.decoder import Decoder, DecoderLayer
from keras_transformer.layers.embedding import PositionalEncoding, SharedEmbedding, sinusoid_table
from keras_transformer.layers.encoder import Encoder, EncoderLayer
from keras_transformer.layers.feed_forward import PositionwiseFeedForward
from keras_transformer.layers.residual import SublayerConnection

__all__ = [
    "Decoder",
    "DecoderLayer",
    "Encoder",
    "EncoderLayer",
    "MultiHeadAttention",
    "PositionalEncoding",
    "PositionwiseFeedForward",
    "SharedEmbedding",
    "SublayerConnection",
    "sinusoid_table",
]
