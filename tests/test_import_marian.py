"""The Marian / OPUS-MT import (keras_transformer/importers/marian.py) and the Hugging Face one
(importers/huggingface.py), proven against independent readers of the same formats, on tiny models
made by tests/marian_maker.py (seeded random weights under Marian's parameter names, SentencePiece
trained on the fixture, vocab.yml written by hand, the options inside the npz as Marian stores them).

- Against CTranslate2's own converter (`OpusMTConverter`, `MarianConverter`), at CTranslate2's
  settings: its Marian converter puts the sinusoids at the paper's frequencies
  (`sinusoid_layout="halves"`) and leaves the LayerNorm epsilon at its engine's default, 1e-5
  (`ops::LayerNorm`), so the parity imports ask for both (`CTRANSLATE2`). Greedy and beam-4
  translations are the same token for token and `score` equals `score_batch` to 1e-4 per token;
  one maker variant per layout (the output layer stored as `_W` or `_Wt`, 16 heads, 3 + 1 layers,
  OPUS-MT's file names, no decoder.yml, Hugging Face float16 / bfloat16 files) translates greedily
  as CTranslate2 does; what cannot be imported (an untied output layer, a tensor the import does not
  read, ...) is refused in one line.
- At the import's defaults (Marian's own tensor2tensor sinusoids and epsilon 1e-9, right for a
  Marian model: CTranslate2 is no reference there), against `NumpyMarian`, a forward pass of
  Marian's formulas written here in NumPy: greedy translations token for token, logits to 3e-5."""

import dataclasses
import json
import os
import shutil

import ctranslate2
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf
import yaml
from conftest import FIXTURE
from marian_maker import (
    BIG_HEADS,
    OPUS_MT_FILES,
    TINY,
    UNEQUAL_DEPTHS,
    Files,
    fixture_lines,
    fixture_spm,
    marian_options,
    marian_pieces,
    marian_weights,
    opus_mt_spm,
    stored_as,
    write_huggingface,
    write_marian,
    write_vocab,
)

from keras_transformer.cli.main import main
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.importers.common import ABSENT_LOGIT, ModelImportError
from keras_transformer.importers.huggingface import TORCH_LAYER_NORM_EPSILON, import_huggingface
from keras_transformer.importers.marian import MARIAN_LAYER_NORM_EPSILON, import_marian
from keras_transformer.model_dir import load_model
from keras_transformer.search.decoding import beam_search, greedy_search
from keras_transformer.search.search import decode_limits
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID, UNK_ID, never_generated
from keras_transformer.translation.translator import Translator

D_MODEL, D_FF, HEADS, LAYERS = TINY.d_model, TINY.d_ff, TINY.heads, TINY.layers
CTRANSLATE2 = dict(sinusoid_layout="halves", layer_norm_epsilon=1e-5)  # what CTranslate2's Marian conversion computes
SENTENCES = 16  # the fixture's first sources and references, translated and scored
MIN_LENGTH = 6  # no EOS before that many tokens, on both sides: random weights may end at once, whatever the vocabulary


@pytest.fixture(scope="module")
def spm():
    return fixture_spm()


class Converted:
    """A Marian directory converted by CTranslate2 and imported by us (as CTranslate2 computes it)."""

    def __init__(self, root, spm_bytes, activation, pre_norm, target=None):
        marian = write_marian(root / "marian", spm_bytes, activation, pre_norm, target=target)
        ctranslate2.converters.OpusMTConverter(str(marian)).convert(str(root / "ctranslate2"))
        self.translator = ctranslate2.Translator(str(root / "ctranslate2"), intra_threads=1)
        self.model_dir = str(root / "model")
        import_marian(str(marian), self.model_dir, warn=lambda line: None, **CTRANSLATE2)
        self.model, self.tokenizer, self.values = load_model(self.model_dir)
        self.ids = {self.tokenizer.piece(i): i for i in range(self.tokenizer.vocab_size)}
        self.sources, self.references = (side[:SENTENCES] for side in fixture_lines())
        self.rows = Translator(self.model, self.tokenizer).source_ids(self.sources)

    def tokens(self, row):
        """CTranslate2's input: token strings without the EOS it appends itself."""
        return [self.tokenizer.piece(int(i)) for i in row[:-1]]

    def batch(self):
        batch = np.zeros((len(self.rows), max(map(len, self.rows))), np.int32)
        for i, row in enumerate(self.rows):
            batch[i, : len(row)] = row
        return batch

    def theirs(self, beam_size):
        """CTranslate2's best translation of each source as our ids (EOS included where reached), one
        call per sentence with our length limit (CTranslate2's limit is per call) and, as ours,
        `MIN_LENGTH` (a random model ends some sentences at once, more or less so as the trained
        SentencePiece vocabulary goes)."""
        limits = decode_limits(self.batch(), self.model.config.max_length).numpy()
        found = []
        for row, limit in zip(self.rows, limits):
            (result,) = self.translator.translate_batch(
                [self.tokens(row)], beam_size=beam_size, length_penalty=0.0, max_decoding_length=int(limit),
                min_decoding_length=MIN_LENGTH, return_end_token=True,
            )  # fmt: skip
            found.append([self.ids[token] for token in result.hypotheses[0]])
        return found


# The pre-LN ReLU parity in `make test-slow` (issue 50 item 10); `make test` checks pre-LN's formulas below.
@pytest.fixture(
    scope="module",
    params=[
        pytest.param(("swish", False), id="swish-post-ln"),
        pytest.param(("relu", True), id="relu-pre-ln", marks=pytest.mark.slow),
    ],
)
def converted(request, spm, tmp_path_factory):
    return Converted(tmp_path_factory.mktemp("marian"), spm, *request.param)


def ours(ids):
    return [[int(t) for t in row if t != PAD_ID] for row in ids.numpy()[:, 0]]


def test_greedy_translations_equal_ctranslate2s_token_for_token(converted):
    theirs = converted.theirs(beam_size=1)
    assert ours(greedy_search(converted.model, converted.batch(), min_decoding_length=MIN_LENGTH).ids) == theirs
    assert sum(map(len, theirs)) > 10 * SENTENCES  # not all empty translations


def test_beam_4_translations_equal_ctranslate2s_token_for_token(converted):
    """At alpha 0 our stopping rule (patience 1) is CTranslate2's (tests/test_ctranslate2.py)."""
    found = beam_search(
        converted.model, converted.batch(), beam_size=4, alpha=0.0, nbest=1, min_decoding_length=MIN_LENGTH
    ).ids
    assert ours(found) == converted.theirs(beam_size=4)


def test_scores_equal_ctranslate2s_score_batch(converted):
    """Over the imported vocabulary: our start and pad rows (which OPUS-MT's vocabulary lacks) have
    the output bias ABSENT_LOGIT, no share of the softmax."""
    mine = Translator(converted.model, converted.tokenizer).score(converted.sources, converted.references)
    targets = Translator(converted.model, converted.tokenizer).target_ids(converted.references)
    theirs = converted.translator.score_batch(
        [converted.tokens(row) for row in converted.rows],
        [[converted.tokenizer.piece(int(i)) for i in target] for target in targets],
    )
    for score, result in zip(mine, theirs):
        np.testing.assert_allclose(score.token_log_probs, result.log_probs, atol=1e-4)


def test_the_tokenizer_segments_as_the_sentencepiece_model_and_keeps_the_reserved_ids(converted, spm):
    processor = sentencepiece.SentencePieceProcessor(model_proto=spm)
    for source, row in zip(converted.sources, converted.rows):
        assert converted.tokens(row) == processor.encode(source, out_type=str)
    pieces = [converted.tokenizer.piece(i) for i in (PAD_ID, START_ID, EOS_ID, UNK_ID)]
    assert pieces == ["<pad>", "<s>", "</s>", "<unk>"]
    bias = converted.model.embedding.logit_bias.numpy()
    assert bias[PAD_ID] == bias[START_ID] == ABSENT_LOGIT  # OPUS-MT's vocabulary has neither
    assert not converted.model.embedding.embeddings.numpy()[[PAD_ID, START_ID]].any()


def test_the_default_is_marians_own_positions_and_epsilon(spm, tmp_path):
    marian = write_marian(tmp_path / "marian", spm)
    import_marian(str(marian), str(tmp_path / "model"), warn=lambda line: None)
    config = load_model(str(tmp_path / "model"))[0].config
    assert (config.sinusoid_layout, config.layer_norm_epsilon) == ("tensor2tensor", MARIAN_LAYER_NORM_EPSILON)
    assert (config.ffn_activation, config.output_bias, config.start_from_zero_embedding) == ("swish", True, True)
    assert (config.num_layers, config.d_model, config.d_ff, config.num_heads) == (LAYERS, D_MODEL, D_FF, HEADS)


def import_error(directory, tmp_path):
    with pytest.raises(ModelImportError) as error:
        import_marian(str(directory), str(tmp_path / "model"), warn=lambda line: None)
    return str(error.value)


def test_refuses_an_rnn(spm, tmp_path):
    marian = write_marian(tmp_path / "marian", spm, options={**marian_options("swish", False), "type": "s2s"})
    message = import_error(marian, tmp_path)
    assert message.endswith("a Marian 's2s' model is not a Transformer: only type transformer imports")


def test_refuses_a_factored_vocabulary(spm, tmp_path):
    marian = write_marian(tmp_path / "marian", spm)
    shutil.copy(marian / "vocab.yml", marian / "vocab.fsv")
    (marian / "decoder.yml").write_text(yaml.safe_dump({"models": ["model.npz"], "vocabs": ["vocab.fsv"] * 2}))
    assert (
        import_error(marian, tmp_path) == f"{marian / 'vocab.fsv'} is a factored vocabulary: factors cannot be imported"
    )


def test_refuses_separate_source_and_target_embeddings(spm, tmp_path):
    weights = marian_weights(len(marian_pieces(spm)), pre_norm=False)
    embedding = weights.pop("Wemb")
    weights.update(encoder_Wemb=embedding, decoder_Wemb=embedding + 1.0)
    marian = write_marian(tmp_path / "marian", spm, weights=weights)
    assert "has separate source and target embeddings" in import_error(marian, tmp_path)


def test_drops_guided_alignment_with_a_warning(spm, tmp_path):
    options = {**marian_options("swish", False), "guided-alignment": "train.align"}
    marian = write_marian(tmp_path / "marian", spm, options=options)
    warnings = []
    import_marian(str(marian), str(tmp_path / "model"), warn=warnings.append)
    assert warnings == [
        "the guided-alignment head (layer last) is dropped: it trained one attention head to align words"
    ]


@pytest.mark.slow
def test_the_command_line_imports_and_the_model_dir_translates_and_exports(spm, tmp_path, capsys):
    marian = write_marian(tmp_path / "marian", spm)
    out = str(tmp_path / "model")
    assert main(["import", "--from", "marian", str(marian), "--model-dir", out]) == 0
    assert capsys.readouterr().out.splitlines()[0] == f"model_dir\t{out}"
    assert main(["translate", "--model-dir", out, "In the beginning God created the heaven and the earth."]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 1
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("\n".join(FIXTURE.read_text(encoding="utf-8").splitlines()[:3]) + "\n", encoding="utf-8")
    assert main(["score", "--model-dir", out, "--data", str(pairs)]) == 0
    assert len(capsys.readouterr().out.splitlines()) == 3
    assert main(["export", "--format", "ctranslate2", "--model-dir", out, "--out", str(tmp_path / "ct2")]) == 0
    assert (tmp_path / "ct2" / "model.bin").is_file()
    assert main(["import", "--from", "marian", str(marian), "--model-dir", out]) == 2  # not into a used dir
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(f"keras-transformer: error: {out} exists and is not empty: the import needs a new --model-dir")
    )


def test_the_command_line_refuses_a_missing_directory_in_one_line(tmp_path, capsys):
    missing = str(tmp_path / "missing")
    assert main(["import", "--from", "huggingface", missing, "--model-dir", str(tmp_path / "model")]) == 2
    assert capsys.readouterr().err == f"keras-transformer: error: no such directory: {missing}\n"


# --- two SentencePiece models over one vocabulary (OPUS-MT's usual layout) -----------------------


@pytest.fixture(scope="module")
def side_spms():
    """(source.spm, target.spm): SentencePiece models of the fixture's English and German sides."""
    sources, targets = fixture_lines()
    return opus_mt_spm(sources, 200), opus_mt_spm(targets, 200)


@pytest.fixture(scope="module")
def two_sided(side_spms, tmp_path_factory):
    """The Marian model of `side_spms` (vocab.yml: the union of their pieces), converted and imported
    (pre-LN: its random translations are longer)."""
    return Converted(tmp_path_factory.mktemp("two-spm"), side_spms[0], "swish", True, target=side_spms[1])


def spm_pieces(spm_bytes, texts):
    """Each text as the token strings a user of the SentencePiece model `spm_bytes` gives CTranslate2."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=spm_bytes)
    return [processor.encode(text, out_type=str) for text in texts]


def pieces_text(pieces):
    """SentencePiece's decoding of known pieces (nmt_nfkc has no denormalisation): "▁" is a space."""
    return " ".join("".join(pieces).replace("▁", " ").split())


def test_two_sentencepiece_models_import_and_translate_as_ctranslate2_does(two_sided, side_spms):
    """Sources are cut by source.spm, and CTranslate2 given those tokens translates to our beam-4
    search's tokens, which `Translator` detokenizes as target.spm decodes them."""
    source_spm, target_spm = side_spms
    tokenizer = two_sided.tokenizer
    assert tokenizer.target_proto is not None
    assert os.path.isfile(os.path.join(two_sided.model_dir, "tokenizer.target.model"))
    assert [two_sided.tokens(row) for row in two_sided.rows] == spm_pieces(source_spm, two_sided.sources)
    theirs = two_sided.theirs(beam_size=4)
    found = beam_search(
        two_sided.model, two_sided.batch(), beam_size=4, alpha=0.0, nbest=1, min_decoding_length=MIN_LENGTH
    ).ids
    assert ours(found) == theirs
    tokens = [[tokenizer.piece(i) for i in row if i != EOS_ID] for row in theirs]
    translations = Translator(
        two_sided.model, tokenizer, beam_size=4, alpha=0.0, min_decoding_length=MIN_LENGTH
    ).translate(two_sided.sources)
    assert translations == [pieces_text(row) for row in tokens]
    target = sentencepiece.SentencePieceProcessor(model_proto=target_spm)
    known = [row for row in tokens if all(target.piece_to_id(piece) != target.unk_id() for piece in row)]
    assert known and all(target.decode_pieces(row) == pieces_text(row) for row in known)
    source = sentencepiece.SentencePieceProcessor(model_proto=source_spm)
    assert any(target.piece_to_id(piece) == target.unk_id() for row in tokens for piece in row)  # decoded all the same
    assert any(source.piece_to_id(piece) == source.unk_id() for row in tokens for piece in row)  # target.spm's own


def test_two_sentencepiece_models_score_as_ctranslate2s_score_batch(two_sided, side_spms):
    """References are cut by target.spm (not by source.spm, which cuts them otherwise)."""
    source_spm, target_spm = side_spms
    translator = Translator(two_sided.model, two_sided.tokenizer)
    targets = translator.target_ids(two_sided.references)
    references = spm_pieces(target_spm, two_sided.references)
    assert [[two_sided.tokenizer.piece(int(i)) for i in row] for row in targets] == references
    assert references != spm_pieces(source_spm, two_sided.references)
    mine = translator.score(two_sided.sources, two_sided.references)
    theirs = two_sided.translator.score_batch(spm_pieces(source_spm, two_sided.sources), references)
    for score, result in zip(mine, theirs):
        np.testing.assert_allclose(score.token_log_probs, result.log_probs, atol=1e-4)


@pytest.mark.slow
def test_two_sentencepiece_models_export_text_models_that_translate_as_the_translator(two_sided, tmp_path):
    """The SavedModel's text signature, the TFLite text model (source.spm inside; the device
    detokenizes with tokenizer.target.model, as translator.json says) and the LiteRT client kit
    give `Translator`'s translations."""
    from ai_edge_litert.interpreter import InterpreterWithCustomOps
    from tensorflow_text import tflite_registrar
    from test_export import kit_module

    from keras_transformer.exporters.tensorflow import export_tensorflow

    model, tokenizer, sources = two_sided.model, two_sided.tokenizer, two_sided.sources
    paths = export_tensorflow(model, tokenizer, str(tmp_path), log=lambda line: None, beam_size=2, alpha=0.0)
    with open(paths["metadata"], encoding="utf-8") as f:
        assert json.load(f)["target_tokenizer"] == "tokenizer.target.model"
    assert SubwordTokenizer.load(paths["tokenizer"]).target_proto == tokenizer.target_proto
    want = Translator(model, tokenizer, beam_size=2, alpha=0.0).translate(sources)
    assert len(" ".join(want).split()) > 2 * len(sources)  # not all empty
    served = tf.saved_model.load(paths["saved_model"]).signatures["serving_default"]
    assert [t.decode() for t in served(text=tf.constant(sources))["translation"].numpy()] == want
    lite = InterpreterWithCustomOps(
        model_path=paths["tflite_text"], custom_op_registerers=tflite_registrar.SELECT_TFTEXT_OPS
    ).get_signature_runner("serving_default")
    ids = lite(text=np.array(sources, dtype=object))["ids"][:, 0]  # [B, L]
    target = sentencepiece.SentencePieceProcessor(model_file=paths["target_tokenizer"])
    ended = [list(row) + [EOS_ID] for row in ids.tolist()]
    rows = [[i for i in row[: row.index(EOS_ID)] if i not in (PAD_ID, START_ID, UNK_ID)] for row in ended]
    assert [" ".join(target.decode(row).split()) for row in rows] == want
    assert [text for text, _ in kit_module("litert_client").translate(sources, str(tmp_path))] == want


def test_a_vocabulary_piece_that_no_sentencepiece_model_has_decodes_and_is_never_encoded(spm, tmp_path):
    """Kept as a piece of `UNREACHABLE_SCORE` (tensorflow-text's SentencePiece refuses the UNUSED type)."""
    pieces = [*marian_pieces(spm), "▁Zebra"]
    marian = write_marian(tmp_path / "marian", spm, weights=marian_weights(len(pieces), pre_norm=False))
    write_vocab(marian / "vocab.yml", pieces)
    warnings = []
    import_marian(str(marian), str(tmp_path / "model"), warn=warnings.append)
    assert warnings == [f"1 vocabulary piece(s) are not in {marian / 'source.spm'} (e.g. '▁Zebra'): output only"]
    _, tokenizer, _ = load_model(str(tmp_path / "model"))
    zebra = [tokenizer.piece(i) for i in range(tokenizer.vocab_size)].index("▁Zebra")
    assert zebra not in tokenizer.tokenize(["Zebra Zebra"]).flat_values.numpy()
    assert tokenizer.detokenize([[zebra, EOS_ID]]).numpy()[0] == b"Zebra"


# --- the Hugging Face layout (importers/huggingface.py) -------------------------------------------


def test_the_hugging_face_layout_imports_to_the_same_model(spm, tmp_path):
    """The same weights under transformers' names give the same logits to 1e-6 (at Marian's epsilon;
    transformers' own is torch's 1e-5), but at pad: transformers' <pad> row (zero, bias 0) takes its
    share of the softmax there, as it does in transformers."""
    marian = write_marian(tmp_path / "marian", spm)
    weights = marian_weights(len(marian_pieces(spm)), pre_norm=False)
    huggingface = write_huggingface(tmp_path / "huggingface", spm, weights)
    import_marian(str(marian), str(tmp_path / "from-marian"), sinusoid_layout="halves", warn=lambda line: None)
    fields = dict(layer_norm_epsilon=MARIAN_LAYER_NORM_EPSILON, max_length=512)
    import_huggingface(str(huggingface), str(tmp_path / "from-hf"), warn=lambda line: None, **fields)
    (a, tokenizer, _), (b, other, _) = load_model(str(tmp_path / "from-marian")), load_model(str(tmp_path / "from-hf"))
    assert tokenizer.model_proto == other.model_proto
    sources = Translator(a, tokenizer).source_ids(fixture_lines()[0][:4])
    batch = np.zeros((4, max(map(len, sources))), np.int32)
    for i, row in enumerate(sources):
        batch[i, : len(row)] = row
    target = np.concatenate([np.full((4, 1), START_ID), batch[:, :-1]], axis=1)
    logits = [model((batch, target), training=False).numpy() for model in (a, b)]
    keep = np.arange(tokenizer.vocab_size) != PAD_ID
    np.testing.assert_allclose(logits[0][..., keep], logits[1][..., keep], atol=1e-6)
    assert b.embedding.logit_bias.numpy()[PAD_ID] == 0.0 and a.embedding.logit_bias.numpy()[PAD_ID] == ABSENT_LOGIT
    default = load_model_config(huggingface, tmp_path / "default")
    assert (default.sinusoid_layout, default.layer_norm_epsilon) == ("halves", TORCH_LAYER_NORM_EPSILON)


def test_the_hugging_face_layout_with_two_sentencepiece_models_imports_to_the_same_tokenizer(side_spms, tmp_path):
    source_spm, target_spm = side_spms
    marian = write_marian(tmp_path / "marian", source_spm, target=target_spm)
    weights = marian_weights(len(marian_pieces(source_spm, target=target_spm)), pre_norm=False)
    huggingface = write_huggingface(tmp_path / "huggingface", source_spm, weights, target=target_spm)
    import_marian(str(marian), str(tmp_path / "from-marian"), warn=lambda line: None)
    import_huggingface(str(huggingface), str(tmp_path / "from-hf"), warn=lambda line: None)
    (a, tokenizer, _), (b, other, _) = load_model(str(tmp_path / "from-marian")), load_model(str(tmp_path / "from-hf"))
    assert tokenizer.target_proto is not None
    assert (tokenizer.model_proto, tokenizer.target_proto) == (other.model_proto, other.target_proto)
    np.testing.assert_array_equal(a.embedding.embeddings.numpy(), b.embedding.embeddings.numpy())


def load_model_config(huggingface, out):
    import_huggingface(str(huggingface), str(out), warn=lambda line: None)
    return load_model(str(out))[0].config


def test_refuses_a_pytorch_pickle(tmp_path):
    (tmp_path / "hf").mkdir()
    (tmp_path / "hf" / "pytorch_model.bin").write_bytes(b"\x80")
    with pytest.raises(ModelImportError) as error:
        import_huggingface(str(tmp_path / "hf"), str(tmp_path / "model"))
    assert str(error.value) == (
        f"{tmp_path / 'hf'} holds pytorch_model.bin, which needs torch to read: save the model as model.safetensors "
        "(MarianMTModel.save_pretrained(..., safe_serialization=True))"
    )


def fixture_batch(model, tokenizer, count=4):
    """(source ids, target-in ids) of the fixture's first `count` pairs, teacher forcing."""
    sources, targets = fixture_lines()
    translator = Translator(model, tokenizer)
    return padded(translator.source_ids(sources[:count])), padded(translator.target_ids(targets[:count]))


def padded(rows):
    batch = np.full((len(rows), max(map(len, rows))), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


@pytest.mark.slow
def test_an_imported_model_fine_tunes_from_its_own_weights_and_exports(spm, tmp_path, capsys, monkeypatch):
    """`train --init-from` an import with no flag repeating its architecture: the fine-tuning model
    at step 0 (the parent's weights restored, before any update) gives the import's logits to 1e-6;
    the import's export passes `export --check` (its SavedModels' contract and translations)."""
    from keras_transformer.training import trainer

    marian = write_marian(tmp_path / "marian", spm)
    parent = tmp_path / "model"
    import_marian(str(marian), str(parent), max_length=64, warn=lambda line: None)
    imported, tokenizer, _ = load_model(str(parent))
    source, target = fixture_batch(imported, tokenizer)
    target_in = np.concatenate([np.full((len(target), 1), START_ID, np.int32), target[:, :-1]], axis=1)
    at_step_0 = []

    def resume(directory, model, *args, **kwargs):  # the run's model, restored, before its first step
        manager = resume.original(directory, model, *args, **kwargs)
        at_step_0.append(model((source, target_in), training=False).numpy())
        return manager

    resume.original = trainer._resume
    monkeypatch.setattr(trainer, "_resume", resume)
    flags = ["--init-from", str(parent), "--data", "software-en-de", "--model-dir", str(tmp_path / "tuned")]
    flags += ["--max-steps", "2", "--steps-per-epoch", "2", "--batch-tokens", "512", "--bleu-every-epochs", "0"]
    assert main(["train", *flags]) == 0
    assert (
        f"fine-tuning from {parent / 'checkpoints' / 'ckpt-0'} (step 0) with its tokenizer" in capsys.readouterr().err
    )
    np.testing.assert_allclose(at_step_0[0], imported((source, target_in), training=False).numpy(), atol=1e-6)
    assert load_model(str(tmp_path / "tuned"))[0].config == imported.config
    out = str(tmp_path / "export")
    assert main(["export", "--model-dir", str(parent), "--out", out, "--no-tflite"]) == 0
    assert main(["export", "--check", out, "--sample", "4"]) == 0


# --- one Marian layout per variant, against CTranslate2's converter (issue 50) --------------------

GREEDY_SENTENCES = 8  # the fixture's first sources, translated greedily by CTranslate2 and checked by us
GREEDY_LIMIT = 40  # tokens per translation at most (CTranslate2's max_decoding_length)
GREEDY_MIN = 6  # no EOS before that many tokens (min_decoding_length): random weights may end at once


def assert_greedy_equals_ctranslate2s(ctranslate2_dir, model_dir):
    """CTranslate2's greedy translations (the model in `ctranslate2_dir`) of the fixture's first
    sources are the imported model's (`model_dir`) token for token, and their log-probabilities sum
    to CTranslate2's scores to 1e-4 per token. Checked in one teacher-forced forward pass rather than
    by tracing a search per variant: at each step of CTranslate2's translation our argmax over the
    tokens our decoding may output (not `never_generated`), after CTranslate2's prefix, is
    CTranslate2's token; our greedy search is that argmax decoding (tests/test_decoding.py's
    `test_greedy_equals_uncached_argmax_decoding`)."""
    model, tokenizer, _ = load_model(model_dir)
    ids = {tokenizer.piece(i): i for i in range(tokenizer.vocab_size)}
    rows = Translator(model, tokenizer).source_ids(fixture_lines()[0][:GREEDY_SENTENCES])
    results = ctranslate2.Translator(ctranslate2_dir, intra_threads=1).translate_batch(
        [[tokenizer.piece(int(i)) for i in row[:-1]] for row in rows],  # CTranslate2 appends the EOS itself
        beam_size=1, length_penalty=0.0, max_decoding_length=GREEDY_LIMIT, min_decoding_length=GREEDY_MIN,
        return_end_token=True, return_scores=True,
    )  # fmt: skip
    theirs = [[ids[token] for token in result.hypotheses[0]] for result in results]
    assert sum(map(len, theirs)) > 5 * GREEDY_SENTENCES  # not all empty
    target_in = padded([[START_ID, *row[:-1]] for row in theirs])
    logits = model((padded(rows), target_in), training=False).numpy().astype(np.float64)  # [B, T, V]
    logits[..., list(never_generated())] = -np.inf
    logits[:, :GREEDY_MIN, EOS_ID] = -np.inf  # CTranslate2 disables EOS before the softmax
    shifted = logits - logits.max(-1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))  # [B, T, V]
    for row, step_logits, step_log_probs, result in zip(theirs, logits, log_probs, results):
        assert step_logits[: len(row)].argmax(-1).tolist() == row
        score = step_log_probs[np.arange(len(row)), row].sum()
        np.testing.assert_allclose(score, result.scores[0], atol=1e-4 * len(row))


MARIAN_VARIANTS = {
    "output-Wt": dict(output="Wt"),  # the embedding stored again as decoder_ff_logit_out_Wt [V, d_model]
    "output-W": dict(output="W"),  # ... transposed, as decoder_ff_logit_out_W [d_model, V]
    "16-heads": dict(size=BIG_HEADS),  # transformer-big's head count
    "3-1-layers": dict(size=UNEQUAL_DEPTHS),
    "3-1-layers-pre-ln-relu": dict(size=UNEQUAL_DEPTHS, pre_norm=True, activation="relu"),
    "opus-mt-file-names": dict(files=OPUS_MT_FILES),  # decoder.yml naming opus.spm32k-spm32k.*
}


@pytest.mark.parametrize("variant", MARIAN_VARIANTS)
def test_each_marian_layout_imports_as_ctranslate2_converts_it(variant, spm, tmp_path):
    """At CTranslate2's settings (`CTRANSLATE2`): greedy token for token, scores to 1e-4 per token."""
    marian = write_marian(tmp_path / "marian", spm, **MARIAN_VARIANTS[variant])
    ctranslate2.converters.OpusMTConverter(str(marian)).convert(str(tmp_path / "ctranslate2"))
    import_marian(str(marian), str(tmp_path / "model"), warn=lambda line: None, **CTRANSLATE2)
    assert_greedy_equals_ctranslate2s(str(tmp_path / "ctranslate2"), str(tmp_path / "model"))


def test_a_directory_without_decoder_yml_imports_as_ctranslate2s_marian_converter_reads_it(spm, tmp_path):
    """CTranslate2's `OpusMTConverter` needs a decoder.yml; its `MarianConverter` takes the paths,
    which the import finds: the directory's one *.npz and one *.vocab.yml (OPUS-MT's names here)."""
    files = dataclasses.replace(OPUS_MT_FILES, decoder_yml=False)
    marian = write_marian(tmp_path / "marian", spm, files=files)
    assert not (marian / "decoder.yml").exists()
    vocab = str(marian / files.vocab)
    converter = ctranslate2.converters.MarianConverter(str(marian / files.weights), [vocab, vocab])
    converter.convert(str(tmp_path / "ctranslate2"))
    import_marian(str(marian), str(tmp_path / "model"), warn=lambda line: None, **CTRANSLATE2)
    assert_greedy_equals_ctranslate2s(str(tmp_path / "ctranslate2"), str(tmp_path / "model"))


def test_refuses_a_directory_without_decoder_yml_that_holds_two_weight_files(spm, tmp_path):
    marian = write_marian(tmp_path / "marian", spm, files=Files(decoder_yml=False))
    shutil.copy(marian / "model.npz", marian / "model.npz.best-bleu.npz")
    assert import_error(marian, tmp_path) == (
        f"{marian} must hold one weights file (*.npz), it holds 2 (model.npz, model.npz.best-bleu.npz); "
        "a decoder.yml names them"
    )


def test_refuses_a_decoder_yml_that_names_a_file_the_directory_lacks(spm, tmp_path):
    marian = write_marian(tmp_path / "marian", spm, files=OPUS_MT_FILES)
    (marian / OPUS_MT_FILES.vocab).unlink()
    assert import_error(marian, tmp_path) == (
        f"{marian / 'decoder.yml'} names {OPUS_MT_FILES.vocab}, which {marian} does not hold"
    )


@pytest.mark.parametrize("output", ["untied-Wt", "untied-W"])
def test_refuses_an_untied_output_layer(output, spm, tmp_path):
    """CTranslate2 reads a matrix of its own into its output layer; ours is the embedding (§3.4)."""
    marian = write_marian(tmp_path / "marian", spm, output=output)
    name = "decoder_ff_logit_out_" + output.split("-")[1]
    assert import_error(marian, tmp_path) == (
        f"{marian / 'model.npz'} has an output layer apart from its embeddings ({name}, trained without "
        "--tied-embeddings): this model ties them (§3.4)"
    )


def unread_tensors_message(marian, names):
    more = f" and {len(names) - 3} more" if len(names) > 3 else ""
    return (
        f"{marian / 'model.npz'} holds {len(names)} tensor(s) that a Marian Transformer of its options does not "
        f"have: {', '.join(sorted(names)[:3])}{more}"
    )


def test_refuses_a_tensor_it_does_not_read_by_name(spm, tmp_path):
    """A decoder deeper than its options say (dec-depth 1, two layers' weights): imported without its
    second layer, it would translate otherwise; and an output layer stored in both layouts."""
    pieces = marian_pieces(spm)
    options = {**marian_options("swish", False), "dec-depth": 1}
    marian = write_marian(tmp_path / "deeper", spm, options=options)
    second = [name for name in marian_weights(len(pieces), False) if name.startswith("decoder_l2_")]
    assert len(second) > 3 and import_error(marian, tmp_path) == unread_tensors_message(marian, second)
    weights = marian_weights(len(pieces), False, output="W")
    weights["decoder_ff_logit_out_Wt"] = weights["Wemb"].copy()  # CTranslate2 reads `_W` first
    marian = write_marian(tmp_path / "both", spm, weights=weights)
    assert import_error(marian, tmp_path) == unread_tensors_message(marian, ["decoder_ff_logit_out_Wt"])


@pytest.mark.parametrize("dtype", ["F16", "BF16"])
def test_a_hugging_face_half_precision_file_imports_as_ctranslate2_converts_its_values(dtype, spm, tmp_path):
    """A MarianMTModel saved in float16 or bfloat16 (every tensor, its position table too) imports to
    what CTranslate2's converter makes of a Marian directory of the same values (Hugging Face's
    settings, the paper's frequencies and epsilon 1e-5, are CTranslate2's): greedy token for token."""
    weights = stored_as(marian_weights(len(marian_pieces(spm)), pre_norm=False), dtype)
    assert not np.array_equal(weights["Wemb"], marian_weights(len(marian_pieces(spm)), pre_norm=False)["Wemb"])
    marian = write_marian(tmp_path / "marian", spm, weights=weights)
    ctranslate2.converters.OpusMTConverter(str(marian)).convert(str(tmp_path / "ctranslate2"))
    huggingface = write_huggingface(tmp_path / "huggingface", spm, weights, dtype=dtype)
    import_huggingface(str(huggingface), str(tmp_path / "model"), warn=lambda line: None)
    assert_greedy_equals_ctranslate2s(str(tmp_path / "ctranslate2"), str(tmp_path / "model"))


# --- the import's defaults against Marian's formulas in NumPy (issue 50) --------------------------


def marian_positions(length, dim):
    """marian-dev's `sinusoidalPositionEmbeddings` (tensor2tensor's): frequency i of d/2 is
    exp(-i ln(10000) / (d/2 - 1)); the sines fill the first half, the cosines the second."""
    half = dim // 2
    frequencies = np.exp(-np.arange(half) * np.log(10000.0) / (half - 1))  # [d/2]
    angles = np.arange(length)[:, None] * frequencies[None, :]  # [T, d/2]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)  # [T, d]


class NumpyMarian:
    """A Marian Transformer's inference forward pass in float64 NumPy, written from marian-dev's
    `transformer.h` and its options (no dropout), independent of the package: embeddings x sqrt(d)
    plus Marian's positions; each sub-layer post-LN ("dan": LayerNorm(x + Sublayer(x))) or pre-LN
    ("n" / "da": x + Sublayer(LayerNorm(x)), a last LayerNorm on top); Marian's `layerNorm`
    (epsilon 1e-9); multi-head attention softmax(Q K^T / sqrt(d_k)) V with biases; the feed-forward
    network with the options' activation; a decoder that starts from a zero vector; logits through the
    embedding matrix plus `decoder_ff_logit_out_b`. Rows are Marian's vocabulary rows (</s> 0)."""

    EPSILON = 1e-9  # Marian's `layerNorm(x, gamma, beta, eps = 1e-9)`

    def __init__(self, weights, options):
        self.w = {name: np.asarray(value, np.float64) for name, value in weights.items()}
        self.heads = options["transformer-heads"]
        self.pre_norm = options["transformer-preprocess"] == "n"
        self.activation = options["transformer-ffn-activation"]
        self.depth = {"encoder": options["enc-depth"], "decoder": options["dec-depth"]}
        self.d = self.w["Wemb"].shape[1]

    def layer_norm(self, x, scale, bias):
        mean = x.mean(-1, keepdims=True)
        variance = ((x - mean) ** 2).mean(-1, keepdims=True)
        return self.w[scale].reshape(-1) * (x - mean) / np.sqrt(variance + self.EPSILON) + self.w[bias].reshape(-1)

    def residual(self, x, scope, sublayer):
        if self.pre_norm:
            return x + sublayer(self.layer_norm(x, f"{scope}_ln_scale_pre", f"{scope}_ln_bias_pre"))
        return self.layer_norm(x + sublayer(x), f"{scope}_ln_scale", f"{scope}_ln_bias")

    def attention(self, scope, queries, memory, mask):
        def heads(x, name):  # [T, d] -> [h, T, d_k]
            y = x @ self.w[f"{scope}_W{name}"] + self.w[f"{scope}_b{name}"].reshape(-1)
            return y.reshape(len(x), self.heads, -1).transpose(1, 0, 2)

        q, k, v = heads(queries, "q"), heads(memory, "k"), heads(memory, "v")
        scores = np.where(mask, q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1]), -np.inf)  # [h, Tq, Tk]
        attention = np.exp(scores - scores.max(-1, keepdims=True))
        attention /= attention.sum(-1, keepdims=True)
        context = (attention @ v).transpose(1, 0, 2).reshape(len(queries), self.d)  # [Tq, d]
        return context @ self.w[f"{scope}_Wo"] + self.w[f"{scope}_bo"].reshape(-1)

    def feed_forward(self, scope, x):
        inner = x @ self.w[f"{scope}_W1"] + self.w[f"{scope}_b1"].reshape(-1)  # [T, d_ff]
        inner = inner / (1 + np.exp(-inner)) if self.activation == "swish" else np.maximum(inner, 0)
        return inner @ self.w[f"{scope}_W2"] + self.w[f"{scope}_b2"].reshape(-1)

    def top(self, x, side):
        return self.layer_norm(x, f"{side}_top_ln_scale", f"{side}_top_ln_bias") if self.pre_norm else x

    def encode(self, source):
        """source: Marian rows, </s> last -> [S, d]."""
        x = self.w["Wemb"][source] * np.sqrt(self.d) + marian_positions(len(source), self.d)
        everything = np.ones((len(source), len(source)), bool)
        for i in range(1, self.depth["encoder"] + 1):
            scope = f"encoder_l{i}"
            x = self.residual(x, f"{scope}_self_Wo", lambda y, s=scope: self.attention(f"{s}_self", y, y, everything))
            x = self.residual(x, f"{scope}_ffn_ffn", lambda y, s=scope: self.feed_forward(f"{s}_ffn", y))
        return self.top(x, "encoder")

    def logits(self, memory, output):
        """The logits [len(output) + 1, V] after a zero vector and each row of `output`."""
        inputs = np.concatenate([np.zeros((1, self.d)), self.w["Wemb"][output]]) * np.sqrt(self.d)
        x = inputs + marian_positions(len(inputs), self.d)  # [T, d]
        causal = np.tril(np.ones((len(x), len(x)), bool))
        everything = np.ones((len(x), len(memory)), bool)
        for i in range(1, self.depth["decoder"] + 1):
            scope = f"decoder_l{i}"
            x = self.residual(x, f"{scope}_self_Wo", lambda y, s=scope: self.attention(f"{s}_self", y, y, causal))
            x = self.residual(
                x, f"{scope}_context_Wo", lambda y, s=scope: self.attention(f"{s}_context", y, memory, everything)
            )
            x = self.residual(x, f"{scope}_ffn_ffn", lambda y, s=scope: self.feed_forward(f"{s}_ffn", y))
        return self.top(x, "decoder") @ self.w["Wemb"].T + self.w["decoder_ff_logit_out_b"].reshape(-1)

    def greedy(self, source, limit, minimum):
        """Marian's beam search at beam 1: the argmax after each prefix, until </s> (row 0) or `limit`
        tokens, </s> barred from the first `minimum` (as CTranslate2's min_decoding_length)."""
        memory, output = self.encode(source), []
        while len(output) < limit and (not output or output[-1] != 0):
            logits = self.logits(memory, output)[-1]  # [V]
            if len(output) < minimum:
                logits[0] = -np.inf
            output.append(int(logits.argmax()))
        return output


LENGTH_B = 10  # translations of |source| + 10 tokens at most: NumPy recomputes each prefix


@pytest.mark.parametrize(("activation", "pre_norm"), [("swish", False), ("relu", True)], ids=["post-ln", "pre-ln"])
def test_the_default_import_computes_marians_own_formulas(activation, pre_norm, spm, tmp_path):
    """At the import's defaults (Marian's tensor2tensor sinusoids, its epsilon 1e-9, right for a
    Marian model), greedy search gives `NumpyMarian`'s greedy translations token for token, and one
    forward pass its logits to 3e-5 (relative and absolute; float32's error here is up to 1.7e-5).
    Measured at this size: the paper's frequencies ("halves", CTranslate2's) part from them by more
    than 2, the other activation by more than 1, epsilon 1e-5 by 6e-5 (post-LN) to 1.3e-4 (pre-LN).
    3+1 layers, so that the encoder's and the decoder's depths are each read."""
    pieces = marian_pieces(spm)
    options = marian_options(activation, pre_norm, UNEQUAL_DEPTHS)
    weights = marian_weights(len(pieces), pre_norm, size=UNEQUAL_DEPTHS)
    marian = write_marian(tmp_path / "marian", spm, options=options, weights=weights)
    import_marian(str(marian), str(tmp_path / "model"), warn=lambda line: None)
    model, tokenizer, _ = load_model(str(tmp_path / "model"))
    rows = {piece: i for i, piece in enumerate(pieces)}
    columns = [tokenizer.piece(i) for i in range(tokenizer.vocab_size)]
    columns = [columns.index(piece) for piece in pieces]  # our id of each Marian row
    sources = Translator(model, tokenizer).source_ids(fixture_lines()[0][:GREEDY_SENTENCES])
    batch = padded(sources)
    reference = NumpyMarian(weights, options)
    limits = decode_limits(batch, model.config.max_length, b=LENGTH_B).numpy()
    found = greedy_search(model, batch, length_b=LENGTH_B, min_decoding_length=GREEDY_MIN).ids.numpy()[:, 0]
    theirs = []
    for source, row, limit in zip(sources, found, limits):
        source = [rows[tokenizer.piece(int(i))] for i in source]
        theirs.append(reference.greedy(source, int(limit), GREEDY_MIN))
        assert [rows[tokenizer.piece(int(i))] for i in row if i != PAD_ID] == theirs[-1]
    assert sum(map(len, theirs)) > 5 * GREEDY_SENTENCES  # not all empty
    target_in = padded([[START_ID] + [columns[i] for i in row[:-1]] for row in theirs])
    logits = model((batch, target_in), training=False).numpy()[..., columns]  # [B, T, V_marian]
    for source, row, mine in zip(sources, theirs, logits):
        memory = reference.encode([rows[tokenizer.piece(int(i))] for i in source])
        np.testing.assert_allclose(mine[: len(row)], reference.logits(memory, row[:-1]), rtol=3e-5, atol=3e-5)
