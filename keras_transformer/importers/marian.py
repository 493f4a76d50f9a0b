"""`keras-transformer import --from marian DIR`: a Marian / OPUS-MT model as a model directory.

An OPUS-MT directory (Tiedemann & Thottingal, 2020) holds a Marian model (Junczys-Dowmunt et al.,
2018): the weights, `*.npz`, with the training options inside as `special:model.yml`; `decoder.yml`,
which names the weights and the vocabularies; the vocabulary, `vocab.yml` or `*.vocab.yml` (piece:
row); and the SentencePiece models `source.spm` and `target.spm` (one model, or each side its own
over the one vocabulary: the tokenizer's two sides, `importers.common`). The weight names are Marian's,
as CTranslate2's converter reads them (`ctranslate2/converters/marian.py`): `Wemb` (or
`encoder_Wemb` / `decoder_Wemb`), `{encoder,decoder}_l{i}_{self,context,ffn}_*`, `*_top_ln_*`
(pre-LN), `decoder_ff_logit_out_b`, and the output layer as CTranslate2 reads it:
`decoder_ff_logit_out_W` [d_model, V], else `decoder_ff_logit_out_Wt` [V, d_model], else the
embedding (what `--tied-embeddings-all` stores: none). Every tensor of the .npz must be read (but
Marian's `special:` items, the options): one that is not is refused by name, since the model would
be imported without it.

A Marian Transformer is ours with its options (`TransformerConfig`): post-LN ("dan") or pre-LN
("n" / "da" / top "n"), ReLU or swish, the output bias, a decoder that starts from a zero vector,
and its sinusoids, sines then cosines at tensor2tensor's frequencies (Marian's
`sinusoidalPositionEmbeddings`; CTranslate2's converter and Hugging Face use the paper's
frequencies instead, `sinusoid_layout="halves"`), with Marian's LayerNorm epsilon (1e-9, its
`layerNorm` default). Refused, in one line each: what is no Transformer (an RNN), a factored
vocabulary, separate source and target embeddings or vocabularies (ours share one, §3.4), an
output layer apart from the embedding (untied; ours is the embedding, §3.4), learned positions,
layer-normed embeddings and average attention. A guided-alignment head is trained alignment, not a
layer: dropped, with a warning.
"""

from __future__ import annotations

import dataclasses
import glob
import os
from collections.abc import Callable

import numpy as np
import yaml

from keras_transformer import messages
from keras_transformer.config import FFN_ACTIVATIONS, TransformerConfig
from keras_transformer.importers.common import ModelImportError, sentencepiece_models, vocabulary, write_model_dir

MARIAN_LAYER_NORM_EPSILON = 1e-9  # Marian's `layerNorm(x, gamma, beta, eps = 1e-9)`
DEFAULT_MAX_LENGTH = 512  # positions of the sinusoid table (Hugging Face's max_position_embeddings for OPUS-MT)
SPECIAL = "special:"  # Marian's prefix of the .npz items that are no parameter (`special:model.yml`)
OUTPUT_LAYER = "decoder_ff_logit_out"  # Marian's output layer (`mlp::Output`): `_W`, `_Wt` or none, and `_b`
PRE_LN = ("n", "da", "n")  # transformer-preprocess, -postprocess, -postprocess-top
POST_LN = ("", "dan", "")


def _one(directory: str, pattern: str, what: str) -> str:
    found = sorted(glob.glob(os.path.join(glob.escape(directory), pattern)))
    if len(found) != 1:
        have = f"{len(found)} ({', '.join(map(os.path.basename, found))})" if found else "none"
        raise ModelImportError(
            f"{directory} must hold one {what} ({pattern}), it holds {have}; a decoder.yml names them"
        )
    return found[0]


def marian_files(directory: str) -> tuple[str, list[str]]:
    """(the weights' path, the vocabularies' paths, source then target) of a Marian model directory:
    as its decoder.yml names them (relative to it, as OPUS-MT's `relative-paths: true` and CTranslate2's
    `OpusMTConverter` read them), else its one `*.npz` and its one `vocab.yml` or `*.vocab.yml` (the
    paths one gives CTranslate2's `MarianConverter`; its `OpusMTConverter` needs a decoder.yml)."""
    if not os.path.isdir(directory):
        raise ModelImportError(f"no such directory: {directory}")
    decoder = os.path.join(directory, "decoder.yml")
    if os.path.isfile(decoder):
        with open(decoder, encoding="utf-8") as f:
            try:
                values = yaml.safe_load(f) or {}
            except yaml.YAMLError:
                raise ModelImportError(f"{decoder} is not YAML") from None
        if not isinstance(values, dict) or not values.get("models") or not values.get("vocabs"):
            raise ModelImportError(f"{decoder} names no models or no vocabs")
        if len(values["models"]) > 1:
            raise ModelImportError(f"{decoder} names an ensemble of {len(values['models'])} models: import each alone")
        names = [str(name) for name in (values["models"][0], *values["vocabs"])]
        for name in names:
            if not os.path.isfile(os.path.join(directory, name)):
                raise ModelImportError(f"{decoder} names {name}, which {directory} does not hold")
        return os.path.join(directory, names[0]), [os.path.join(directory, name) for name in names[1:]]
    weights = _one(directory, "*.npz", "weights file")
    vocab = os.path.join(directory, "vocab.yml")
    return weights, [vocab if os.path.isfile(vocab) else _one(directory, "*.vocab.yml", "vocabulary")]


def read_vocab(path: str) -> list[str]:
    """The pieces of a Marian vocabulary (`piece: row` lines of YAML), by row. Read line by line, as
    CTranslate2's `load_vocab` does: a YAML loader would read pieces such as `yes`, `null` or `1` as
    other types and merge them."""
    if path.endswith(".fsv"):
        raise ModelImportError(f"{path} is a factored vocabulary: factors cannot be imported")
    if not path.endswith((".yml", ".yaml")):
        raise ModelImportError(f"{path} is not a YAML vocabulary (.yml)")
    rows, key = {}, None
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line:
                continue
            if line.startswith("? "):  # a complex key: "? piece" then ": row"
                key = line[2:]
                continue
            piece, _, row = (key, ":", line[2:]) if key is not None else line.rpartition(":")
            key = None
            try:
                rows[int(row.strip())] = _unquote(piece)
            except ValueError:
                raise ModelImportError(f"{path}:{number}: not a 'piece: row' line: {line!r}") from None
    if sorted(rows) != list(range(len(rows))):
        raise ModelImportError(f"{path}: its rows are not 0..{len(rows) - 1}")
    return [rows[i] for i in range(len(rows))]


def _unquote(piece: str) -> str:
    """A YAML scalar as written in a Marian vocabulary: "double-quoted" (with escapes), 'single' or plain."""
    if len(piece) >= 2 and piece[0] == piece[-1] == '"':
        return yaml.safe_load(piece)
    if len(piece) >= 2 and piece[0] == piece[-1] == "'":
        return piece[1:-1].replace("''", "'")
    return piece


def model_options(weights: dict, path: str) -> dict:
    """The training options stored in a Marian model (`special:model.yml`: YAML bytes, NUL-ended)."""
    if "special:model.yml" not in weights:
        raise ModelImportError(f"{path} holds no special:model.yml: not a Marian model")
    text = np.asarray(weights["special:model.yml"]).tobytes().rstrip(b"\0")
    return yaml.safe_load(text) or {}


def transformer_config(options: dict, weights: dict, path: str, **fields) -> TransformerConfig:
    """Our config of a Marian Transformer of `options`, `fields` overriding; refuses what ours cannot be."""

    def refuse(condition: bool, message: str) -> None:
        if condition:
            raise ModelImportError(f"{path}: {message}")

    kind = options.get("type", "transformer")
    refuse(kind != "transformer", f"a Marian {kind!r} model is not a Transformer: only type transformer imports")
    refuse(bool(options.get("factors-dim-emb") or options.get("lemma-dim-emb")), "factored vocabularies do not import")
    refuse(bool(options.get("right-left")), "a right-to-left decoder does not import")
    autoregression = options.get("transformer-decoder-autoreg", "self-attention")
    refuse(autoregression != "self-attention", f"--transformer-decoder-autoreg {autoregression} does not import")
    refuse(bool(options.get("transformer-no-projection")), "--transformer-no-projection does not import")
    refuse(options.get("transformer-ffn-depth", 2) != 2, "only 2-layer feed-forward networks import (Eq. 2)")
    refuse(bool(options.get("transformer-tied-layers")), "--transformer-tied-layers does not import")
    refuse(
        bool(options.get("transformer-train-position-embeddings")) or "Wpos" in weights,
        "learned positions do not import",
    )
    refuse("n" in options.get("transformer-postprocess-emb", "d"), "layer-normed embeddings do not import")
    activation = options.get("transformer-ffn-activation", "swish")
    refuse(
        activation not in FFN_ACTIVATIONS, f"--transformer-ffn-activation {activation} does not import (relu, swish)"
    )
    layout = tuple(options.get(k, "") for k in ("transformer-preprocess", "transformer-postprocess"))
    layout += (options.get("transformer-postprocess-top", ""),)
    refuse(
        layout not in (PRE_LN, POST_LN),
        f"preprocess/postprocess/postprocess-top {layout} is neither post-LN nor pre-LN",
    )
    embedding = _embedding(weights, path)
    encoder_depth, decoder_depth = options.get("enc-depth", 6), options.get("dec-depth", 6)
    return TransformerConfig(
        **{
            "vocab_size": embedding.shape[0],
            "num_layers": encoder_depth,
            "num_decoder_layers": None if decoder_depth == encoder_depth else decoder_depth,
            "d_model": embedding.shape[1],
            "d_ff": _get(weights, "encoder_l1_ffn_W1", path).shape[1],
            "num_heads": options.get("transformer-heads", 8),
            "dropout": float(options.get("transformer-dropout", 0.1)),
            "max_length": DEFAULT_MAX_LENGTH,
            "layer_norm_epsilon": MARIAN_LAYER_NORM_EPSILON,
            "norm_first": layout == PRE_LN,
            "ffn_activation": activation,
            "sinusoid_layout": "tensor2tensor",
            "output_bias": True,
            "start_from_zero_embedding": True,
            **fields,
        }
    )


def _get(weights: dict, name: str, path: str) -> np.ndarray:
    if name not in weights:
        raise ModelImportError(f"{path} has no weight {name}: not a Marian Transformer of its options")
    return np.asarray(weights[name], np.float32)


def _embedding(weights: dict, path: str) -> np.ndarray:
    """The one embedding matrix [V, d_model]: `Wemb`, or `encoder_Wemb` and `decoder_Wemb` if equal."""
    if "Wemb" in weights:
        return _get(weights, "Wemb", path)
    source, target = _get(weights, "encoder_Wemb", path), _get(weights, "decoder_Wemb", path)
    if source.shape != target.shape or not np.array_equal(source, target):
        raise ModelImportError(
            f"{path} has separate source and target embeddings (no --tied-embeddings-all): "
            "this model shares one matrix (§3.4)"
        )
    return target


class _Reads(dict):
    """A Marian model's tensors by name, remembering each one read through `[]` (`unread`)."""

    def __init__(self, tensors: dict):
        super().__init__(tensors)
        self.read = set()

    def __getitem__(self, name: str):
        self.read.add(name)
        return super().__getitem__(name)

    def unread(self) -> list[str]:
        """The parameters never read (Marian's `special:` items are none)."""
        return sorted(name for name in self if name not in self.read and not name.startswith(SPECIAL))


def marian_weights(weights: dict, config: TransformerConfig, path: str) -> dict:
    """The weights of a Marian Transformer laid out as `model_variables` (rows in Marian's order).
    Refuses a model with a tensor it does not read (a layer more than the options say, a post-LN
    model's pre-LN norms, both `_W` and `_Wt` of one layer, ...): imported without it, the model
    would compute something else."""
    weights = _Reads(weights)

    def get(name):
        return _get(weights, name, path)

    def dense(scope, suffix):
        kernel = get(f"{scope}_W{suffix}") if f"{scope}_W{suffix}" in weights else get(f"{scope}_Wt{suffix}").T
        return kernel, get(f"{scope}_b{suffix}").reshape(-1)  # [in, out], [out]

    def norm(scope):
        suffix = "_pre" if config.norm_first else ""
        return get(f"{scope}_ln_scale{suffix}").reshape(-1), get(f"{scope}_ln_bias{suffix}").reshape(-1)

    def attention(scope):
        key, value = dense(scope, "k"), dense(scope, "v")
        fused = np.concatenate([key[0], value[0]], axis=1), np.concatenate([key[1], value[1]])  # W^K|W^V
        return {
            "query": dense(scope, "q"),
            "key_value": fused,
            "output": dense(scope, "o"),
            "norm": norm(f"{scope}_Wo"),
        }

    def feed_forward(scope):
        return {
            "inner": dense(f"{scope}_ffn", "1"),
            "outer": dense(f"{scope}_ffn", "2"),
            "norm": norm(f"{scope}_ffn_ffn"),
        }

    def stack(scope, depth, cross):
        layers = []
        for i in range(1, depth + 1):
            layer = {"self_attention": attention(f"{scope}_l{i}_self")}
            if cross:
                layer["cross_attention"] = attention(f"{scope}_l{i}_context")
            layers.append({**layer, "feed_forward": feed_forward(f"{scope}_l{i}")})
        final = (
            (get(f"{scope}_top_ln_scale").reshape(-1), get(f"{scope}_top_ln_bias").reshape(-1))
            if config.norm_first
            else None
        )
        return {"layers": layers, "final_norm": final}

    embedding = _embedding(weights, path)
    _check_tied_output(weights, embedding, path)
    bias = f"{OUTPUT_LAYER}_b"
    imported = {
        "embedding": embedding,  # [V_marian, d_model]
        "output_bias": get(bias).reshape(-1) if bias in weights else np.zeros(len(embedding), np.float32),
        "encoder": stack("encoder", config.encoder_depth, cross=False),
        "decoder": stack("decoder", config.decoder_depth, cross=True),
    }
    unread = weights.unread()
    if unread:
        more = f" and {len(unread) - 3} more" if len(unread) > 3 else ""
        raise ModelImportError(
            f"{path} holds {len(unread)} tensor(s) that a Marian Transformer of its options does not have: "
            f"{', '.join(unread[:3])}{more}"
        )
    return imported


def _check_tied_output(weights: dict, embedding: np.ndarray, path: str) -> None:
    """Refuses an output layer apart from the embedding (ours is the embedding, §3.4). Read as
    CTranslate2's converter reads it (`set_linear(..., reuse_weight=embeddings)`): `_W` [d_model, V]
    (Marian's `mlp::Output` without tied embeddings), else `_Wt` [V, d_model], else none, the
    embedding (what `--tied-embeddings` and `--tied-embeddings-all` store)."""
    for suffix, layout in (("_W", np.transpose), ("_Wt", np.asarray)):
        name = OUTPUT_LAYER + suffix
        if name in weights:
            projection = layout(_get(weights, name, path))  # [V, d_model]
            if projection.shape != embedding.shape or not np.array_equal(projection, embedding):
                raise ModelImportError(
                    f"{path} has an output layer apart from its embeddings ({name}, trained without "
                    "--tied-embeddings): this model ties them (§3.4)"
                )
            return


def import_marian(directory: str, model_dir: str, warn: Callable[[str], None] | None = None, **fields) -> str:
    """Import the Marian / OPUS-MT model in `directory` into the new model dir `model_dir`; returns
    its checkpoint's path. `fields`: `TransformerConfig` fields to override, e.g. `sinusoid_layout`
    "halves", the positions that CTranslate2's converter and Hugging Face's port give the same
    weights (Marian's own are "tensor2tensor"), or `max_length`. Warnings (dropped alignment,
    vocabulary pieces one side lacks) go through `warn` (default stderr)."""
    warn = warn or messages.warn
    path, vocabs = marian_files(directory)
    try:
        with np.load(path) as npz:
            weights = {name: npz[name] for name in npz.files}
    except (OSError, ValueError) as error:
        raise ModelImportError(f"cannot read {path}: {error}") from None
    options = model_options(weights, path)
    pieces = [read_vocab(vocab) for vocab in vocabs]
    if any(other != pieces[0] for other in pieces[1:]):
        raise ModelImportError(
            f"{' and '.join(vocabs)} differ: separate source and target vocabularies do not import (ours is one)"
        )
    spms = sentencepiece_models(directory)
    config = transformer_config(options, weights, path, **fields)
    if len(pieces[0]) != config.vocab_size:
        raise ModelImportError(f"{vocabs[0]} has {len(pieces[0])} pieces, {path}'s embeddings {config.vocab_size} rows")
    guided = options.get("guided-alignment", "none")
    if guided not in (None, "", "none"):
        layer = options.get("transformer-guided-alignment-layer", "last")
        warn(f"the guided-alignment head (layer {layer}) is dropped: it trained one attention head to align words")
    vocab = vocabulary(pieces[0], spms)
    config = dataclasses.replace(config, vocab_size=vocab.size)
    return write_model_dir(model_dir, config, marian_weights(weights, config, path), vocab, warn)
