"""What every import shares: the vocabulary laid out on our reserved ids, the weights written into a
built `Transformer`, and the model directory (config.json, tokenizer.model, one checkpoint;
tokenizer.target.model too where the source and target sides have their own SentencePiece models).

A Marian vocabulary (OPUS-MT's vocab.yml, Hugging Face's vocab.json) numbers its pieces its own
way: </s> 0, <unk> 1, then the pieces, and <pad> last where it has one. Ours reserves pad 0,
start 1, EOS 2, unknown 3 (`special_tokens`), and the tokenizer's SentencePiece ids are the model's
ids. `vocabulary` rebuilds the SentencePiece model with its pieces in our order and says which row
of the imported matrices each id takes; a piece the imported model does not have (our start
token: Marian's decoder starts from a zero vector) gets a zero embedding and the output bias
`ABSENT_LOGIT`, so that the softmax is the imported model's over its own vocabulary.

OPUS-MT models may segment each side with its own SentencePiece model (source.spm, target.spm) over
the one vocabulary: each becomes a model of the same pieces in the same order (the tokenizer's
source and target sides, `SubwordTokenizer(model_proto, target_proto)`), with that side's scores
and types; a piece that side's SentencePiece lacks gets `UNREACHABLE_SCORE`.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

import numpy as np
from sentencepiece import sentencepiece_model_pb2

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.model import Transformer
from keras_transformer.model_dir.checkpoints import weights_checkpoint
from keras_transformer.model_dir.directory import ModelDir
from keras_transformer.special_tokens import PIECES, RESERVED_IDS, UNK_ID
from keras_transformer.weight_names import model_variables

# The output bias of an id the imported model has no row for: exp(-1e4) is 0 in float32 beside any
# real logit, so it takes no share of the softmax; finite in float16 and bfloat16 (a -inf weight
# would turn a fine-tuning step's arithmetic into NaNs).
ABSENT_LOGIT = -1e4
ABSENT = -1  # a row index: no row
# The unigram score of a piece that a decoding side's SentencePiece model lacks (the target side's,
# or the one model of both): the piece must decode but never come out of encoding; tensorflow-text's
# SentencePiece rejects the UNUSED type, so it is a normal piece that no segmentation with another
# way through the text takes (a sentence's pieces score above -1e9 in all). Deviation: where a text
# holds a character that model lacks (its <unk>), a piece spanning it may be taken instead. The
# source side of two models never decodes: there such a piece is a CONTROL piece, never encoded.
UNREACHABLE_SCORE = -1e9
Piece = sentencepiece_model_pb2.ModelProto.SentencePiece
RESERVED_TYPES = {piece: Piece.UNKNOWN if i == UNK_ID else Piece.CONTROL for i, piece in PIECES.items()}


class ModelImportError(ValueError):
    """A model that cannot be imported (its one-line reason)."""


@dataclasses.dataclass(frozen=True)
class Vocabulary:
    """The tokenizer of an imported model (`model_proto`; `target_proto` where the target side has its
    own) and, for each of its ids, the imported model's row of the embedding (`embedding_rows`) and of
    the output bias (`bias_rows`), `ABSENT` for none; `notes`: what the user should know (pieces that
    the vocabulary has and SentencePiece not, or the other way round)."""

    model_proto: bytes
    target_proto: bytes | None
    embedding_rows: np.ndarray  # [V] int
    bias_rows: np.ndarray  # [V] int
    notes: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.embedding_rows)

    def rows(self, matrix: np.ndarray, which: np.ndarray, fill: float) -> np.ndarray:
        """`matrix` [V_imported, ...] -> [V, ...]: row `which[i]` at id i, `fill` where it is `ABSENT`."""
        out = np.full((self.size, *matrix.shape[1:]), fill, np.float32)
        present = which != ABSENT
        out[present] = matrix[which[present]]
        return out


def sentencepiece_models(directory: str) -> list[tuple[bytes, str]]:
    """(model, path) of `directory`'s source.spm, then of its target.spm where that one differs."""
    spms = []
    for side in ("source", "target"):
        path = os.path.join(directory, f"{side}.spm")
        if not os.path.isfile(path):
            raise ModelImportError(f"{directory} has no {side}.spm (the SentencePiece model of the {side} side)")
        with open(path, "rb") as f:
            spms.append((f.read(), path))
    return spms[:1] if spms[0][0] == spms[1][0] else spms


def vocabulary(pieces: Sequence[str], spms: Sequence[tuple[bytes, str]]) -> Vocabulary:
    """The vocabulary of a model whose i-th row is `pieces[i]`, tokenized by the SentencePiece models
    `spms`, (model bytes, where it came from) of the source side and, where it has its own, the target
    side.

    Our ids: the reserved ones (the imported model's row of "<pad>", "<s>", "</s>", "<unk>" where it
    has one), then its other pieces in its order, each with the score and type each SentencePiece
    model gives it (a piece one lacks is never produced by its encoding: `UNREACHABLE_SCORE`, or a
    CONTROL piece in the source side's model of two), then the SentencePiece pieces that the imported
    vocabulary lacks, which its toolkit reads as <unk>: they keep SentencePiece's segmentation, embed
    as <unk> does, and are never output.
    """
    protos = []
    for spm, name in spms:
        proto = sentencepiece_model_pb2.ModelProto()
        try:
            proto.ParseFromString(spm)
        except Exception:  # protobuf's DecodeError, whose module differs between its implementations
            raise ModelImportError(f"{name} is not a SentencePiece model") from None
        protos.append(proto)
    rows = {piece: i for i, piece in enumerate(pieces)}
    if len(rows) != len(pieces):
        raise ModelImportError(f"the vocabulary names {len(pieces) - len(rows)} piece(s) twice")
    if "<unk>" not in rows:
        raise ModelImportError("the vocabulary has no <unk> piece")
    # {piece: SentencePiece entry} of each side, in its model's order
    known = [
        {p.piece: p for p in proto.pieces if p.type != Piece.UNKNOWN and p.piece not in RESERVED_TYPES}
        for proto in protos
    ]
    reserved = [PIECES[i] for i in RESERVED_IDS]
    inner = [piece for piece in pieces if piece not in RESERVED_TYPES]
    extra = [[piece for piece in side if piece not in rows] for side in known]
    extras = list(dict.fromkeys(piece for side in extra for piece in side))  # each side's, the source's first
    embedding_rows = [rows.get(piece, ABSENT) for piece in reserved] + [rows[piece] for piece in inner]
    bias_rows = embedding_rows + [ABSENT] * len(extras)
    embedding_rows += [rows["<unk>"]] * len(extras)
    names = [name for _, name in spms]
    missing = [piece for piece in inner if not any(piece in side for side in known)]
    notes = []
    if missing:
        notes.append(
            f"{len(missing)} vocabulary piece(s) are not in {' or '.join(names)} (e.g. {missing[0]!r}): output only"
        )
    for side, name in zip(extra, names):
        if side:
            notes.append(
                f"{len(side)} piece(s) of {name} are not in the vocabulary (e.g. {side[0]!r}): "
                "read as <unk>, as the model's toolkit reads them, and never output"
            )
    order = reserved + inner + extras
    if len(protos) == 1:
        source, target = _in_order(protos[0], known[0], order, decodes=True), None
    else:
        source, target = (
            _in_order(proto, side, order, decodes=i == 1) for i, (proto, side) in enumerate(zip(protos, known))
        )
    return Vocabulary(source, target, np.array(embedding_rows), np.array(bias_rows), tuple(notes))


def _in_order(proto, known: dict, order: Sequence[str], decodes: bool) -> bytes:
    """`proto` (a SentencePiece model) with the pieces `order`, as `known` (its own entries) scores and
    types them, and our reserved ids; a piece it lacks never comes out of its encoding: a normal piece
    of `UNREACHABLE_SCORE` in a model that `decodes`, else a CONTROL piece."""
    absent = (UNREACHABLE_SCORE, Piece.NORMAL) if decodes else (0.0, Piece.CONTROL)
    entries = []
    for piece in order:
        if piece in RESERVED_TYPES:
            entries.append(Piece(piece=piece, score=0.0, type=RESERVED_TYPES[piece]))
        else:
            entry = known.get(piece, Piece(piece=piece, score=absent[0], type=absent[1]))
            entries.append(Piece(piece=piece, score=entry.score, type=entry.type))
    spec = proto.trainer_spec
    for i, field in zip(RESERVED_IDS, ("pad", "bos", "eos", "unk")):
        setattr(spec, f"{field}_id", i)
        setattr(spec, f"{field}_piece", PIECES[i])
    spec.vocab_size = len(entries)
    del proto.pieces[:]
    proto.pieces.extend(entries)
    return proto.SerializeToString()


def assign(variables, values, name: str = "model") -> None:
    """Write `values` (NumPy arrays, laid out as `model_variables`) into `variables`, checking every shape."""
    if isinstance(variables, dict):
        for key, variable in variables.items():
            assign(variable, values[key], f"{name}.{key}")
    elif isinstance(variables, (list, tuple)):
        if len(values) != len(variables):
            raise ModelImportError(f"{name}: {len(values)} imported, our model has {len(variables)}")
        for i, (variable, value) in enumerate(zip(variables, values)):
            assign(variable, value, f"{name}[{i}]")
    elif variables is not None:
        value = np.asarray(values, np.float32)
        if tuple(value.shape) != tuple(variables.shape):
            raise ModelImportError(f"{name}: imported shape {value.shape}, our model's {tuple(variables.shape)}")
        variables.assign(value)


def write_model_dir(
    model_dir: str,
    config: TransformerConfig,
    weights: dict,
    vocab: Vocabulary,
    warn: Callable[[str], None],
) -> str:
    """Write the model dir `model_dir` (new or empty) of `config` with `weights` (laid out as
    `model_variables`, "embedding" [V_imported, d_model] and "output_bias" [V_imported] in the imported
    model's row order) and `vocab`'s tokenizer; say `vocab.notes` through `warn`. Returns the
    checkpoint's path (step 0)."""
    if os.path.exists(model_dir) and (not os.path.isdir(model_dir) or os.listdir(model_dir)):
        raise ModelImportError(f"{model_dir} exists and is not empty: the import needs a new --model-dir")
    tokenizer = SubwordTokenizer(vocab.model_proto, vocab.target_proto)
    weights = {
        **weights,
        "embedding": vocab.rows(weights["embedding"], vocab.embedding_rows, 0.0),  # [V, d_model]
        "output_bias": vocab.rows(weights["output_bias"], vocab.bias_rows, ABSENT_LOGIT),  # [V]
    }
    model = Transformer(config)
    model.build()
    assign(model_variables(model), weights)
    for note in vocab.notes:
        warn(note)
    directory = ModelDir(model_dir)
    directory.write(config, TrainingConfig(), DataConfig(), tokenizer)
    return directory.checkpoint_manager(weights_checkpoint(model)).save(checkpoint_number=0)
