"""`keras-transformer export --format ctranslate2`: a trained model as a CTranslate2 model.

CTranslate2 (OpenNMT's C++ inference engine, PyPI `ctranslate2`) runs this architecture
exactly (Vaswani et al., 2017, §3): its `TransformerSpec` with our encoder and decoder depths,
h, ReLU (Eq. 2) or swish, post-LN or pre-LN and our layer-norm epsilon, the shared embedding
matrix (§3.4) as the source and target embeddings (times sqrt(d_model)) and as the pre-softmax
projection (with our output bias, if any), our sinusoid table (§3.5, in its layout) set
explicitly, and the decoder's zero start embedding (`start_from_zero_embedding`, Marian's) where
the model has it. Greedy outputs equal ours token for token (tests/test_ctranslate2.py).

    OUT/model.bin               the weights (float32, or `quantization`'s type)
    OUT/config.json             special tokens, layer-norm epsilon, add_source_eos
    OUT/shared_vocabulary.json  token strings; the i-th is our id i
    OUT/tokenizer.model         the SentencePiece model: text -> tokens, tokens -> text
    OUT/tokenizer.target.model  a model of two SentencePiece models (OPUS-MT's): the target side's,
                                tokens -> text (tokenizer.model: the source side's, text -> tokens)
    OUT/vmap.txt                with the model dir's vocabulary shortlist (by default): CTranslate2's
                                vocabulary map of it, which `translate_batch(..., use_vmap=True)`
                                searches over (`vocabulary_map`)

CTranslate2 works on token strings. The vocabulary is the SentencePiece pieces, except that
the pad id is named `<blank>` (CTranslate2's fixed pad name); the start and EOS pieces are
the config's bos/eos tokens, and CTranslate2 appends EOS to every source (`add_source_eos`),
as our `Translator` does. A bias of -inf at pad and start on the output projection keeps
CTranslate2 from generating them, as our search never does (`never_generated_bias`).

Not exported: the search. CTranslate2's `length_penalty` divides a hypothesis's log-probability
by |y|^alpha; ours is GNMT's ((5 + |y|) / 6)^alpha (`search.length_penalty`), so beam search
can rank hypotheses differently; greedy decoding has no length penalty and agrees.
"""

from __future__ import annotations

import os
import tempfile

import numpy as np
import sentencepiece

from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID, UNK_ID, never_generated
from keras_transformer.weight_names import model_variables

PAD_TOKEN = "<blank>"  # CTranslate2's name for the padding token (not configurable)
EXTRA = "ctranslate2"  # pyproject.toml's extra that installs the package


class CTranslate2ExportError(ValueError):
    """A CTranslate2 export that cannot be made."""


def _ctranslate2():
    try:
        import ctranslate2
    except ImportError:
        raise CTranslate2ExportError(
            f"the CTranslate2 export needs the ctranslate2 package: pip install 'keras-aiayn[{EXTRA}]'"
        ) from None
    return ctranslate2


def _numpy(tree):
    """`tree` (nested dicts, lists and tuples of variables, or None) with each variable as a NumPy array."""
    if isinstance(tree, dict):
        return {key: _numpy(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(_numpy(value) for value in tree)
    return None if tree is None else tree.numpy()


def model_weights(model) -> dict:
    """`model_variables` as NumPy arrays, and "positions", the sinusoid table [max_length, d_model]."""
    return {**_numpy(model_variables(model)), "positions": model.positional_encoding.table}


def _set_linear(spec, *denses: tuple[np.ndarray, np.ndarray]) -> None:
    """One CTranslate2 linear layer from one or more Dense layers fused along their outputs,
    in PyTorch layout: weight [out, in], bias [out]."""
    kernel = np.concatenate([kernel for kernel, _ in denses], axis=1)  # [in, sum(out)]
    spec.weight = np.ascontiguousarray(kernel.T, dtype=np.float32)  # [sum(out), in]
    spec.bias = np.concatenate([bias for _, bias in denses]).astype(np.float32)  # [sum(out)]


def _set_norm(spec, norm: tuple[np.ndarray, np.ndarray]) -> None:
    spec.gamma, spec.beta = (np.asarray(value, np.float32) for value in norm)


def _set_attention(spec, weights: dict, self_attention: bool) -> None:
    """Self-attention: linear[0] = W^Q|W^K|W^V fused, linear[1] = W^O.
    Cross-attention: linear[0] = W^Q, linear[1] = W^K|W^V fused, linear[2] = W^O."""
    if self_attention:
        _set_linear(spec.linear[0], weights["query"], weights["key_value"])
    else:
        _set_linear(spec.linear[0], weights["query"])
        _set_linear(spec.linear[1], weights["key_value"])
    _set_linear(spec.linear[-1], weights["output"])
    _set_norm(spec.layer_norm, weights["norm"])


def _set_feed_forward(spec, weights: dict) -> None:
    _set_linear(spec.linear_0, weights["inner"])
    _set_linear(spec.linear_1, weights["outer"])
    _set_norm(spec.layer_norm, weights["norm"])


def _set_stack(spec, weights: dict, embedding: np.ndarray, positions: np.ndarray) -> None:
    """An encoder or decoder stack: embeddings scaled by sqrt(d_model), our sinusoid table, its layers."""
    for embeddings in spec.embeddings if isinstance(spec.embeddings, list) else [spec.embeddings]:
        embeddings.weight = embedding
    spec.scale_embeddings = True
    spec.position_encodings.encodings = positions
    for layer_spec, layer in zip(spec.layer, weights["layers"]):
        _set_attention(layer_spec.self_attention, layer["self_attention"], self_attention=True)
        if "cross_attention" in layer:
            _set_attention(layer_spec.attention, layer["cross_attention"], self_attention=False)
        _set_feed_forward(layer_spec.ffn, layer["feed_forward"])
    if weights["final_norm"] is not None:
        _set_norm(spec.layer_norm, weights["final_norm"])


def never_generated_bias(config) -> np.ndarray:
    """[V] float32: 0, and -inf at the ids our search never generates (`special_tokens.never_generated`).

    CTranslate2 would emit them: a bias on the projection bans them inside the model. It comes
    before the softmax, where ours masks after the log-softmax, so CTranslate2's log-probabilities
    are renormalised over the other tokens (higher by -log(1 - p(pad) - p(start))); the argmax is the same.
    """
    bias = np.zeros(config.vocab_size, np.float32)
    bias[list(never_generated())] = -np.inf
    return bias


def vocabulary(tokenizer, config) -> list[str]:
    """The token strings of the CTranslate2 model: the i-th is our id i (SentencePiece's piece),
    with the pad id named `PAD_TOKEN`."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    tokens = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    if PAD_TOKEN in tokens:
        raise CTranslate2ExportError(f"the tokenizer has a piece {PAD_TOKEN!r}, CTranslate2's name for the pad token")
    tokens[PAD_ID] = PAD_TOKEN
    return tokens


def vocabulary_map(shortlist, tokens: list[str]) -> str:
    """CTranslate2's vocabulary map (`vmap.txt`) of a vocabulary shortlist (`data/shortlist.py`): a
    line `source token<TAB>its target tokens` per source token with targets, and the frequent
    targets on the line of the empty source, which CTranslate2 keeps for every batch (with unk,
    bos and eos). `use_vmap` then searches over the union of a batch's lines, as our search does
    over the union of its shortlists (`search/shortlist.py`)."""
    spaced = [token for token in tokens if token != token.strip() or any(c in token for c in " \t\n")]
    if spaced:
        raise CTranslate2ExportError(f"CTranslate2's vocabulary map cannot hold tokens with whitespace: {spaced[:3]}")
    table, frequent = np.asarray(shortlist.table), np.asarray(shortlist.frequent)
    lines = ["\t" + " ".join(tokens[t] for t in frequent)]
    for source, row in enumerate(table):
        targets = [tokens[t] for t in row if t != PAD_ID]
        if targets:
            lines.append(tokens[source] + "\t" + " ".join(targets))
    return "\n".join(lines) + "\n"


def transformer_spec(model, tokens: list[str]):
    """The `ctranslate2.specs.TransformerSpec` of a `Transformer`, weights and special tokens set;
    `tokens` names every id (`vocabulary`)."""
    ctranslate2 = _ctranslate2()
    config = model.config
    if not model.built:
        model.build()
    activation = {"relu": ctranslate2.specs.Activation.RELU, "swish": ctranslate2.specs.Activation.SWISH}
    spec = ctranslate2.specs.TransformerSpec.from_config(
        (config.encoder_depth, config.decoder_depth),
        config.num_heads,
        pre_norm=config.norm_first,
        activation=activation[config.ffn_activation],
    )
    weights = model_weights(model)
    embedding = np.asarray(weights["embedding"], np.float32)  # one array: CTranslate2 stores it once (aliases)
    positions = np.asarray(weights["positions"], np.float32)
    _set_stack(spec.encoder, weights["encoder"], embedding, positions)
    _set_stack(spec.decoder, weights["decoder"], embedding, positions)
    spec.decoder.projection.weight = embedding  # x E^T (§3.4)
    bias = never_generated_bias(config)  # [V]
    spec.decoder.projection.bias = bias if weights["output_bias"] is None else bias + weights["output_bias"]
    spec.decoder.start_from_zero_embedding = config.start_from_zero_embedding
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    spec.config.unk_token = tokens[UNK_ID]
    spec.config.bos_token = tokens[START_ID]
    spec.config.eos_token = tokens[EOS_ID]
    spec.config.decoder_start_token = tokens[START_ID]
    spec.config.add_source_eos = True
    spec.config.layer_norm_epsilon = config.layer_norm_epsilon
    return spec


def write_spec(spec, out: str, quantization: str | None = None) -> None:
    """Check `spec`, quantize its weights (None: keep float32) and save it as the model directory `out`."""
    spec.validate()
    spec.optimize(quantization=quantization)
    os.makedirs(out, exist_ok=True)
    spec.save(out)


def export_ctranslate2(
    model, tokenizer, out: str, quantization: str | None = None, lexical_shortlist=None
) -> dict[str, str]:
    """Write the CTranslate2 model directory `out` (see the module docstring); returns {artifact: path}.

    `quantization`: None keeps float32 weights; otherwise one of CTranslate2's weight types
    (int8, int8_float32, int16, float16, bfloat16, ...). `lexical_shortlist`: a
    `data.shortlist.Shortlist` written as `vmap.txt`. `out` must be new or empty.
    """
    accepted = _ctranslate2().specs.model_spec.ACCEPTED_MODEL_TYPES
    if quantization is not None and quantization not in accepted:
        raise CTranslate2ExportError(
            f"unknown CTranslate2 quantization {quantization!r}; choose one of {', '.join(accepted)}"
        )
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise CTranslate2ExportError(f"{out} exists and is not empty: the CTranslate2 model needs a new directory")
    tokens = vocabulary(tokenizer, model.config)
    spec = transformer_spec(model, tokens)
    with tempfile.TemporaryDirectory() as scratch:
        if lexical_shortlist is not None:
            vmap = os.path.join(scratch, "vmap.txt")
            with open(vmap, "w", encoding="utf-8") as f:
                f.write(vocabulary_map(lexical_shortlist, tokens))
            spec.register_vocabulary_mapping(vmap)
        write_spec(spec, out, quantization)
    paths = {
        "model": os.path.join(out, "model.bin"),
        "config": os.path.join(out, "config.json"),
        "vocabulary": os.path.join(out, "shared_vocabulary.json"),
        "tokenizer": os.path.join(out, "tokenizer.model"),
    }
    if lexical_shortlist is not None:
        paths["vocabulary_map"] = os.path.join(out, "vmap.txt")
    paths.update(tokenizer.save(paths["tokenizer"]))
    return paths
