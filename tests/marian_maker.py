"""A seeded Marian / OPUS-MT model directory of any size, made here: random weights under Marian's
parameter names, a SentencePiece model trained on the fixture, vocab.yml written by hand, the
options inside the npz as Marian stores them. tests/test_import_marian.py proves the import on the
tiny one (`TINY`) against CTranslate2's own converter; tests/test_readme.py's "Start from a
pretrained model" imports it; bench/pretrained.py times the import and the exports of the base-sized
one (`BASE`, opus-mt-en-de's sizes), and puts tests/ on its path for this module."""

from __future__ import annotations

import dataclasses
import io
import json
import pathlib

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
    layers: int
    vocab_size: int | None = None


TINY = Size(d_model=32, d_ff=64, heads=4, layers=2)
BASE = Size(d_model=512, d_ff=2048, heads=8, layers=6, vocab_size=58101)  # Helsinki-NLP/opus-mt-en-de


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
        "type": "transformer", "dim-emb": size.d_model, "enc-depth": size.layers, "dec-depth": size.layers,
        "transformer-heads": size.heads, "transformer-dim-ffn": size.d_ff, "transformer-ffn-depth": 2,
        "transformer-ffn-activation": activation, "transformer-preprocess": "n" if pre_norm else "",
        "transformer-postprocess": "da" if pre_norm else "dan", "transformer-postprocess-top": "n" if pre_norm else "",
        "transformer-postprocess-emb": "d", "transformer-decoder-autoreg": "self-attention",
        "transformer-no-projection": False, "transformer-guided-alignment-layer": "last", "guided-alignment": "none",
        "tied-embeddings-all": True, "transformer-dropout": 0.1, **extra,
    }  # fmt: skip


def marian_weights(vocab_size, pre_norm, seed=0, size=TINY):
    """Seeded random weights under Marian's names; </s> gets a higher output bias, so that random
    translations end."""
    rng = np.random.default_rng(seed)
    d_model, d_ff = size.d_model, size.d_ff

    def normal(*shape, scale=1.0):
        return rng.normal(scale=scale, size=shape).astype(np.float32)

    weights = {"Wemb": normal(vocab_size, d_model, scale=0.3)}
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
        for i in range(1, size.layers + 1):
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
    directory, spm_bytes, activation="swish", pre_norm=False, options=None, weights=None, size=TINY, target=None
):
    """An OPUS-MT model directory: model.npz (options inside, as Marian stores them), decoder.yml,
    vocab.yml, source.spm and target.spm (the same model, or the SentencePiece model `target`: then
    the vocabulary is the union of both models' pieces)."""
    directory = pathlib.Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    pieces = marian_pieces(spm_bytes, size.vocab_size, target)
    weights = marian_weights(len(pieces), pre_norm, size=size) if weights is None else weights
    options = marian_options(activation, pre_norm, size) if options is None else options
    stored = np.frombuffer(yaml.safe_dump(options).encode() + b"\0", np.int8)
    np.savez(directory / "model.npz", **weights, **{"special:model.yml": stored})
    write_vocab(directory / "vocab.yml", pieces)
    (directory / "decoder.yml").write_text(yaml.safe_dump({"models": ["model.npz"], "vocabs": ["vocab.yml"] * 2}))
    (directory / "source.spm").write_bytes(spm_bytes)
    (directory / "target.spm").write_bytes(target or spm_bytes)
    return directory
