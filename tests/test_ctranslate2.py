"""The CTranslate2 export: CTranslate2 on the exported weights computes our log-probabilities and
our greedy translations, token for token; and the export's refusals."""

import json
import os
import sys

import ctranslate2
import numpy as np
import pytest
import sentencepiece
import tensorflow as tf
from conftest import ARCHITECTURE_OPTIONS, FIXTURE, scramble

from keras_transformer import Transformer, TransformerConfig, beam_search, greedy_search
from keras_transformer.cli.main import main
from keras_transformer.config import TrainingConfig
from keras_transformer.data.sources import read_pairs
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.exporters.ctranslate2 import (
    CTranslate2ExportError,
    export_ctranslate2,
    never_generated_bias,
    transformer_spec,
    vocabulary,
)
from keras_transformer.layers import sinusoid_table
from keras_transformer.model_dir import ModelDir, load_model
from keras_transformer.search.decoding import decode_limits
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID
from keras_transformer.training.trainer import train
from keras_transformer.translation.translator import Translator


def padded(rows, pad_id=0):
    """[B, max length] int32 from rows of ids."""
    batch = np.full((len(rows), max(len(row) for row in rows)), pad_id, np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


class Exported:
    """A model, its tokenizer, its CTranslate2 export and CTranslate2's translator on it."""

    def __init__(self, model, tokenizer, out):
        self.model, self.tokenizer, self.out = model, tokenizer, str(out)
        self.paths = export_ctranslate2(model, tokenizer, self.out)
        self.tokens = vocabulary(tokenizer, model.config)
        self.ids = {token: i for i, token in enumerate(self.tokens)}
        self.translator = ctranslate2.Translator(self.out, intra_threads=1)

    def source_rows(self, texts):
        """Our source ids (truncated, EOS at the end), as `Translator` builds them."""
        return Translator(self.model, self.tokenizer).source_ids(texts)

    def source_tokens(self, row):
        """CTranslate2's input: token strings without the EOS that it appends itself (add_source_eos)."""
        return [self.tokens[i] for i in row[:-1]]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A tiny pre-LN model trained for 80 steps: enough to leave the one-token outputs of the first
    steps (and to end some sentences), where a token-for-token comparison says little."""
    root = tmp_path_factory.mktemp("ctranslate2")
    model_dir = str(root / "model")
    config = TransformerConfig.tiny(vocab_size=300, norm_first=True, dropout=0.0)
    training = TrainingConfig(
        max_steps=80, batch_tokens=1024, warmup_fraction=0.2, steps_per_epoch=80, learning_rate_scale=3.0
    )
    model = train(model_dir, config, training, str(FIXTURE), verbose=0, log=lambda message: None)
    exported = Exported(model, ModelDir(model_dir).tokenizer(), root / "ctranslate2")
    exported.model_dir = model_dir
    return exported


def greedy_translations(exported, sources):
    """(ours, CTranslate2's): the greedy translations of `sources` by our search and by CTranslate2
    on the export, each a list of id lists (EOS included where reached)."""
    rows = exported.source_rows(sources)
    batch = padded(rows)
    ours = greedy_search(exported.model, batch).ids.numpy()[:, 0]  # [B, L]
    limits = decode_limits(batch, exported.model.config.max_length).numpy()  # [B]
    theirs = []
    for row, limit in zip(rows, limits):  # one call per sentence: CTranslate2's length limit is per call
        (result,) = exported.translator.translate_batch(
            [exported.source_tokens(row)], beam_size=1, max_decoding_length=int(limit), return_end_token=True
        )
        theirs.append([exported.ids[token] for token in result.hypotheses[0]])
    return [[int(t) for t in row if t != PAD_ID] for row in ours], theirs


@pytest.mark.slow
def test_greedy_translations_equal_ours_token_for_token(trained):
    sources = read_pairs(str(FIXTURE), "test")[0] + read_pairs(str(FIXTURE), "validation")[0]
    ours, theirs = greedy_translations(trained, sources)
    for i, hypothesis in enumerate(theirs):
        assert hypothesis == ours[i], sources[i]
    assert len({token for hypothesis in theirs for token in hypothesis}) > 5  # not one token repeated
    texts = trained.tokenizer.detokenize(padded(theirs)).numpy()
    want = Translator(trained.model, trained.tokenizer, beam_size=1, alpha=0.0).translate(sources)
    assert [text.decode("utf-8") for text in texts] == want


@pytest.mark.slow
def test_beam_4_at_alpha_0_equals_ctranslate2s(trained):
    """Without a length penalty our default stopping rule (patience 1: a sentence stops once K of
    its hypotheses have ended) is CTranslate2's, so beam 4 finds the same best translation for all
    but a few sentences: two extensions that tie to float rounding (the engines sum in different
    orders) may go either way, and the beams part there. On an AMD EPYC with AVX-512, 2 of these 16
    sentences part so (at prefixes 0.003 apart of -62 on this repetitive 80-step model); ours then
    scores 0.8 below CTranslate2's on one and 1.9 above it on the other."""
    sources = read_pairs(str(FIXTURE), "test")[0] + read_pairs(str(FIXTURE), "validation")[0]
    rows = trained.source_rows(sources)
    batch = padded(rows)
    ours = beam_search(trained.model, batch, beam_size=4, alpha=0.0, nbest=1).ids.numpy()[:, 0]  # [B, L]
    limits = decode_limits(batch, trained.model.config.max_length).numpy()  # [B]
    same = 0
    for i, (row, limit) in enumerate(zip(rows, limits)):
        (result,) = trained.translator.translate_batch(
            [trained.source_tokens(row)], beam_size=4, length_penalty=0.0, max_decoding_length=int(limit),
            return_end_token=True,
        )  # fmt: skip
        same += [trained.ids[token] for token in result.hypotheses[0]] == [int(t) for t in ours[i] if t != PAD_ID]
    assert same >= 0.75 * len(rows), f"{same} of {len(rows)} the same"


def log_probs_of_ours(model, source_ids, target):
    """log p(y_t | y_<t, x) of `target` + EOS under our model, with pad and start banned before the
    softmax, as the exported bias bans them."""
    target_in = np.array([[START_ID, *target]], np.int32)
    logits = model((source_ids[None], target_in), training=False).numpy()[0]  # [T + 1, V]
    logits[:, [PAD_ID, START_ID]] = -np.inf
    log_probs = tf.nn.log_softmax(logits, axis=-1).numpy()
    return log_probs[np.arange(len(target) + 1), [*target, EOS_ID]]


def random_model(tokenizer, **overrides):
    """A built tiny model of random weights (its output bias, if any, random too, not 0)."""
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, **overrides))
    model.build()
    if model.embedding.logit_bias is not None:
        model.embedding.logit_bias.assign(np.random.default_rng(5).normal(size=tokenizer.vocab_size))
    return model


@pytest.mark.parametrize(
    "overrides", [{}, {"norm_first": True}, ARCHITECTURE_OPTIONS], ids=["post-LN", "pre-LN", "options"]
)
def test_log_probs_of_reference_translations_equal_ours(overrides, tokenizer, tmp_path):
    """Teacher-forced scoring of the reference translations, position by position: every weight,
    norm, position, the embedding scale and every architecture option in the conversion shows
    here (random weights)."""
    model = random_model(tokenizer, **overrides)
    exported = Exported(model, tokenizer, tmp_path / "ctranslate2")
    sources, references = read_pairs(str(FIXTURE), "test")
    rows = exported.source_rows(sources)
    targets = [list(ids) for ids in tokenizer.tokenize(references).numpy()]
    results = exported.translator.score_batch(
        [exported.source_tokens(row) for row in rows], [[exported.tokens[i] for i in target] for target in targets]
    )
    for row, target, result in zip(rows, targets, results):
        np.testing.assert_allclose(result.log_probs, log_probs_of_ours(model, row, target), atol=2e-5)


def test_greedy_translations_with_every_option_equal_ours(tokenizer, tmp_path):
    """A random model with every architecture option (3 encoder layers, 1 decoder layer, swish,
    tensor2tensor's sinusoids, an output bias, the zero start embedding): CTranslate2's greedy
    translations of the export are ours, token for token. Its weights are large (`scramble`), so
    that its choices vary from step to step."""
    exported = Exported(scramble(random_model(tokenizer, **ARCHITECTURE_OPTIONS)), tokenizer, tmp_path / "ctranslate2")
    sources = read_pairs(str(FIXTURE), "test")[0]
    ours, theirs = greedy_translations(exported, sources)
    assert theirs == ours
    assert len({token for hypothesis in theirs for token in hypothesis}) > 5  # not one token repeated


def test_the_spec_sets_the_options(tokenizer):
    model = random_model(tokenizer, **ARCHITECTURE_OPTIONS)
    spec = transformer_spec(model, vocabulary(tokenizer, model.config))
    assert (len(spec.encoder.layer), len(spec.decoder.layer)) == (3, 1)
    assert spec.encoder.activation == spec.decoder.activation == ctranslate2.specs.Activation.SWISH
    assert spec.decoder.start_from_zero_embedding and spec.config.layer_norm_epsilon == 1e-5
    np.testing.assert_array_equal(spec.encoder.position_encodings.encodings, sinusoid_table(128, 64, "tensor2tensor"))
    bias = never_generated_bias(model.config) + model.embedding.logit_bias.numpy()
    np.testing.assert_array_equal(spec.decoder.projection.bias, bias)
    default = transformer_spec(random_model(tokenizer), vocabulary(tokenizer, model.config))
    assert default.encoder.activation == ctranslate2.specs.Activation.RELU
    assert not default.decoder.start_from_zero_embedding
    np.testing.assert_array_equal(default.decoder.projection.bias, never_generated_bias(model.config))


def test_export_writes_the_model_dir_with_our_special_tokens(tokenizer, tmp_path):
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, layer_norm_epsilon=1e-5))
    paths = export_ctranslate2(model, tokenizer, str(tmp_path / "out"))
    files = ["config.json", "model.bin", "shared_vocabulary.json", "tokenizer.model"]
    assert sorted(os.listdir(tmp_path / "out")) == files
    assert set(paths) == {"model", "config", "vocabulary", "tokenizer"}
    config = json.loads((tmp_path / "out" / "config.json").read_text())
    assert (config["bos_token"], config["eos_token"], config["unk_token"]) == ("<s>", "</s>", "<unk>")
    assert config["decoder_start_token"] == "<s>" and config["add_source_eos"] is True
    assert config["layer_norm_epsilon"] == pytest.approx(1e-5)
    tokens = json.loads((tmp_path / "out" / "shared_vocabulary.json").read_text())
    processor = sentencepiece.SentencePieceProcessor(model_file=paths["tokenizer"])
    assert tokens[:4] == ["<blank>", "<s>", "</s>", "<unk>"] and len(tokens) == tokenizer.vocab_size
    assert tokens[4:] == [processor.id_to_piece(i) for i in range(4, tokenizer.vocab_size)]


def rounded_to_4_bits(model):
    """`model` with every matrix rounded to 15 levels per output column: a control that int8's
    bounds must tell from int8 (a broken quantization loses at least as much)."""
    for weight in model.weights:
        value = weight.numpy()
        if value.ndim >= 2:
            scale = np.max(np.abs(value), axis=tuple(range(value.ndim - 1)), keepdims=True) / 7 + 1e-12
            weight.assign(np.round(value / scale) * scale)
    return model


@pytest.mark.slow
def test_cli_exports_int8_weights_that_keep_the_translations(translating, tmp_path, capsys):
    """int8 weights round: on a model that translates its 32 pairs (conftest's `translating`), the
    int8 export scores float32's greedy translations within 0.02 nats a token of float32 (a bound
    that does not cascade as a greedy search does: one changed token changes the rest of its
    sentence), and gives float32's greedy translation for at least 2/3 of the sentences.
    Measured (2026-12-06, AVX-512 with AMX): 0.0031 nats and 31 of 32 sentences; the model trained
    on the CI machine gave 24 of 32 (so a 90% bound failed there). The same weights rounded to
    4 bits before the int8 conversion: 0.089 nats and 18 sentences, outside both bounds."""
    out = str(tmp_path / "int8")
    ctranslate2_int8 = ["--format", "ctranslate2", "--quantization", "int8"]
    assert main(["export", "--model-dir", translating.model_dir, "--out", out, *ctranslate2_int8]) == 0
    printed = dict(line.split("\t") for line in capsys.readouterr().out.strip().splitlines())
    assert printed["model"] == os.path.join(out, "model.bin") and os.path.isfile(printed["tokenizer"])
    model, tokenizer, _ = load_model(translating.model_dir)
    fp32 = Exported(model, tokenizer, tmp_path / "fp32")
    assert os.path.getsize(printed["model"]) < 0.5 * os.path.getsize(fp32.paths["model"])
    batch = [fp32.source_tokens(row) for row in fp32.source_rows(translating.sources)]

    def greedy(translator):
        return [r.hypotheses[0] for r in translator.translate_batch(batch, beam_size=1, max_decoding_length=48)]

    floats = greedy(fp32.translator)
    processor = sentencepiece.SentencePieceProcessor(model_file=fp32.paths["tokenizer"])
    references = sum(processor.decode_pieces(h) == t for h, t in zip(floats, translating.targets))
    assert references >= 0.8 * len(batch), f"float32 gives {references} references: the model does not translate"
    scored = [i for i, hypothesis in enumerate(floats) if len(hypothesis) < 46]  # ended ones: <s> and </s> fit in 48

    def scores(translator):
        results = translator.score_batch([batch[i] for i in scored], [floats[i] for i in scored])
        return np.concatenate([r.log_probs for r in results])

    float_scores = scores(fp32.translator)

    def drift(translator):
        """(mean |log p - float32's| per token of float32's translations, sentences equal to float32's,
        the greedy translations)."""
        hypotheses = greedy(translator)
        same = sum(a == b for a, b in zip(hypotheses, floats))
        return float(np.mean(np.abs(scores(translator) - float_scores))), same, hypotheses

    int8 = ctranslate2.Translator(out, intra_threads=1)
    assert int8.compute_type == "int8_float32"
    nats, same, hypotheses = drift(int8)
    assert all(hypothesis and all(token in fp32.ids for token in hypothesis) for hypothesis in hypotheses)
    assert nats <= 0.02 and same >= 2 / 3 * len(batch), f"int8: {nats:.4f} nats a token, {same} of {len(batch)} equal"
    control = tmp_path / "4-bit"
    export_ctranslate2(rounded_to_4_bits(model), tokenizer, str(control), quantization="int8")
    nats, same, _ = drift(ctranslate2.Translator(str(control), intra_threads=1))
    assert nats > 0.02 and same < 2 / 3 * len(batch), f"the 4-bit control: {nats:.4f} nats, {same} equal"


def error_of(capsys, *argv):
    assert main(list(argv)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0]
    return err[0]


def test_cli_refuses_a_missing_model_dir(capsys, tmp_path):
    missing = str(tmp_path / "nope")
    out = str(tmp_path / "out")
    message = error_of(capsys, "export", "--format", "ctranslate2", "--model-dir", missing, "--out", out)
    assert message == f"keras-transformer: error: no such model directory: {missing}"


def test_cli_refuses_quantization_of_the_tensorflow_export(capsys, tmp_path):
    out = str(tmp_path / "out")
    message = error_of(capsys, "export", "--model-dir", str(tmp_path), "--out", out, "--quantization", "int8")
    assert message == "keras-transformer: error: --quantization applies to --format ctranslate2 only"


def test_refuses_a_directory_in_use(tokenizer, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("keep me")
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size))
    with pytest.raises(CTranslate2ExportError) as error:
        export_ctranslate2(model, tokenizer, str(tmp_path / "out"))
    want = f"{tmp_path / 'out'} exists and is not empty: the CTranslate2 model needs a new directory"
    assert str(error.value) == want
    assert os.listdir(tmp_path / "out") == ["notes.txt"]


def test_refuses_an_unknown_quantization(tokenizer, tmp_path):
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size))
    with pytest.raises(CTranslate2ExportError) as error:
        export_ctranslate2(model, tokenizer, str(tmp_path / "out"), quantization="int3")
    assert str(error.value) == (
        "unknown CTranslate2 quantization 'int3'; choose one of "
        "int8, int8_float32, int8_float16, int8_bfloat16, int16, float16, bfloat16, float32"
    )
    assert not (tmp_path / "out").exists()


def test_refuses_without_the_ctranslate2_package(tokenizer, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # `import ctranslate2` raises ImportError
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size))
    with pytest.raises(CTranslate2ExportError) as error:
        export_ctranslate2(model, tokenizer, str(tmp_path / "out"))
    want = "the CTranslate2 export needs the ctranslate2 package: pip install 'keras-aiayn[ctranslate2]'"
    assert str(error.value) == want


def test_refuses_a_tokenizer_with_a_piece_named_like_the_pad_token(fixture_pairs, tmp_path):
    sources, targets = fixture_pairs
    model_file = tmp_path / "blank"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sources + targets),
        model_prefix=str(model_file),
        vocab_size=200,
        pad_id=0,
        bos_id=1,
        eos_id=2,
        unk_id=3,
        user_defined_symbols=["<blank>"],
        minloglevel=2,
    )
    tokenizer = SubwordTokenizer.load(f"{model_file}.model")
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size))
    with pytest.raises(CTranslate2ExportError) as error:
        export_ctranslate2(model, tokenizer, str(tmp_path / "out"))
    assert str(error.value) == "the tokenizer has a piece '<blank>', CTranslate2's name for the pad token"


@pytest.mark.slow
def test_scores_equal_ctranslate2s_score_batch(trained):
    """`Translator.score` vs CTranslate2's `score_batch` on the exported weights, token by token
    (EOS included). CTranslate2's pad/start bias renormalises its softmax over the other tokens
    (`never_generated_bias`); ours, as our search, is over the full vocabulary: the difference is
    -log(1 - p(pad) - p(start)) at each position, taken from our model's own distribution."""
    sources, references = read_pairs(str(FIXTURE), "test")
    translator = Translator(trained.model, trained.tokenizer)
    ours = translator.score(sources, references)
    rows, targets = trained.source_rows(sources), translator.target_ids(references)
    theirs = trained.translator.score_batch(
        [trained.source_tokens(row) for row in rows], [[trained.tokens[i] for i in target] for target in targets]
    )
    largest = 0.0
    for row, target, mine, result in zip(rows, targets, ours, theirs):
        target_in = np.array([[START_ID, *target]], np.int32)
        logits = trained.model((row[None], target_in), training=False).numpy()[0]  # [T + 1, V]
        probs = tf.nn.softmax(logits, axis=-1).numpy()
        renormalised = np.array(mine.token_log_probs) - np.log1p(-probs[:, PAD_ID] - probs[:, START_ID])
        np.testing.assert_allclose(result.log_probs, renormalised, atol=1e-4)
        largest = max(largest, float(np.max(np.abs(np.array(result.log_probs) - mine.token_log_probs))))
    assert largest < 0.05  # the renormalisation is small on a trained model, but not nothing


@pytest.mark.slow
def test_greedy_with_a_prefix_equals_ctranslate2s_target_prefix(trained):
    sources = read_pairs(str(FIXTURE), "test")[0][:12]
    translator = Translator(trained.model, trained.tokenizer, beam_size=1, alpha=0.0)
    references = read_pairs(str(FIXTURE), "test")[1][:12]
    prefixes = [" ".join(reference.split()[:k]) for k, reference in zip([1, 2, 3, 0] * 3, references)]
    prefix_rows = translator.target_ids(prefixes)
    rows = trained.source_rows(sources)
    batch = padded(rows)
    ours = greedy_search(trained.model, batch, target_prefix=padded(prefix_rows)).ids.numpy()[:, 0]
    limits = decode_limits(batch, trained.model.config.max_length).numpy()
    for i, (row, prefix, limit) in enumerate(zip(rows, prefix_rows, limits)):
        (result,) = trained.translator.translate_batch(
            [trained.source_tokens(row)],
            target_prefix=[[trained.tokens[t] for t in prefix]],
            beam_size=1,
            max_decoding_length=int(limit),
            return_end_token=True,
        )
        theirs = [trained.ids[token] for token in result.hypotheses[0]]
        assert theirs[: len(prefix)] == list(prefix)
        assert theirs == [int(t) for t in ours[i] if t != PAD_ID], sources[i]
    texts = translator.translate(sources, prefixes)
    assert all(text.startswith(prefix) for text, prefix in zip(texts, prefixes))


# Each control alone, and after a target prefix, with CTranslate2's names: our value and its.
CONTROLS = {
    "repetition_penalty": {"repetition_penalty": 1.8},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 2},
    "min_decoding_length": {},  # 4 tokens past the longest unconstrained output, below
    "max_decoding_length": {"max_decoding_length": 7},
    "disable_unk": {"disable_unk": True},
    "suppress_sequences": {},  # the two most frequent tokens of the unconstrained outputs, below
}


def control_settings(trained, name, ours_greedy):
    """(our settings, CTranslate2's translate_batch options) of control `name`."""
    ours = dict(CONTROLS[name])
    if name == "suppress_sequences":
        counts = np.bincount([t for row in ours_greedy for t in row if t > EOS_ID], minlength=4)
        frequent = [int(i) for i in np.argsort(counts)[::-1][:2]]
        pair = (frequent[0], frequent[1])
        return {"suppress": ((frequent[0],), pair)}, {
            "suppress_sequences": [[trained.tokens[frequent[0]]], [trained.tokens[i] for i in pair]]
        }
    if name == "min_decoding_length":  # longer than every plain output (a shorter one would change nothing)
        ours = {"min_decoding_length": max(len(row) for row in ours_greedy) + 4}
    theirs = dict(ours)
    return ours, theirs


# Beam 4 with no_repeat_ngram_size 2 and no prefix: CTranslate2 finds a better-scoring translation
# than ours on 3 of the 8 sentences (e.g. -73.07 against our -75.85, sum of log-probabilities): our beam
# loses a hypothesis that its keeps. Greedy is equal token for token. An open difference (issue 50's note).
BEAM_GAP = pytest.mark.xfail(reason="beam 4 + no_repeat_ngram_size: CTranslate2's beam keeps a better hypothesis")


@pytest.mark.slow
@pytest.mark.parametrize("with_prefix", [False, True], ids=["alone", "after-a-prefix"])
@pytest.mark.parametrize("name", list(CONTROLS))
def test_each_control_equals_ctranslate2s(trained, name, with_prefix, request):
    """Greedy token for token, and beam 4 at alpha 0 the same best translation for at least 3/4
    of the sentences (float ties part the rest, as in `test_beam_4_at_alpha_0_equals_ctranslate2s`),
    with one control on, alone or after a target prefix (the first two tokens of the plain greedy
    output), on the same weights; and the control changes the output of that search (same beam
    width, same prefix) without it, so a control that did nothing would fail."""
    if name == "no_repeat_ngram_size" and not with_prefix:
        request.applymarker(BEAM_GAP)
    sources = read_pairs(str(FIXTURE), "test")[0]
    rows = trained.source_rows(sources)
    batch = padded(rows)
    plain = [[int(t) for t in row if t != PAD_ID] for row in greedy_search(trained.model, batch).ids.numpy()[:, 0]]
    ours_settings, theirs_settings = control_settings(trained, name, plain)
    suppress_ids = ours_settings.pop("suppress", ())
    prefixes = [row[:2] if len(row) > 3 else [] for row in plain] if with_prefix else [[] for _ in rows]
    prefix_batch = padded([row or [PAD_ID] for row in prefixes]) if with_prefix else None
    limits = decode_limits(batch, trained.model.config.max_length).numpy()  # [B]
    for beam_size in (1, 4):
        settings = {"beam_size": beam_size, "alpha": 0.0, "nbest": 1, **ours_settings}
        ours = beam_search(trained.model, batch, target_prefix=prefix_batch, suppress_ids=suppress_ids, **settings)
        ours = [[int(t) for t in row if t != PAD_ID] for row in ours.ids.numpy()[:, 0]]
        alone = beam_search(trained.model, batch, target_prefix=prefix_batch, beam_size=beam_size, alpha=0.0, nbest=1)
        alone = [[int(t) for t in row if t != PAD_ID] for row in alone.ids.numpy()[:, 0]]
        # The control changed something at this very beam width and prefix (unk is rare when trained).
        assert ours != alone or name == "disable_unk", f"beam {beam_size}: {name} changed nothing"
        same = 0
        for i, (row, limit) in enumerate(zip(rows, limits)):
            options = {"min_decoding_length": 0, "max_decoding_length": int(limit), **theirs_settings}
            if "max_decoding_length" in theirs_settings:
                options["max_decoding_length"] = min(int(limit), theirs_settings["max_decoding_length"])
            prefix = {"target_prefix": [[trained.tokens[t] for t in prefixes[i]]]} if prefixes[i] else {}
            (result,) = trained.translator.translate_batch(
                [trained.source_tokens(row)], beam_size=beam_size, length_penalty=0.0, return_end_token=True,
                **prefix, **options,
            )  # fmt: skip
            theirs = [trained.ids[token] for token in result.hypotheses[0]]
            if beam_size == 1:
                assert theirs == ours[i], (name, sources[i])
            same += theirs == ours[i]
        assert same >= 0.75 * len(rows), f"beam 4: {same} of {len(rows)} the same"


@pytest.mark.slow
def test_alternatives_after_a_prefix_equal_ctranslate2s(trained):
    """`translate_alternatives` is CTranslate2's `return_alternatives`: the n most likely tokens
    after the prefix (never EOS), each continued by the search, in the same order and the same
    tokens (greedy continuations)."""
    sources = read_pairs(str(FIXTURE), "test")[0][:6]
    rows = trained.source_rows(sources)
    plain = greedy_search(trained.model, padded(rows)).ids.numpy()[:, 0]
    prefixes = [[int(t) for t in row[:1]] for row in plain]
    ours = Translator(trained.model, trained.tokenizer, beam_size=1, alpha=0.0)
    limits = decode_limits(padded(rows), trained.model.config.max_length).numpy()
    for i, (row, prefix) in enumerate(zip(rows, prefixes)):
        ids, _ = ours.decode(padded([row]), 3, target_prefix=padded([prefix]), alternatives=True)
        mine = [[int(t) for t in hypothesis if t != PAD_ID] for hypothesis in ids.numpy()[0]]
        (result,) = trained.translator.translate_batch(
            [trained.source_tokens(row)], target_prefix=[[trained.tokens[t] for t in prefix]], beam_size=1,
            num_hypotheses=3, return_alternatives=True, max_decoding_length=int(limits[i]), min_decoding_length=0,
            return_end_token=True,
        )  # fmt: skip
        theirs = [[trained.ids[token] for token in hypothesis] for hypothesis in result.hypotheses]
        assert mine == theirs, sources[i]
        assert len({hypothesis[1] for hypothesis in mine}) == 3  # three different words after the prefix
