"""Multilingual models (Johnson et al., 2017; the README's "Training workflows"): sources of several
target languages, each source sentence led by its target language's piece (`<2fr>`), one token;
`Translator(..., target_lang=)`, `translate`/`evaluate --target-lang`, and the SavedModel's
`translate_to` signature. One tiny model trained once for the module on both fixtures."""

import functools
import json
import os

import numpy as np
import pytest
import tensorflow as tf
from conftest import DATA, FIXTURE, TINY_TRAINING

from keras_transformer.cli.main import main
from keras_transformer.config import BIBLE_EN_DE, BIBLE_EN_FR, DataConfig, DecodingConfig, weighted_sources
from keras_transformer.data.batching import make_batches
from keras_transformer.data.mixing import training_pairs
from keras_transformer.data.sources import read_pairs
from keras_transformer.exporters.serving_check import check_saved_model, serve_saved_model
from keras_transformer.exporters.signatures import TranslationModule
from keras_transformer.exporters.tensorflow import tflite_metadata
from keras_transformer.model_dir import ModelDir, load_model
from keras_transformer.search.decoding import beam_search
from keras_transformer.translation.translator import Translator

FIXTURE_FR = DATA / "fixture_bible.en-fr.tsv"
BOTH = f"{FIXTURE}:0.5,{FIXTURE_FR}:0.5"
SOURCES = ["In the beginning God created the heavens and the earth.", "Jesus wept.", "", "The Lord is my shepherd."]
GREEDY = DecodingConfig.greedy()


@pytest.fixture(scope="module")
def multilingual(tmp_path_factory):
    """A 1-layer tiny model trained for 20 steps on the EN-DE and EN-FR fixtures, half each."""
    model_dir = str(tmp_path_factory.mktemp("multilingual") / "model")
    flags = [*TINY_TRAINING, "--num-layers", "1", "--max-length", "48", "--max-steps", "20", "--steps-per-epoch", "10"]
    assert main(["train", "--data", BOTH, "--model-dir", model_dir, *flags]) == 0
    return model_dir


def test_sources_of_several_target_languages_make_a_multilingual_model():
    assert weighted_sources("bible-en-de,bible-en-fr") == ((BIBLE_EN_DE, 0.5), (BIBLE_EN_FR, 0.5))
    assert weighted_sources("bible-en-de:1,bible-en-fr:3") == ((BIBLE_EN_DE, 0.25), (BIBLE_EN_FR, 0.75))
    assert weighted_sources("a.en-de.tsv,b.en-fr.tsv") == (("a.en-de.tsv", 0.5), ("b.en-fr.tsv", 0.5))
    assert weighted_sources("a.tsv,b.tsv") == (("a.tsv,b.tsv", 1.0),)  # one source of two files, as before
    data = DataConfig(data="bible-en-de:0.5,bible-en-fr:0.5")
    assert data.languages() == ("de", "fr") and data.multilingual
    assert not DataConfig(data="bible-en-de:0.3,software-en-de:0.7").multilingual  # two domains, one language
    assert DataConfig(data="bible-en-de", reverse=True).languages() == ("en",)
    explicit = DataConfig(data="a.tsv:1,b.tsv:1", target_langs="de,fr")
    assert explicit.multilingual and [one.target_langs for one, _ in explicit.sources()] == ["de", "fr"]
    with pytest.raises(ValueError, match="not every name says one: pass target_langs"):
        DataConfig(data="a.tsv:1,b.en-fr.tsv:1,c.en-de.tsv:1")
    with pytest.raises(ValueError, match=r"target_langs names 1 language\(s\) for 2 source\(s\)"):
        DataConfig(data="a.tsv:1,b.tsv:1", target_langs="de")


def test_the_embedded_bible_en_fr_is_split_by_the_same_books():
    sources, targets = read_pairs(BIBLE_EN_FR, "test")
    assert sources == read_pairs(BIBLE_EN_DE, "test")[0]  # the same English verses: Ruth, Esther, Romans, James
    assert len(sources) == 793 and targets[0] != read_pairs(BIBLE_EN_DE, "test", limit=1)[1][0]


def test_the_tokenizer_encodes_each_language_token_as_one_id(multilingual):
    tokenizer = ModelDir(multilingual).tokenizer()
    assert tokenizer.lang_ids == {"de": 4, "fr": 5}  # right after the reserved ids
    stored = json.load(open(os.path.join(multilingual, "config.json")))
    assert stored["target_langs"] == ["de", "fr"]
    metadata = tflite_metadata(ModelDir(multilingual).read()["model"], GREEDY, (), tokenizer.lang_ids)
    assert metadata["target_lang_ids"] == {"de": 4, "fr": 5}
    plain = tokenizer.tokenize(["Jesus wept."]).to_list()[0]
    tagged = tokenizer.tokenize_source(["<2de> Jesus wept.", "<2fr> Jesus wept.", "<2fr>Jesus wept.", "Jesus wept."])
    assert tagged.to_list() == [[4, *plain], [5, *plain], [5, *plain], plain]
    ids, counts = tokenizer.source_ids(["<2fr> Jesus wept.", "<2fr> ", ""], 48)
    assert ids.numpy()[0, : len(plain) + 2].tolist() == [5, *plain, 2] and counts.numpy().tolist() == [
        len(plain) + 1,
        0,  # a language's token alone: nothing to translate
        0,
    ]
    # The TFLite text model's ops (no regex): SentencePiece reads "<2fr> x" as "▁", "<2fr>", "▁x"
    texts = ["<2fr> Jesus wept.", "<2de> In the beginning", "Jesus wept.", "<2fr> ", ""]
    lite_ids, lite_counts = tokenizer.source_ids(texts, 48, lite=True)
    ids, counts = tokenizer.source_ids(texts, 48)
    assert lite_ids.numpy().tolist() == ids.numpy().tolist() and lite_counts.numpy().tolist() == counts.numpy().tolist()


def test_each_source_sentence_gets_its_target_languages_token(multilingual):
    data = DataConfig(data=BOTH)
    french = {line.split("\t")[1] for line in FIXTURE_FR.read_text(encoding="utf-8").splitlines()}
    pairs = list(training_pairs(data, seed=1, shuffle_buffer=100).take(200).as_numpy_iterator())
    for source, target in pairs:
        token = "<2fr> " if target.decode("utf-8") in french else "<2de> "
        assert source.decode("utf-8").startswith(token), (source, target)
    assert 40 < sum(source.startswith(b"<2fr> ") for source, _ in pairs) < 160
    tokenizer = ModelDir(multilingual).tokenizer()
    stream = tf.data.Dataset.from_tensor_slices(([s for s, _ in pairs], [t for _, t in pairs]))
    batches = make_batches(stream, tokenizer, max_length=48, batch_tokens=512, training=False)
    first = {int(i) for (source_ids, _), _ in batches.as_numpy_iterator() for i in source_ids[:, 0]}
    assert first == {4, 5}  # the encoder's first input token is the language's, one id


@pytest.fixture(scope="module")
def scrambled(multilingual):
    """The trained model with large random weights (as conftest's `scrambled_model`), and its
    tokenizer: 20 tiny steps give the same few tokens for every input, random weights make each
    output depend on the whole input, so a language's token shows in the output."""
    model, tokenizer, _ = load_model(multilingual)
    rng = np.random.default_rng(1)
    for weight in model.weights:
        if "layer_norm" not in weight.path:
            weight.assign(rng.normal(scale=2.0, size=weight.shape) / np.sqrt(weight.shape[0]))
    return model, tokenizer


@pytest.fixture(scope="module")
def translator(scrambled):
    return Translator(*scrambled, GREEDY)


def test_translator_translates_into_the_language_asked(translator):
    german = translator.translate(SOURCES, target_lang="de")
    french = translator.translate(SOURCES, target_lang="fr")
    assert german[2] == french[2] == ""
    assert german[0] != french[0] and german[1] != french[1] and german[3] != french[3]  # the token reaches the encoder
    assert translator.translate([f"<2fr> {s}" if s else s for s in SOURCES]) == french  # the token in the text
    mixed = translator.translate(SOURCES, target_lang=["de", "fr", "de", "fr"])
    assert mixed == [german[0], french[1], "", french[3]]
    nbest = translator.translate_nbest(SOURCES[1], target_lang="fr")
    assert nbest[0][0] == french[1]
    with pytest.raises(ValueError, match=r"multilingual model translates into de, fr: pass a target language"):
        translator.translate(SOURCES)
    with pytest.raises(ValueError, match=r"unknown target language 'es': this model translates into de, fr"):
        translator.translate(SOURCES, target_lang="es")
    with pytest.raises(ValueError, match=r"multilingual model translates into de, fr: pass a target language"):
        translator.translate_with_alignments(SOURCES)
    translation, pairs = translator.translate_with_alignments(f"<2fr> {SOURCES[1]}")  # the token counts as word 0
    assert translation == french[1] and all(0 <= i <= len(SOURCES[1].split()) for i, _ in pairs)


def test_a_target_language_for_a_model_of_one_language_is_an_error(untrained_model_dir):
    with pytest.raises(ValueError, match=r"translates into one language \(no <2xx> tokens\)"):
        Translator.from_model_dir(untrained_model_dir).translate("Amen.", target_lang="fr")


@pytest.mark.slow  # the command line's twin of the Translator tests above (issue 50: make test's time)
def test_translate_and_evaluate_take_the_target_language(multilingual, capsys):
    flags = ["--model-dir", multilingual, "--beam-size", "1", "--alpha", "0"]
    assert main(["translate", *flags, "--target-lang", "fr", SOURCES[1]]) == 0
    expected = Translator.from_model_dir(multilingual, decoding=GREEDY).translate(SOURCES[1], target_lang="fr")
    assert capsys.readouterr().out == expected + "\n"
    assert main(["translate", *flags, SOURCES[1]]) == 2
    assert "error: this multilingual model translates into de, fr: pass a target language" in capsys.readouterr().err
    assert main(["translate", *flags, "--target-lang", "xx", SOURCES[1]]) == 2
    assert "error: unknown target language 'xx'" in capsys.readouterr().err
    assert main(["evaluate", *flags, "--target-lang", "fr", "--limit", "4", "--show", "1"]) == 0
    out = capsys.readouterr().out
    scores = json.loads(out.splitlines()[-1])
    assert scores["target_lang"] == "fr" and scores["sentences"] == 4
    french_test = read_pairs(str(FIXTURE_FR), "test", limit=1)  # the French source's test split
    assert f"reference:  {french_test[1][0]}" in out


def test_score_takes_the_target_language(multilingual, translator, tmp_path, capsys):
    """`score` reads the sources as `translate` does: with `target_lang` (`--target-lang`) as with
    the language's token in the text; a multilingual model needs one of the two."""
    sources, targets = SOURCES[:2], ["Jesus weinte.", "Amen."]
    french = translator.score(sources, targets, target_lang="fr")
    assert french == translator.score([f"<2fr> {s}" for s in sources], targets)
    assert [s.log_prob for s in french] != [s.log_prob for s in translator.score(sources, targets, target_lang="de")]
    with pytest.raises(ValueError, match=r"multilingual model translates into de, fr: pass a target language"):
        translator.score(sources, targets)
    data = tmp_path / "pairs.tsv"
    data.write_text("".join(f"{s}\t{t}\n" for s, t in zip(sources, targets)), encoding="utf-8")
    assert main(["score", "--model-dir", multilingual, "--data", str(data), "--target-lang", "fr"]) == 0
    printed = [float(line.split("\t")[1]) for line in capsys.readouterr().out.splitlines()]
    trained = Translator.from_model_dir(multilingual).score(sources, targets, target_lang="fr")
    np.testing.assert_allclose(printed, [score.log_prob for score in trained], atol=1e-5)
    assert main(["score", "--model-dir", multilingual, "--data", str(data)]) == 2
    assert "error: this multilingual model translates into de, fr: pass a target language" in capsys.readouterr().err


@pytest.mark.slow
def test_the_saved_model_translates_each_sentence_into_its_language(scrambled, translator, tmp_path):
    model, tokenizer = scrambled
    path = str(tmp_path / "saved_model")
    module = TranslationModule(model, tokenizer, functools.partial(beam_search, decoding=GREEDY), decoding=GREEDY)
    signatures = module.signatures()
    assert "translate_to" in signatures and "translate_to" not in TranslationModule(model, None).signatures()
    # Two signatures of the export's eight: saving and serving all of them takes 3x as long.
    served = {name: signatures[name] for name in ("serving_default", "translate_to")}
    tf.saved_model.save(module, path, signatures=served)
    assert check_saved_model(path) == []
    translate_to = tf.saved_model.load(path).signatures["translate_to"]
    langs = ["de", "fr", "de", "fr", "es", ""]
    texts = [*SOURCES, SOURCES[1], SOURCES[1]]
    outputs = translate_to(text=tf.constant(texts), target_lang=tf.constant(langs))
    got = [text.decode("utf-8") for text in outputs["translation"].numpy()]
    expected = translator.translate(texts[:4], target_lang=langs[:4])
    assert got == [*expected, "", ""]  # exactly the Translator's, per sentence
    scores = [translator.translate_nbest(text, n=1, target_lang=lang)[0][1] for text, lang in zip(texts[:4], langs[:4])]
    np.testing.assert_allclose(outputs["score"].numpy()[:4], scores, rtol=1e-5, atol=1e-6)
    errors = [error.decode("utf-8") for error in outputs["error"].numpy()]
    unknown = "unknown target language: this model translates into de, fr"
    assert errors[:4] == [""] * 4 and errors[4] == errors[5] == unknown
    assert serve_saved_model(path) == []  # hostile texts and languages, batches 0, 1, 256, as TF Serving runs it


@pytest.mark.slow
def test_the_text_tflite_model_reads_the_language_piece_as_the_saved_model_does(scrambled):
    """`translator_text.tflite` of a multilingual model: "<2fr> Jesus wept." in, the ids of the
    search on `tokenize_source`'s input out (the Translator's), for each language."""
    import tensorflow_text
    from ai_edge_litert.interpreter import InterpreterWithCustomOps

    from keras_transformer.exporters.signatures import TEXT_SPEC
    from keras_transformer.exporters.tensorflow import tflite_models

    model, tokenizer = scrambled
    lite = TranslationModule(model, tokenizer, functools.partial(beam_search, decoding=GREEDY), lite_text=True)
    flatbuffer = tflite_models(lite.translate_text_to_ids, TEXT_SPEC, custom_ops=True)[0]
    registrar = tensorflow_text.tflite_registrar.SELECT_TFTEXT_OPS
    runner = InterpreterWithCustomOps(model_content=flatbuffer, custom_op_registerers=registrar)
    runner = runner.get_signature_runner("serving_default")
    texts = [tokenizer.tagged([text], lang)[0] for text in SOURCES[:2] for lang in ("de", "fr")]
    got = runner(text=np.array([t.encode("utf-8") for t in texts], dtype=object))["ids"][:, 0]  # [B, L]
    source_ids, _ = tokenizer.source_ids(texts, model.config.max_length)
    want = beam_search(model, source_ids, decoding=GREEDY).ids.numpy()[:, 0]
    width = max(got.shape[1], want.shape[1])
    pad = lambda ids: np.pad(ids, [(0, 0), (0, width - ids.shape[1])])  # noqa: E731
    np.testing.assert_array_equal(pad(got), pad(want))
    assert (want[0] != want[1]).any()  # the language changes the output: the comparison sees the piece
