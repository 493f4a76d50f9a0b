"""`keras-transformer import --from huggingface DIR`: a local copy of a Hugging Face `MarianMTModel`
(transformers' port of the OPUS-MT models) as a model directory, read without torch.

The directory holds `config.json` (`MarianConfig`), `model.safetensors` (read here with NumPy: an
8-byte header length, a JSON header of names, dtypes, shapes and byte offsets, then the raw
little-endian data), `vocab.json` (piece: row, </s> 0, <unk> 1, <pad> last) and `source.spm` /
`target.spm` (one model, or each side its own over the one vocabulary). `pytorch_model.bin` (a
pickle that needs torch) is not read: save the model as safetensors first. Nothing is downloaded;
the user points at files they have.

transformers' Marian is a post-LN Transformer (`MarianEncoderLayer`: LayerNorm(x + Sublayer(x)))
with embeddings scaled by sqrt(d_model), sinusoids at the paper's frequencies in two halves
(`MarianSinusoidalPositionalEmbedding`: `sinusoid_layout="halves"`), `torch.nn.LayerNorm`'s
epsilon 1e-5, a `final_logits_bias`, and a decoder that starts from the pad token, whose embedding
row is zero (`start_from_zero_embedding`). Linear weights are in PyTorch layout [out, in].
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from collections.abc import Callable

import numpy as np

from keras_transformer import messages
from keras_transformer.config import TransformerConfig
from keras_transformer.importers.common import ModelImportError, sentencepiece_models, vocabulary, write_model_dir
from keras_transformer.layers.embedding import sinusoid_table

TORCH_LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's default, which MarianMTModel's norms keep
ACTIVATIONS = {"relu": "relu", "swish": "swish", "silu": "swish"}
DTYPES = {"F32": np.float32, "F16": np.float16, "F64": np.float64, "BF16": np.uint16}
# How far a stored sinusoid table (values in [-1, 1]) may lie from ours: float32's arithmetic, or the
# rounding of the dtype it was saved in (half a unit in the last place below 1: float16 2^-12,
# bfloat16 2^-9), with a margin; a table of other positions lies ~1 away.
POSITION_ATOL = {"F16": 1e-3, "BF16": 4e-3}  # others: 1e-4


def read_safetensors(path: str) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """({name: float32 array}, {name: its stored dtype}) of a safetensors file (its format:
    huggingface/safetensors' README)."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        (length,) = struct.unpack("<Q", data[:8])
        header = json.loads(data[8 : 8 + length])
    except (struct.error, ValueError):
        raise ModelImportError(f"{path} is not a safetensors file") from None
    body = memoryview(data)[8 + length :]
    tensors, dtypes = {}, {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        if entry["dtype"] not in DTYPES:
            raise ModelImportError(f"{path}: {name} is {entry['dtype']}; floats import (F32, F16, BF16, F64)")
        begin, end = entry["data_offsets"]
        array = np.frombuffer(body[begin:end], np.dtype(DTYPES[entry["dtype"]]).newbyteorder("<"))
        if entry["dtype"] == "BF16":  # the upper half of a float32
            array = (array.astype(np.uint32) << 16).view(np.float32)
        tensors[name] = array.astype(np.float32).reshape(entry["shape"])
        dtypes[name] = entry["dtype"]
    return tensors, dtypes


def transformer_config(values: dict, embedding: np.ndarray, path: str, **fields) -> TransformerConfig:
    """Our config of the `MarianConfig` `values`; refuses what ours cannot be."""

    def refuse(condition: bool, message: str) -> None:
        if condition:
            raise ModelImportError(f"{path}: {message}")

    refuse(values.get("model_type") != "marian", f"model_type {values.get('model_type')!r} is not marian")
    heads = {values.get("encoder_attention_heads"), values.get("decoder_attention_heads")}
    refuse(len(heads) != 1, "the encoder and decoder have different head counts; this model has one h")
    widths = {values.get("encoder_ffn_dim"), values.get("decoder_ffn_dim")}
    refuse(len(widths) != 1, "the encoder and decoder have different d_ff; this model has one")
    refuse(not values.get("scale_embedding", False), "scale_embedding false does not import (§3.4 scales by sqrt d)")
    refuse(bool(values.get("normalize_before")), "normalize_before does not import (transformers' Marian is post-LN)")
    refuse(not values.get("share_encoder_decoder_embeddings", True), "separate embeddings do not import (§3.4)")
    refuse(
        values.get("decoder_start_token_id") != values.get("pad_token_id"),
        "the decoder must start from the pad token (whose embedding is zero)",
    )
    activation = values.get("activation_function", "swish")
    refuse(activation not in ACTIVATIONS, f"activation_function {activation} does not import (relu, swish)")
    encoder_depth, decoder_depth = values["encoder_layers"], values["decoder_layers"]
    return TransformerConfig(
        **{
            "vocab_size": embedding.shape[0],
            "num_layers": encoder_depth,
            "num_decoder_layers": None if decoder_depth == encoder_depth else decoder_depth,
            "d_model": embedding.shape[1],
            "d_ff": widths.pop(),
            "num_heads": heads.pop(),
            "dropout": float(values.get("dropout", 0.1)),
            "max_length": values.get("max_position_embeddings", 512),
            "layer_norm_epsilon": TORCH_LAYER_NORM_EPSILON,
            "norm_first": False,
            "ffn_activation": ACTIVATIONS[activation],
            "sinusoid_layout": "halves",
            "output_bias": True,
            "start_from_zero_embedding": True,
            **fields,
        }
    )


def marian_weights(weights: dict, config: TransformerConfig, path: str, dtypes: dict | None = None) -> dict:
    """transformers' `MarianMTModel` weights laid out as `model_variables` (rows in its vocabulary's order);
    `dtypes`: each tensor's stored dtype (a position table saved in float16 or bfloat16 is rounded)."""

    def get(name):
        if name not in weights:
            raise ModelImportError(f"{path} has no weight {name}: not a MarianMTModel of its config")
        return weights[name]

    def dense(scope):
        return get(f"{scope}.weight").T, get(f"{scope}.bias")  # [in, out], [out]

    def norm(scope):
        return get(f"{scope}.weight"), get(f"{scope}.bias")

    def attention(scope, norm_scope):
        key, value = dense(f"{scope}.k_proj"), dense(f"{scope}.v_proj")
        fused = np.concatenate([key[0], value[0]], axis=1), np.concatenate([key[1], value[1]])  # W^K|W^V
        return {"query": dense(f"{scope}.q_proj"), "key_value": fused, "output": dense(f"{scope}.out_proj"),
                "norm": norm(norm_scope)}  # fmt: skip

    def stack(scope, depth, cross):
        layers = []
        for i in range(depth):
            prefix = f"model.{scope}.layers.{i}"
            layer = {"self_attention": attention(f"{prefix}.self_attn", f"{prefix}.self_attn_layer_norm")}
            if cross:
                layer["cross_attention"] = attention(f"{prefix}.encoder_attn", f"{prefix}.encoder_attn_layer_norm")
            ffn = {
                "inner": dense(f"{prefix}.fc1"),
                "outer": dense(f"{prefix}.fc2"),
                "norm": norm(f"{prefix}.final_layer_norm"),
            }
            layers.append({**layer, "feed_forward": ffn})
        return {"layers": layers, "final_norm": None}

    embedding = get("model.shared.weight")
    for name in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight", "lm_head.weight"):
        if name in weights and not np.array_equal(weights[name], embedding):
            raise ModelImportError(f"{path}: {name} differs from model.shared.weight; this model ties them (§3.4)")
    for scope in ("encoder", "decoder"):
        name = f"model.{scope}.embed_positions.weight"
        stored = weights.get(name)  # older checkpoints hold the table
        table = sinusoid_table(len(stored), config.d_model, "halves") if stored is not None else None
        atol = POSITION_ATOL.get((dtypes or {}).get(name), 1e-4)
        if stored is not None and not np.allclose(stored, table, atol=atol):
            raise ModelImportError(f"{path}: model.{scope}.embed_positions.weight are not Marian's sinusoids")
    bias = weights.get("final_logits_bias")
    return {
        "embedding": embedding,  # [V, d_model]
        "output_bias": np.zeros(len(embedding), np.float32) if bias is None else bias.reshape(-1),
        "encoder": stack("encoder", config.encoder_depth, cross=False),
        "decoder": stack("decoder", config.decoder_depth, cross=True),
    }


def import_huggingface(directory: str, model_dir: str, warn: Callable[[str], None] | None = None, **fields) -> str:
    """Import the `MarianMTModel` directory `directory` into the new model dir `model_dir`; returns its
    checkpoint's path. `fields`: `TransformerConfig` fields to override (e.g. max_length)."""
    warn = warn or messages.warn
    files = {name: os.path.join(directory, name) for name in ("config.json", "model.safetensors", "vocab.json")}
    if not os.path.isdir(directory):
        raise ModelImportError(f"no such directory: {directory}")
    if not os.path.isfile(files["model.safetensors"]) and os.path.isfile(os.path.join(directory, "pytorch_model.bin")):
        raise ModelImportError(
            f"{directory} holds pytorch_model.bin, which needs torch to read: save the model as model.safetensors "
            "(MarianMTModel.save_pretrained(..., safe_serialization=True))"
        )
    for name, path in files.items():
        if not os.path.isfile(path):
            raise ModelImportError(f"{directory} has no {name}: not a local MarianMTModel directory")
    with open(files["config.json"], encoding="utf-8") as f:
        values = json.load(f)
    with open(files["vocab.json"], encoding="utf-8") as f:
        rows = json.load(f)
    pieces = {row: piece for piece, row in rows.items()}
    if sorted(pieces) != list(range(len(pieces))):
        raise ModelImportError(f"{files['vocab.json']}: its rows are not 0..{len(pieces) - 1}")
    spms = sentencepiece_models(directory)
    weights, dtypes = read_safetensors(files["model.safetensors"])
    embedding = weights.get("model.shared.weight")
    if embedding is None:
        raise ModelImportError(f"{files['model.safetensors']} has no model.shared.weight: not a MarianMTModel")
    config = transformer_config(values, embedding, files["config.json"], **fields)
    if len(pieces) != config.vocab_size:
        raise ModelImportError(
            f"{files['vocab.json']} has {len(pieces)} pieces, the embeddings {config.vocab_size} rows"
        )
    vocab = vocabulary([pieces[i] for i in range(len(pieces))], spms)
    config = dataclasses.replace(config, vocab_size=vocab.size)
    imported = marian_weights(weights, config, files["model.safetensors"], dtypes)
    return write_model_dir(model_dir, config, imported, vocab, warn)
