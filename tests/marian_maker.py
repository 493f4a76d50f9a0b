"""A seeded Marian / OPUS-MT model directory of any size, made here: random weights under Marian's
parameter names, a SentencePiece model trained on the fixture, vocab.yml written by hand, the
options inside the npz as Marian stores them; and the same weights as a Hugging Face
`MarianMTModel` directory (`write_huggingface`: safetensors in float32, float16 or bfloat16).
tests/test_import_marian.py proves the import on the tiny one (`TINY`) and on one variant per
layout (`OUTPUT_LAYERS`, `BIG_HEADS`, `UNEQUAL_DEPTHS`, `OPUS_MT_FILES`, no decoder.yml, the
Hugging Face dtypes) against CTranslate2's own converter; tests/test_readme.py's "Start from a
pretrained model" imports it; bench/pretrained.py times the import and the exports of the base-sized
one (`BASE`, opus-mt-en-de's sizes), and puts tests/ on its path for this module."""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib
import struct

import ml_dtypes
import numpy as np
import sentencepiece
import yaml

FIXTURE = pathlib.Path(__file__).resolve().parent / "data" / "fixture_bible.en-de.tsv"


@dataclasses.dataclass(frozen=True)
class Size:
    """A Marian Transformer's sizes; `vocab_size` None: the SentencePiece model's pieces only, else
    as many rows, made-up pieces after the SentencePiece model's (as a real OPUS-MT vocabulary, they
    embed and are output, never produced by encoding)."""

    d_model: int
    d_ff: int
    heads: int
    layers: int  # the encoder's (Marian's enc-depth), and the decoder's unless `decoder_layers`
    vocab_size: int | None = None
    decoder_layers: int | None = None  # dec-depth

    def depth(self, side: str) -> int:
        return self.decoder_layers or self.layers if side == "decoder" else self.layers


TINY = Size(d_model=32, d_ff=64, heads=4, layers=2)
BIG_HEADS = dataclasses.replace(TINY, heads=16)  # transformer-big's 16 heads (OPUS-MT's big models), d_k 2
UNEQUAL_DEPTHS = dataclasses.replace(TINY, layers=3, decoder_layers=1)  # enc-depth 3, dec-depth 1
BASE = Size(d_model=512, d_ff=2048, heads=8, layers=6, vocab_size=58101)  # Helsinki-NLP/opus-mt-en-de

# How the output layer (Marian's `decoder_ff_logit_out`, `mlp::Output`) is stored, the ways CTranslate2's
# converter reads: none (--tied-embeddings-all: the embedding is the output layer), the embedding
# itself as `_Wt` [V, d_model] or transposed as `_W` [d_model, V], or a matrix of its own (untied,
# trained without --tied-embeddings) in either layout.
OUTPUT_LAYERS = ("tied", "Wt", "W", "untied-Wt", "untied-W")


@dataclasses.dataclass(frozen=True)
class Files:
    """The names of a Marian directory's files; `decoder_yml` False: no decoder.yml."""

    weights: str = "model.npz"
    vocab: str = "vocab.yml"
    decoder_yml: bool = True


# The names a real OPUS-MT release gives (e.g. opus-2020-02-11's en-ru zip: its decoder.yml names them).
OPUS_MT_FILES = Files(
    weights="opus.spm32k-spm32k.transformer-align.model1.npz.best-perplexity.npz", vocab="opus.spm32k-spm32k.vocab.yml"
)


def fixture_lines():
    lines = FIXTURE.read_text(encoding="utf-8").splitlines()
    return [line.split("\t")[0] for line in lines], [line.split("\t")[1] for line in lines]


def opus_mt_spm(texts, vocab_size=250) -> bytes:
    """A SentencePiece model of `texts` as OPUS-MT's are made (unk 0, bos 1, eos 2, no pad)."""
    model = io.BytesIO()
    sentencepiece.set_random_generator_seed(0)
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=model, vocab_size=vocab_size, model_type="unigram",
        character_coverage=1.0, num_threads=1, minloglevel=2,
    )  # fmt: skip
    return model.getvalue()


def fixture_spm() -> bytes:
    """A joint SentencePiece model of the fixture's two sides."""
    sources, targets = fixture_lines()
    return opus_mt_spm(sources + targets)


def marian_pieces(spm_bytes, vocab_size=None, target=None):
    """OPUS-MT's vocabulary layout: </s> 0, <unk> 1, then the SentencePiece model's pieces (and those
    of the target side's model `target` that it lacks; then made-up ones up to `vocab_size`)."""
    pieces = {}  # in order, each once
    for model in (spm_bytes, target) if target else (spm_bytes,):
        processor = sentencepiece.SentencePieceProcessor(model_proto=model)
        pieces.update(dict.fromkeys(processor.id_to_piece(i) for i in range(processor.get_piece_size())))
    pieces = ["</s>", "<unk>", *(piece for piece in pieces if piece not in ("<unk>", "<s>", "</s>"))]
    return pieces + [f"▁made{i}" for i in range(len(pieces), vocab_size or len(pieces))]


def write_vocab(path, pieces):
    """vocab.yml as Marian writes it: `piece: row`, quoted where YAML needs it (here: all but letters)."""
    with open(path, "w", encoding="utf-8") as f:
        for i, piece in enumerate(pieces):
            plain = piece.replace("▁", "").isalpha()
            f.write(f"{piece if plain else json.dumps(piece, ensure_ascii=False)}: {i}\n")


def marian_options(activation, pre_norm, size=TINY, **extra):
    return {
        "type": "transformer", "dim-emb": size.d_model, "enc-depth": size.layers, "dec-depth": size.depth("decoder"),
        "transformer-heads": size.heads, "transformer-dim-ffn": size.d_ff, "transformer-ffn-depth": 2,
        "transformer-ffn-activation": activation, "transformer-preprocess": "n" if pre_norm else "",
        "transformer-postprocess": "da" if pre_norm else "dan", "transformer-postprocess-top": "n" if pre_norm else "",
        "transformer-postprocess-emb": "d", "transformer-decoder-autoreg": "self-attention",
        "transformer-no-projection": False, "transformer-guided-alignment-layer": "last", "guided-alignment": "none",
        "tied-embeddings-all": True, "transformer-dropout": 0.1, **extra,
    }  # fmt: skip


def marian_weights(vocab_size, pre_norm, seed=0, size=TINY, output="tied"):
    """Seeded random weights under Marian's names, the output layer stored as `output` says (one of
    `OUTPUT_LAYERS`); </s> gets a higher output bias, so that random translations end."""
    rng = np.random.default_rng(seed)
    d_model, d_ff = size.d_model, size.d_ff

    def normal(*shape, scale=1.0):
        return rng.normal(scale=scale, size=shape).astype(np.float32)

    assert output in OUTPUT_LAYERS, output
    weights = {"Wemb": normal(vocab_size, d_model, scale=0.3)}
    if output != "tied":
        own = np.random.default_rng(seed + 1).normal(scale=0.3, size=(vocab_size, d_model)).astype(np.float32)
        matrix = own if output.startswith("untied") else weights["Wemb"]  # [V, d_model]
        if output.endswith("Wt"):
            weights["decoder_ff_logit_out_Wt"] = matrix.copy()  # [V, d_model]
        else:
            weights["decoder_ff_logit_out_W"] = matrix.T.copy()  # [d_model, V]
    bias = normal(1, vocab_size, scale=0.2)
    bias[0, 0] += 4.5 if pre_norm else 6.0  # </s>
    weights["decoder_ff_logit_out_b"] = bias
    suffix = "_pre" if pre_norm else ""

    def norm(scope):
        weights[f"{scope}_ln_scale{suffix}"] = 1.0 + normal(1, d_model, scale=0.1)
        weights[f"{scope}_ln_bias{suffix}"] = normal(1, d_model, scale=0.1)

    def attention(scope):
        for name in "qkvo":
            weights[f"{scope}_W{name}"] = normal(d_model, d_model, scale=2 * d_model**-0.5)
            weights[f"{scope}_b{name}"] = normal(1, d_model, scale=0.1)
        norm(f"{scope}_Wo")

    for side in ("encoder", "decoder"):
        for i in range(1, size.depth(side) + 1):
            attention(f"{side}_l{i}_self")
            if side == "decoder":
                attention(f"{side}_l{i}_context")
            scope = f"{side}_l{i}_ffn"
            weights[f"{scope}_W1"] = normal(d_model, d_ff, scale=d_model**-0.5)
            weights[f"{scope}_b1"] = normal(1, d_ff, scale=0.1)
            weights[f"{scope}_W2"] = normal(d_ff, d_model, scale=d_ff**-0.5)
            weights[f"{scope}_b2"] = normal(1, d_model, scale=0.1)
            norm(f"{scope}_ffn")
        if pre_norm:
            weights[f"{side}_top_ln_scale"] = 1.0 + normal(1, d_model, scale=0.1)
            weights[f"{side}_top_ln_bias"] = normal(1, d_model, scale=0.1)
    return weights


def write_marian(
    directory,
    spm_bytes,
    activation="swish",
    pre_norm=False,
    options=None,
    weights=None,
    size=TINY,
    target=None,
    output="tied",
    files=Files(),
):
    """An OPUS-MT model directory: the weights (options inside, as Marian stores them; the output
    layer as `output` says), decoder.yml (as OPUS-MT's releases write it; none if `files` says so),
    the vocabulary, source.spm and target.spm (the same model, or the SentencePiece model `target`:
    then the vocabulary is the union of both models' pieces), under the names `files` gives."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    pieces = marian_pieces(spm_bytes, size.vocab_size, target)
    weights = marian_weights(len(pieces), pre_norm, size=size, output=output) if weights is None else weights
    options = marian_options(activation, pre_norm, size) if options is None else options
    stored = np.frombuffer(yaml.safe_dump(options).encode() + b"\0", np.int8)
    with open(directory / files.weights, "wb") as f:  # np.savez would append ".npz" to a name that ends otherwise
        np.savez(f, **weights, **{"special:model.yml": stored})
    write_vocab(directory / files.vocab, pieces)
    if files.decoder_yml:
        (directory / "decoder.yml").write_text(opus_mt_decoder_yml(files))
    (directory / "source.spm").write_bytes(spm_bytes)
    (directory / "target.spm").write_bytes(target or spm_bytes)
    return directory


def opus_mt_decoder_yml(files):
    """decoder.yml as OPUS-MT's releases write it (Marian's training writes it; the release sets the
    decoding options and `relative-paths: true`): the model and the vocabulary twice, source and target."""
    return (
        f"models:\n  - {files.weights}\nvocabs:\n  - {files.vocab}\n  - {files.vocab}\nbeam-size: 6\nnormalize: 0.6\n"
        "word-penalty: 0\nmini-batch: 1\nmaxi-batch: 1\nmaxi-batch-sort: src\nrelative-paths: true\n"
    )


# --- the same weights as a Hugging Face MarianMTModel directory --------------------------------------

SAFETENSORS_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16}


def stored_as(weights, dtype):
    """`weights` as float32 after a round trip through the safetensors dtype `dtype` (the Marian model
    of the values that a `dtype` file holds)."""
    kind = SAFETENSORS_DTYPES[dtype]
    return {name: np.asarray(value).astype(kind).astype(np.float32) for name, value in weights.items()}


def write_safetensors(path, tensors, dtype="F32"):
    """A safetensors file of `tensors`, each stored as `dtype` (F32, F16, or BF16 rounded by ml_dtypes),
    by its format (huggingface/safetensors' README): an 8-byte little-endian header length, the JSON
    header, the raw little-endian data."""
    kind = np.dtype(SAFETENSORS_DTYPES[dtype]).newbyteorder("<")
    header, blobs, offset = {}, [], 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(np.asarray(array, np.float32).astype(kind)).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    encoded = json.dumps(header).encode()
    pathlib.Path(path).write_bytes(struct.pack("<Q", len(encoded)) + encoded + b"".join(blobs))


def hf_positions(length, dim):
    """transformers' `MarianSinusoidalPositionalEmbedding._init_weight` table."""
    angles = np.array([[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(length)])
    return np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)


def write_huggingface(directory, spm_bytes, marian, target=None, size=TINY, dtype="F32"):
    """A MarianMTModel directory of the Marian weights `marian` (tied, post-LN, of `size`), as
    transformers' conversion script (`convert_marian_to_pytorch.py`) writes it and `save_pretrained`
    saves a model cast to `dtype` (`model.to(torch.bfloat16)` casts every tensor, the position table
    and `final_logits_bias` too): a zero <pad> row last (the decoder's start), torch layout [out, in],
    Hugging Face's names; target.spm: `target` where given (as `write_marian`)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True)
    pieces = marian_pieces(spm_bytes, target=target)
    pad = len(pieces)
    shared = np.concatenate([marian["Wemb"], np.zeros((1, size.d_model), np.float32)])
    tensors = {
        "model.shared.weight": shared,
        "lm_head.weight": shared,
        "final_logits_bias": np.concatenate([marian["decoder_ff_logit_out_b"], [[0.0]]], axis=1),
        "model.encoder.embed_positions.weight": hf_positions(512, size.d_model),
    }
    for side in ("encoder", "decoder"):
        for i in range(size.depth(side)):
            ours, theirs = f"{side}_l{i + 1}", f"model.{side}.layers.{i}"
            attentions = [("self", "self_attn")] + ([("context", "encoder_attn")] if side == "decoder" else [])
            for scope, name in attentions:
                for q in "qkvo":
                    projection = "out_proj" if q == "o" else f"{q}_proj"
                    tensors[f"{theirs}.{name}.{projection}.weight"] = marian[f"{ours}_{scope}_W{q}"].T
                    tensors[f"{theirs}.{name}.{projection}.bias"] = marian[f"{ours}_{scope}_b{q}"].reshape(-1)
                tensors[f"{theirs}.{name}_layer_norm.weight"] = marian[f"{ours}_{scope}_Wo_ln_scale"].reshape(-1)
                tensors[f"{theirs}.{name}_layer_norm.bias"] = marian[f"{ours}_{scope}_Wo_ln_bias"].reshape(-1)
            for k in "12":
                tensors[f"{theirs}.fc{k}.weight"] = marian[f"{ours}_ffn_W{k}"].T
                tensors[f"{theirs}.fc{k}.bias"] = marian[f"{ours}_ffn_b{k}"].reshape(-1)
            tensors[f"{theirs}.final_layer_norm.weight"] = marian[f"{ours}_ffn_ffn_ln_scale"].reshape(-1)
            tensors[f"{theirs}.final_layer_norm.bias"] = marian[f"{ours}_ffn_ffn_ln_bias"].reshape(-1)
    write_safetensors(directory / "model.safetensors", tensors, dtype)
    config = {
        "model_type": "marian", "d_model": size.d_model, "encoder_layers": size.layers,
        "decoder_layers": size.depth("decoder"), "encoder_attention_heads": size.heads,
        "decoder_attention_heads": size.heads, "encoder_ffn_dim": size.d_ff, "decoder_ffn_dim": size.d_ff,
        "activation_function": "swish", "scale_embedding": True, "vocab_size": pad + 1, "pad_token_id": pad,
        "decoder_start_token_id": pad, "max_position_embeddings": 512, "share_encoder_decoder_embeddings": True,
        "dropout": 0.1, "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[dtype],
    }  # fmt: skip
    (directory / "config.json").write_text(json.dumps(config))
    vocab = {piece: i for i, piece in enumerate([*pieces, "<pad>"])}
    (directory / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (directory / "source.spm").write_bytes(spm_bytes)
    (directory / "target.spm").write_bytes(target or spm_bytes)
    return directory
