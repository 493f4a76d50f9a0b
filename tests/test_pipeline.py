"""One text pipeline (`translation/pipeline.py`, issue 49): `Translator` and the exported SavedModel
(reloaded from disk with `tf.saved_model.load`, not the in-process module) give the same output for
every kind of request, float and int8; a glossary reaches every text signature; a user modifier
reaches `Translator` and the export alike. One export of the `translating` model, with a glossary
and a modifier, serves the module's slow tests."""

import re

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.exporters.signatures import TranslationModule
from keras_transformer.exporters.tensorflow import export_tensorflow
from keras_transformer.model_dir import load_model
from keras_transformer.special_tokens import EOS_ID, PAD_ID
from keras_transformer.translation.pipeline import Request

GLOSSARY = kt.Glossary((("bread", "Gabe"),))  # the model writes "Brot": the term shows the glossary at work
SENTENCES = ["I am the bread of life.", "Thanks be to God for his unspeakable gift!", "", "So Moses went down."]
DOCUMENTS = ["I am the bread of life. He entered and was passing through Jericho.\n\nThanks be to God!", ""]
MARKUP = ["I am the <b>bread</b> of life. 🦜", "Thanks be to {name} for his gift!", "He entered Jericho."]
PREFIXES = ["Ich bin", "", "", "Da"]
CONSTRAINTS = [["Leben", ""], ["Gabe", "Dank"], ["", ""], ["Volke", ""]]
BEAM = dict(beam_size=3)


class BanToken(kt.Modifier):
    """Never generate `token` (the README's control): -inf at its logit, before the softmax."""

    def __init__(self, token: int):
        self.token = token

    def logits(self, state, logits, step):
        return tf.where(tf.range(tf.shape(logits)[-1]) == self.token, float("-inf"), logits)  # [B*K, V]


def strings(values) -> list:
    return np.vectorize(lambda value: value.decode("utf-8"), otypes=[object])(values.numpy()).tolist()


@pytest.fixture(scope="module")
def loaded(translating):
    model, tokenizer, _ = load_model(translating.model_dir)
    return model, tokenizer


@pytest.fixture(scope="module")
def banned(loaded):
    """A token that the model really emits for "So Moses went down." and not for the glossary's
    sentence (so that the export's glossary test reads the glossary alone)."""
    plain, glossary = kt.Translator(*loaded, **BEAM), kt.Translator(*loaded, glossary=GLOSSARY, **BEAM)
    emitted = lambda translator, text: translator.decode(np.array([translator.source_ids([text])[0]]), 1)[0][0, 0]
    kept = set(emitted(glossary, SENTENCES[0]).numpy().tolist()) | {PAD_ID, EOS_ID}
    return next(int(token) for token in emitted(plain, SENTENCES[3]).numpy() if token not in kept)


@pytest.fixture(scope="module")
def exported(loaded, banned, tmp_path_factory):
    """The export (float and int8 SavedModels) with the glossary and `BanToken(banned)`, reloaded."""
    model, tokenizer = loaded
    out = str(tmp_path_factory.mktemp("pipeline_export"))
    paths = export_tensorflow(
        model, tokenizer, out, tflite=False, glossary=GLOSSARY, modifiers=[BanToken(banned)], log=lambda _: None, **BEAM
    )
    return {
        kind: tf.saved_model.load(paths[key]) for kind, key in (("float", "saved_model"), ("int8", "saved_model_int8"))
    }


def python_translator(loaded, banned, int8=False) -> kt.Translator:
    return kt.Translator(*loaded, glossary=GLOSSARY, modifiers=[BanToken(banned)], int8=int8, **BEAM)


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["float", "int8"])
def test_every_request_gives_the_exported_models_output(loaded, banned, exported, kind):
    """Sentences, documents, markup with an unknown character (an emoji), a glossary, a prefix,
    constraints, n-best and per-request options: the Translator's output equals the reloaded
    SavedModel's, request for request."""
    python, saved = python_translator(loaded, banned, kind == "int8"), exported[kind].signatures
    text = tf.constant(SENTENCES)
    assert strings(saved["serving_default"](text=text)["translation"]) == python.translate(SENTENCES)
    assert strings(saved["translate_document"](text=tf.constant(DOCUMENTS))["translation"]) == python.translate(
        DOCUMENTS, split=True
    )
    markup = strings(saved["translate_markup"](text=tf.constant(MARKUP))["translation"])
    assert markup == python.translate(MARKUP, markup=True) and "🦜" in markup[0] and "<b>" in markup[0]
    nbest = saved["translate_nbest"](text=text)
    assert strings(nbest["translations"]) == [[t for t, _ in row] for row in python.translate_nbest(SENTENCES)]
    np.testing.assert_allclose(
        nbest["scores"].numpy(), [[s for _, s in row] for row in python.translate_nbest(SENTENCES)], atol=1e-4
    )
    prefixed = saved["translate_with_prefix"](text=text, prefix=tf.constant(PREFIXES))["translation"]
    assert strings(prefixed) == python.translate(SENTENCES, prefixes=PREFIXES)
    constrained = saved["translate_constrained"](text=text, constraints=tf.constant(CONSTRAINTS))["translation"]
    wanted = python.translate(SENTENCES, constraints=[[p for p in row if p] for row in CONSTRAINTS])
    assert strings(constrained) == wanted and "Volke" in wanted[3]
    aligned = saved["translate_with_alignments"](text=text)
    pairs = python.translate_with_alignments(SENTENCES)
    assert strings(aligned["translation"]) == [t for t, _ in pairs]
    options = dict(beam_size=2, alpha=0.0, max_decoding_length=12, min_decoding_length=2)
    per_text = {name: tf.fill([len(SENTENCES)], value) for name, value in options.items()}
    per_text = {**per_text, "repetition_penalty": tf.fill([4], 1.0), "no_repeat_ngram_size": tf.fill([4], 0)}
    per_text["alpha"], per_text["repetition_penalty"] = (
        tf.cast(per_text[k], tf.float32) for k in ("alpha", "repetition_penalty")
    )
    served = saved["translate_with_options"](text=text, **per_text)["translation"]
    settings = kt.Translator(*loaded, glossary=GLOSSARY, modifiers=[BanToken(banned)], int8=kind == "int8", **options)
    assert strings(served) == settings.translate(SENTENCES)


@pytest.mark.slow
def test_the_glossary_reaches_every_text_signature(exported):
    """An export with a glossary: the term's target is in the output of every text signature
    (before issue 49, only serving_default held it)."""
    saved = exported["float"].signatures
    text = tf.constant(["I am the bread of life."])
    outputs = {
        "serving_default": saved["serving_default"](text=text)["translation"],
        "translate_nbest": saved["translate_nbest"](text=text)["translations"][0],
        "translate_with_prefix": saved["translate_with_prefix"](text=text, prefix=tf.constant(["Ich"]))["translation"],
        "translate_constrained": saved["translate_constrained"](text=text, constraints=tf.constant([["Leben"]]))[
            "translation"
        ],
        "translate_markup": saved["translate_markup"](text=tf.constant(["I am the <b>bread</b> of life."]))[
            "translation"
        ],
        "translate_with_alignments": saved["translate_with_alignments"](text=text)["translation"],
        "translate_document": saved["translate_document"](text=tf.constant(["I am the bread of life. Amen."]))[
            "translation"
        ],
    }
    missing = {
        name: strings(output) for name, output in outputs.items() if not all("Gabe" in t for t in strings(output))
    }
    assert not missing


@pytest.mark.slow
def test_a_user_modifier_bans_a_token_the_model_emits_in_python_and_in_the_export(loaded, banned, exported):
    plain = kt.Translator(*loaded, **BEAM)
    modified = kt.Translator(*loaded, modifiers=[BanToken(banned)], **BEAM)
    source = np.array([plain.source_ids([SENTENCES[3]])[0]])
    assert banned in plain.decode(source, 1)[0].numpy()  # the model emits it
    assert banned not in modified.decode(source, 1)[0].numpy()
    assert modified.translate(SENTENCES[3]) != plain.translate(SENTENCES[3])
    with_glossary = python_translator(loaded, banned)
    served = strings(exported["float"].signatures["serving_default"](text=tf.constant([SENTENCES[3]]))["translation"])
    assert served == [with_glossary.translate(SENTENCES[3])] == [modified.translate(SENTENCES[3])]


def test_the_glossary_is_in_the_nbest_and_prefix_signatures_as_in_python(loaded):
    """The non-slow core: the in-process module's n-best and prefix signatures hold the glossary's
    term, as `Translator` does, and give its translations."""
    module = TranslationModule(*loaded, decoding=kt.DecodingConfig(**BEAM), glossary=GLOSSARY)
    python = kt.Translator(*loaded, glossary=GLOSSARY, **BEAM)
    text = ["I am the bread of life.", ""]
    nbest = strings(module.translate_nbest(tf.constant(text))["translations"])
    assert nbest == [[t for t, _ in row] for row in python.translate_nbest(text)] and all("Gabe" in t for t in nbest[0])
    prefixed = strings(module.translate_with_prefix(tf.constant(text), tf.constant(["Ich", ""]))["translation"])
    assert prefixed == python.translate(text, prefixes=["Ich", ""]) and "Gabe" in prefixed[0]


def test_a_request_is_checked_in_one_place_with_one_line_errors():
    beam, sampling = kt.DecodingConfig(beam_size=3), kt.DecodingConfig(sampling_topk=0, num_samples=2)
    assert Request().check(beam) == 3 and Request(n=2).check(sampling) == 2
    cases = [
        (Request(n=4), beam, "nbest must be between 1 and the beam size 3, got 4"),
        (Request(n=3), sampling, "n must be between 1 and num_samples 2, got 3"),
        (Request(split=True, prefixes="Da"), beam, "a document (split=True) takes no prefixes or constraints"),
        (Request(n=2, alternatives=True, constraints=["x"]), beam, "alternatives are searched by beam search"),
        (Request(n=2, alignments=True), beam, "alignments align the best translation of each text"),
    ]
    for request, decoding, message in cases:
        with pytest.raises(ValueError, match=f"^{re.escape(message)}") as error:
            request.check(decoding)
        assert "\n" not in str(error.value)


def test_sampling_continues_a_target_prefix(loaded):
    """Sampling takes a target prefix (the loop runs its modifier): every sample starts with it."""
    translator = kt.Translator(*loaded, sampling_topk=0, num_samples=3, seed=1)
    samples = translator.translate_nbest(["I am the bread of life."], prefixes=["Ich bin"])[0]
    assert len(samples) == 3 and all(text.startswith("Ich bin") for text, _ in samples)


def test_a_second_ranking_modifier_is_refused_in_one_line(loaded):
    from keras_transformer.search.constraints import Constraints

    translator = kt.Translator(*loaded, modifiers=[Constraints(tf.zeros([1, 1, 1], tf.int32))], **BEAM)
    with pytest.raises(ValueError, match="^modifiers Constraints, Constraints each rank the candidates"):
        translator.translate("I am the bread of life.", constraints=["Leben"])
