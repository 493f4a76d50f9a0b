"""The model's weights by role: the one map from what the paper names (§3: embeddings, attention
projections W^Q, W^K, W^V, W^O, the feed-forward network's two layers, the layer norms) to the
attributes of a built `Transformer`, beside the model. Exporters read through it and importers
write through it, so that neither knows the other (nor the model's attribute names).
"""

from __future__ import annotations


def model_variables(model) -> dict:
    """Every weight of a built `Transformer` by role, as its variable, in Keras layout.

    The one place that names the model's attributes: a renamed layer is one edit here. The exports
    read them (`exporters.ctranslate2.model_weights`), the importers write them (`keras_transformer.importers`).
    "output_bias" is the logits' learned bias (None without one). Each attention is {"query",
    "key_value" (fused W^K|W^V), "output", "norm"}; each feed-forward network {"inner", "outer",
    "norm"}; a Dense is (kernel [in, out], bias [out]); a norm (gamma, beta); "norm" is the
    residual wrapper's LayerNorm (before or after the sub-layer, by `norm_first`); "final_norm"
    ends a pre-LN stack (None for post-LN).
    """

    def dense(layer):
        return layer.kernel, layer.bias

    def norm(layer):
        return layer.gamma, layer.beta

    def attention(layer, residual):
        return {
            "query": dense(layer.query_dense),
            "key_value": dense(layer.key_value_dense),
            "output": dense(layer.output_dense),
            "norm": norm(residual.layer_norm),
        }

    def feed_forward(block):
        ffn = block.feed_forward
        return {
            "inner": dense(ffn.inner),
            "outer": dense(ffn.outer),
            "norm": norm(block.feed_forward_residual.layer_norm),
        }

    def stack(layers, final_layer_norm, cross: bool):
        blocks = []
        for block in layers.blocks:
            weights = {"self_attention": attention(block.self_attention, block.self_attention_residual)}
            if cross:
                weights["cross_attention"] = attention(block.cross_attention_layer, block.cross_attention_residual)
            blocks.append({**weights, "feed_forward": feed_forward(block)})
        return {"layers": blocks, "final_norm": norm(final_layer_norm) if final_layer_norm else None}

    return {
        "embedding": model.embedding.embeddings,  # [V, d_model]
        "output_bias": model.embedding.logit_bias,  # [V] or None
        "encoder": stack(model.encoder, model.encoder.final_layer_norm, cross=False),
        "decoder": stack(model.decoder, model.decoder.final_layer_norm, cross=True),
    }
