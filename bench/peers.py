"""Peer models built to our workloads' shapes, for `compare.py` (keras-hub is a bench extra only)."""

from __future__ import annotations

import keras


def build_keras_hub(workload, jit_compile: bool):
    """keras-hub's `TransformerEncoder`/`TransformerDecoder` stacks with our workload's sizes,
    trained the way its guides train them: `model.fit` on logits with sparse cross-entropy.

    Same d_model, h, d_ff, N, dropout, vocabulary and post-LN as ours. Differences that keras-hub
    imposes and that cost next to nothing: learned positions (`TokenAndPositionEmbedding`), an
    untied output `Dense` (the same FLOPs as our tied projection), no label smoothing, a constant
    learning rate.
    """
    import keras_hub

    c = workload.config
    source = keras.Input((None,), dtype="int32", name="source_ids")
    target_in = keras.Input((None,), dtype="int32", name="target_in_ids")
    embedding = keras_hub.layers.TokenAndPositionEmbedding(
        vocabulary_size=c.vocab_size, sequence_length=c.max_length, embedding_dim=c.d_model, mask_zero=True
    )
    block = dict(intermediate_dim=c.d_ff, num_heads=c.num_heads, dropout=c.dropout, layer_norm_epsilon=c.layer_norm_epsilon)
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
