"""Peer models built to our workloads' shapes, for `training.py compare` and `decoding.py forced`, and our
random-weight model as a CTranslate2 model directory, for `decoding.py forced` (keras-hub
and ctranslate2 are bench extras only)."""

from __future__ import annotations

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID


def build_keras_hub(config, jit_compile: bool):
    """keras-hub's `TransformerEncoder`/`TransformerDecoder` stacks with our `TransformerConfig`'s sizes,
    trained the way its guides train them: `model.fit` on logits with sparse cross-entropy.

    Same d_model, h, d_ff, N, dropout, vocabulary and post-LN as ours. Differences that keras-hub
    imposes and that cost next to nothing: learned positions (`TokenAndPositionEmbedding`), an
    untied output `Dense` (the same FLOPs as our tied projection), no label smoothing, a constant
    learning rate.
    """
    import keras_hub

    c = config
    source = keras.Input((None,), dtype="int32", name="source_ids")
    target_in = keras.Input((None,), dtype="int32", name="target_in_ids")
    embedding = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=c.vocab_size, sequence_length=c.max_length, embedding_dim=c.d_model, mask_zero=True
    )
    block = dict(
        intermediate_dim=c.d_ff, num_heads=c.num_heads, dropout=c.dropout, layer_norm_epsilon=c.layer_norm_epsilon
    )
    x = embedding(source)
    for _ in range(c.num_layers):
        x = keras_hub.layers.TransformerEncoder(**block)(x)
    memory = x
    y = embedding(target_in)
    for _ in range(c.num_layers):
        y = keras_hub.layers.TransformerDecoder(**block)(y, memory)
    logits = keras.layers.Dense(c.vocab_size)(y)
    model = keras.Model([source, target_in], logits, name="keras_hub_transformer")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
        jit_compile=jit_compile,
    )
    return model


def keras_hub_generate(config, search: str, generate: int, beam_size: int):
    """`generate(source_ids [B, S] int32) -> ids [B, 1, generate] int32`: a `build_keras_hub`
    model (random weights) decoded by keras-hub's own sampler, traceable by `tf.function`.

    The next-token function is keras-hub's standard one for an encoder-decoder
    (`BartSeq2SeqLM.generate_step`): `next(prompt, cache, index)` runs the decoder on the token at
    `index - 1` with the layers' key/value caches (`self_attention_cache`, a fixed-size
    `[B, N, 2, 1 + generate, h, d_k]` tensor written by index; `cross_attention_cache`, computed
    once), and the sampler's cache is (self cache, encoder output, source mask, cross cache).
    The cross cache is built as Bart's `_build_cache` builds it, by one decoder call on the start
    token (the first `next` recomputes that position, as Bart's does). `stop_token_ids=None`:
    every sequence gets exactly `generate` tokens. Pad, start and EOS get the lowest logit (bias of
    the output `Dense`), as our search masks pad and start and `forbid_eos` pins EOS.
    """
    import keras_hub

    model = build_keras_hub(config, jit_compile=False)
    layers = model.layers  # topological order: inputs, embedding, encoders, decoders, output Dense
    embedding = next(layer for layer in layers if isinstance(layer, keras_hub.layers.TokenAndPositionEmbedding))
    encoders = [layer for layer in layers if isinstance(layer, keras_hub.layers.TransformerEncoder)]
    decoders = [layer for layer in layers if isinstance(layer, keras_hub.layers.TransformerDecoder)]
    head = layers[-1]
    bias = head.bias.numpy()
    bias[[PAD_ID, START_ID, EOS_ID]] = np.finfo(np.float32).min / 2
    head.bias.assign(bias)
    if search == "beam":
        sampler = keras_hub.samplers.BeamSampler(num_beams=beam_size)
    else:
        sampler = keras_hub.samplers.GreedySampler()

    def call_decoder_with_cache(token_ids, memory, source_mask, self_cache, index, cross_cache, cross_index):
        """token_ids [B, 1] at `index` -> (logits [B, 1, V], self cache, cross cache), as Bart's."""
        x = embedding(token_ids, start_index=index)  # [B, 1, d_model]
        self_caches, cross_caches = [], []
        for i, decoder in enumerate(decoders):
            x, layer_self_cache, layer_cross_cache = decoder(
                x,
                memory,
                encoder_padding_mask=source_mask,
                self_attention_cache=self_cache[:, i],  # [B, 2, 1 + generate, h, d_k]
                self_attention_cache_update_index=index,
                cross_attention_cache=cross_cache[:, i],  # [B, 2, S, h, d_k]
                cross_attention_cache_update_index=cross_index,
            )
            self_caches.append(layer_self_cache)
            cross_caches.append(layer_cross_cache)
        return head(x), tf.stack(self_caches, axis=1), tf.stack(cross_caches, axis=1)

    def run(source_ids):
        batch, source_length = tf.shape(source_ids)[0], tf.shape(source_ids)[1]
        source_mask = source_ids != PAD_ID  # [B, S]
        memory = embedding(source_ids)  # [B, S, d_model]
        for encoder in encoders:
            memory = encoder(memory)  # the source mask travels with `memory` (mask_zero), as in build_keras_hub
        prompt = tf.pad(tf.fill([batch, 1], START_ID), [[0, 0], [0, generate]])  # [B, 1 + generate]
        n, h, d_k = len(decoders), config.num_heads, config.d_k
        self_cache = tf.zeros([batch, n, 2, 1 + generate, h, d_k])  # [B, N, 2, 1 + generate, h, d_k]
        cross_cache = tf.zeros([batch, n, 2, source_length, h, d_k])  # [B, N, 2, S, h, d_k]
        _, self_cache, cross_cache = call_decoder_with_cache(
            prompt[:, :1], memory, source_mask, self_cache, 0, cross_cache, 0
        )

        def next(prompt, cache, index):
            self_cache, memory, source_mask, cross_cache = cache
            token_ids = prompt[:, index - 1 : index]  # [B * beams, 1]
            logits, self_cache, _ = call_decoder_with_cache(
                token_ids, memory, source_mask, self_cache, index - 1, cross_cache, None
            )
            return logits[:, 0], None, (self_cache, memory, source_mask, cross_cache)

        ids = sampler(next, prompt, cache=(self_cache, memory, source_mask, cross_cache), index=1, stop_token_ids=None)
        return ids[:, None, 1:]  # [B, 1, generate]: the best beam without the start token

    return run


def numbered_tokens(config) -> list[str]:
    """Token strings for a model without a tokenizer (random weights): "t<id>", pad named as
    CTranslate2 names it."""
    from keras_transformer.exporters.ctranslate2 import PAD_TOKEN
    from keras_transformer.special_tokens import PAD_ID

    tokens = [f"t{i}" for i in range(config.vocab_size)]
    tokens[PAD_ID] = PAD_TOKEN
    return tokens


def write_ctranslate2(model, out: str) -> None:
    """Our random-weight `model` as the CTranslate2 model directory `out` (float32; CTranslate2
    quantizes at load time, so "int8" runs what an int8 export runs), tokens named "t<id>"
    (`numbered_tokens`), sources taken as given (no EOS appended: random-token batches without
    EOS, as our search gets them)."""
    from keras_transformer.exporters.ctranslate2 import transformer_spec, write_spec

    spec = transformer_spec(model, numbered_tokens(model.config))
    spec.config.add_source_eos = False
    write_spec(spec, out)
