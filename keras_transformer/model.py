"""The Transformer encoder-decoder (Vaswani et al., 2017, §3, Figure 1).

Backend-neutral: `keras.ops` only, no TensorFlow, so the same model runs on Keras' JAX backend
(e.g. bench/gpu_check_jax.py). What TensorFlow training needs beyond Keras (the fixes for
`model.fit` under `tf.distribute`) is applied by `training.compile_model`."""

from __future__ import annotations

import gc
from typing import Any, NamedTuple

import keras
from keras import ops

from keras_transformer.config import TransformerConfig
from keras_transformer.layers import Decoder, Encoder, PositionalEncoding, SharedEmbedding
from keras_transformer.layers.linear import Linear
from keras_transformer.layers.masking import padding_mask
from keras_transformer.special_tokens import PAD_ID, START_ID


class DecodingContext(NamedTuple):
    """What a model's decoding steps read besides the cache (`start_decoding`; the protocol
    `search.search.DecodingModel`). Read-only: a search carries `rows` in its loop (and drops
    the rows of the sentences that stop), captures `shared` in the loop's body (a loop-invariant
    input, which TFLite's converter turns into a constant: the output projection then stays a
    FULLY_CONNECTED op with the embedding as its int8 weights), and never copies either."""

    rows: Any  # per sentence: every leaf [B, ...]
    shared: Any  # what every sentence shares (no batch axis)
    fixed_cache: bool = False  # the cache has a fixed number of slots, written by position (static shapes)


def resolve_layer(layer: int, num_layers: int) -> int:
    """The index, from 0 at the bottom, of layer `layer` of a stack of `num_layers` (negative:
    from the top, down to the first)."""
    index = layer if layer >= 0 else max(num_layers + layer, 0)
    if index >= num_layers:
        raise ValueError(f"alignment_layer {layer} is beyond the model's {num_layers} decoder layers")
    return index


@keras.saving.register_keras_serializable(package="keras_transformer")
class Transformer(keras.Model):
    """Encoder-decoder Transformer with one shared embedding matrix (§3.4).

    `model((source_ids, target_in_ids), training=...)` -> logits [B, T, vocab] (float32), where
    `target_in_ids` is the target shifted right (starting with `START_ID`). Masks come from
    `PAD_ID`. For decoding: `start_decoding`, then `decode_step` per position.

    The architecture options of `TransformerConfig` (the depths, the FFN's activation, the
    sinusoid layout, the output bias, the zero start embedding) are all inside the model: a
    search sees the same `start_decoding` / `decode_step` with any of them.
    """

    def __init__(self, config: TransformerConfig | dict, **kwargs):
        super().__init__(**kwargs)
        self.config = config if isinstance(config, TransformerConfig) else TransformerConfig.from_dict(config)
        c, policy = self.config, self.dtype_policy
        self.embedding = SharedEmbedding(c.vocab_size, c.d_model, c.output_bias, name="shared_embedding", dtype=policy)
        self.positional_encoding = PositionalEncoding(
            c.max_length, c.sinusoid_layout, name="positional_encoding", dtype=policy
        )
        self.embedding_dropout = keras.layers.Dropout(c.dropout, name="embedding_dropout", dtype=policy)
        self.encoder = Encoder(c, name="encoder", dtype=policy)
        self.decoder = Decoder(c, name="decoder", dtype=policy)

    def build(self, input_shape=None):
        if self.built:  # `compile_model` builds it; building again would make a second set of weights
            return
        hidden = (None, None, self.config.d_model)
        self.embedding.build((None, None))
        self.positional_encoding.build(hidden)
        self.encoder.build(hidden)
        self.decoder.build(hidden, hidden)

    def _embed(self, ids, training=None, position=None, target=False):
        """Token embedding * sqrt(d_model) + positional encoding, then dropout (§3.4, §3.5, §5.4).
        `target`: decoder inputs, whose `START_ID` embeds to a zero vector with
        `config.start_from_zero_embedding` (Marian's; a deviation from the paper)."""
        zero_id = START_ID if target and self.config.start_from_zero_embedding else None
        x = self.positional_encoding(self.embedding(ids, zero_id=zero_id), position=position)  # [B, L, d_model]
        return self.embedding_dropout(x, training=training)

    def encode(self, source_ids, training=None):
        """source_ids [B, S] -> (memory [B, S, d_model], source padding mask [B, S] bool)."""
        source_mask = padding_mask(source_ids, PAD_ID)
        memory = self.encoder(self._embed(source_ids, training), padding_mask=source_mask, training=training)
        return memory, source_mask

    def decode(self, target_in_ids, memory, source_mask, training=None):
        """target_in_ids [B, T] and the encoder output -> logits [B, T, vocab] (float32)."""
        target_mask = padding_mask(target_in_ids, PAD_ID)
        x = self.decoder(
            self._embed(target_in_ids, training, target=True),
            memory,
            padding_mask=target_mask,
            memory_padding_mask=source_mask,
            training=training,
        )  # [B, T, d_model]
        return self.embedding.project(x)  # [B, T, vocab]

    def call(self, inputs, training=None):
        source_ids, target_in_ids = inputs
        memory, source_mask = self.encode(source_ids, training=training)
        return self.decode(target_in_ids, memory, source_mask, training=training)

    def attention_weights(self, source_ids, target_in_ids):
        """Every head's attention weights in inference mode, for inspection and plots.

        Returns {"encoder": [[B, h, S, S]] * N_enc, "decoder_self": [[B, h, T, T]] * N_dec,
        "decoder_cross": [[B, h, T, S]] * N_dec}, N_enc and N_dec the depths (`config.encoder_depth`,
        `config.decoder_depth`).
        """
        source_mask = padding_mask(source_ids, PAD_ID)
        memory, encoder_weights = self.encoder(
            self._embed(source_ids, False), padding_mask=source_mask, training=False, return_attention_scores=True
        )
        _, decoder_weights = self.decoder(
            self._embed(target_in_ids, False, target=True),
            memory,
            padding_mask=padding_mask(target_in_ids, PAD_ID),
            memory_padding_mask=source_mask,
            training=False,
            return_attention_scores=True,
        )
        return {
            "encoder": encoder_weights,
            "decoder_self": [w["self"] for w in decoder_weights],
            "decoder_cross": [w["cross"] for w in decoder_weights],
        }

    def start_decoding(self, source_ids, hypotheses: int, max_length=None, vocabulary=None):
        """Encode `source_ids` [B, S] once for decoding `hypotheses` continuations of each sentence.
        Returns `(context, cache)`:

        - context: a `DecodingContext`, its rows per sentence every decoder layer's
          cross-attention keys and values [B, h, S, d_k] and the source padding mask [B, S];
          what every sentence shares, the output projection (E^T [d_model, vocab], transposed and
          with int8 weights dequantised once per search, and the output bias if any:
          `SharedEmbedding.output_projection`), of only the tokens `vocabulary` [V'] int32 if given
          (a vocabulary shortlist: the steps' logits are then [B', V'], over those tokens in that order);
        - cache: per hypothesis, [B * hypotheses, ...] leaves (the hypotheses of sentence b on
          rows b*hypotheses ...), every decoder layer's self-attention keys and values: empty and
          growing by one position per step, or with `max_length` fixed slots (static shapes,
          what XLA needs).

        A search may reorder the cache's rows between steps; the context is never copied.
        """
        if not self.built:
            self.build()
        memory, source_mask = self.encode(source_ids, training=False)
        context = DecodingContext(
            rows=(self.decoder.project_memory(memory), source_mask),
            shared=self.embedding.output_projection(self.compute_dtype, vocabulary),
            fixed_cache=max_length is not None,
        )
        # A growing cache starts with no slot, of a length not known when traced: TFLite's converter
        # types a while loop's state by its first value, and a static 0 cannot grow.
        slots = ops.minimum(ops.shape(source_ids)[1], 0) if max_length is None else max_length
        return context, self.decoder.init_cache(ops.shape(source_ids)[0] * hypotheses, slots)

    def decode_step(self, token_ids, position, cache, context):
        """token_ids [B'] at `position` (scalar) -> (logits [B', vocab] float32, updated cache); the
        logits are over the context's `vocabulary` [V'] where `start_decoding` had one.

        Equals `decode` on the whole prefix, at its last position.
        """
        memory, source_mask = context.rows
        x = self._embed(ops.expand_dims(token_ids, 1), False, position, target=True)  # [B', 1, d_model]
        x, cache = self.decoder(
            x,
            memory,
            memory_padding_mask=source_mask,
            cache=cache,
            position=position if context.fixed_cache else None,
        )  # [B', 1, d_model]
        return self.embedding.project(x[:, 0], context.shared), cache  # [B', vocab]

    def cross_attention(self, source_ids, target_in_ids, layer: int):
        """The cross-attention weights [B, T, S] of decoder layer `layer` (negative: from the top,
        `resolve_layer`), averaged over its heads, in a teacher-forced pass (for alignments)."""
        every_layer = self.attention_weights(source_ids, target_in_ids)["decoder_cross"]  # N x [B, h, T, S]
        chosen = every_layer[resolve_layer(layer, len(every_layer))]  # [B, h, T, S]
        return ops.mean(ops.cast(chosen, "float32"), axis=1)  # [B, T, S]

    def with_dtype(self, dtype: str) -> Transformer:
        """A copy of this model whose weights and computation are in `dtype`, for decoding: with
        "bfloat16", the matmuls run on the bf16 units of CPUs that have them (AVX512_BF16, AMX) in
        half the weights' memory: at base, 16 x 64 forced tokens, 1.43x float32's decoding speed on
        one thread of a CPU with AMX, 0.88-1.56x on CPUs with AVX512_BF16 alone (bench/RESULTS.md,
        "bf16 against float32"); a CPU without bf16 units was never measured (oneDNN has no bf16
        kernel below AVX-512). LayerNorm and the softmax over the vocabulary stay float32 (Keras'
        LayerNormalization; `decoding`'s log-softmax).
        This model itself if it is in `dtype` already."""
        if dtype == self.dtype_policy.name:
            return self
        if not self.built:
            self.build()
        model = Transformer(self.config, dtype=dtype, name=self.name)
        model.build()
        model.set_weights(self.get_weights())
        return model

    def with_int8(self) -> Transformer:
        """A copy of this model with int8 weights (`quantize("int8")`), for decoding and export: every
        weight matrix, the shared embedding's included, in a quarter of float32's bytes; activations,
        biases and layer norms stay float (dynamic-range quantisation: `Linear`, `SharedEmbedding`).
        This model itself if its weights are int8 already."""
        if self.embedding.quantization_mode == "int8":
            return self
        if not self.built:
            self.build()
        model = Transformer(self.config, dtype=self.dtype_policy.name, name=self.name)
        model.build()
        model.set_weights(self.get_weights())
        gc.freeze()  # Keras runs gc.collect() after each float weight it deletes: with the process's
        try:  # objects frozen (out of the collector's sight), each takes a moment, not ~0.25 s
            model.quantize("int8")
        finally:
            gc.unfreeze()
        return model

    def quantize(self, mode=None, config=None, filters=None, **kwargs):
        """Keras' `Model.quantize`, by default of the layers that hold the weight matrices (`Linear`,
        `SharedEmbedding`; int8 only): not of the layer norms and dropouts, for which Keras warns."""
        weight_matrices = lambda layer: isinstance(layer, (Linear, SharedEmbedding))
        super().quantize(mode, config, weight_matrices if filters is None else filters, **kwargs)

    def get_config(self):
        return {**super().get_config(), "config": self.config.to_dict()}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


# `.keras` files of 0.1.0 name training's model class of then, which was a Transformer.
keras.saving.get_custom_objects()["keras_transformer>DistributedTransformer"] = Transformer
