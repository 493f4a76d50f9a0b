"""The serving signatures in process, and the serving contract check on models that break it."""

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import DecodingConfig, Transformer, TransformerConfig
from keras_transformer.exporters.serving_check import check_saved_model
from keras_transformer.exporters.signatures import TranslationModule, truncate_source_ids
from keras_transformer.translation.translator import Translator


def test_too_long_source_ids_keep_max_length_minus_one_then_eos():
    ids = tf.constant([[5, 6, 7, 8, 9, 2, 0], [5, 6, 2, 0, 0, 0, 0], [5, 6, 7, 8, 2, 0, 0]])
    np.testing.assert_array_equal(
        truncate_source_ids(ids, max_length=4).numpy(), [[5, 6, 7, 2], [5, 6, 2, 0], [5, 6, 7, 2]]
    )
    fits = tf.constant([[5, 6, 2]])
    np.testing.assert_array_equal(truncate_source_ids(fits, max_length=4).numpy(), fits.numpy())


@pytest.fixture(scope="module")
def served(tokenizer):
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, max_length=24))
    model.build()
    return TranslationModule(model, tokenizer), Translator(model, tokenizer)


def test_signatures_equal_the_python_translator(served):
    module, python = served
    texts = ["And God said,", "", "Jesus wept.", "   "]
    out = module.translate(tf.constant(texts))
    assert [t.decode() for t in out["translation"].numpy()] == python.translate(texts)
    scores = out["score"].numpy()
    assert scores[1] == scores[3] == 0.0 and scores[0] < 0 and scores[2] < 0
    nbest = module.translate_nbest(tf.constant(texts))
    assert nbest["translations"].shape == (4, 4) and nbest["scores"].shape == (4, 4)  # beam 4 (§6.1)
    assert set(module.signatures()) == {
        "serving_default",
        "translate_ids",
        "translate_nbest",
        "translate_with_alignments",
        "translate_with_scores",
        "translate_markup",
        "translate_with_prefix",
        "translate_constrained",
        "score",
        "sample",
        "translate_with_options",
        "translate_document",
    }


def test_new_signatures_equal_the_python_translator(served):
    module, python = served
    texts = ["And God said,", "", "Jesus wept."]
    targets = ["Und Gott sprach", "Amen", ""]
    scored = module.score(tf.constant(texts), tf.constant(targets))
    want = python.score(texts, targets)
    np.testing.assert_allclose(scored["score"].numpy(), [s.score for s in want], atol=1e-5)
    np.testing.assert_allclose(scored["log_prob"].numpy(), [s.log_prob for s in want], atol=1e-5)
    assert scored["tokens"].numpy().tolist() == [s.tokens for s in want]
    prefixes = ["Und", "Da", ""]
    continued = module.translate_with_prefix(tf.constant(texts), tf.constant(prefixes))["translation"].numpy()
    assert [t.decode() for t in continued] == python.translate(texts, prefixes)
    seeded = TranslationModule(module.model, module.tokenizer, decoding=DecodingConfig(sampling_topk=0, seed=3))
    drawn = seeded.sample(tf.constant(texts[2:]))
    sampler = Translator(module.model, module.tokenizer, sampling_topk=0, seed=3)
    assert [t.decode() for t in drawn["translations"].numpy()[:, 0]] == sampler.translate(texts[2:])
    unseeded = module.sample(tf.constant(texts * 4))["translations"].numpy()
    assert unseeded.shape == (12, 1) and len({t for t in unseeded[[0, 3, 6, 9], 0]}) > 1  # independent draws


OPTIONS = [
    pytest.param({"beam_size": 4, "alpha": 0.6}, marks=pytest.mark.slow),  # the export's own: translate's
    pytest.param({"beam_size": 1, "alpha": 0.0, "max_decoding_length": 5}, marks=pytest.mark.slow),
    {"beam_size": 3, "alpha": 1.0, "min_decoding_length": 6, "repetition_penalty": 1.5, "no_repeat_ngram_size": 2},
]


@pytest.mark.parametrize("options", OPTIONS, ids=["defaults", "greedy-capped", "controls"])
def test_translate_with_options_equals_the_python_translator_with_those_settings(served, options):
    """One export serves every setting: the per-request settings as tensors give what a
    `Translator` with the same `DecodingConfig` gives."""
    module, python = served
    texts = ["And God said,", "", "Jesus wept.", "In the beginning God created the heaven"]
    settings = {"max_decoding_length": 1000, "min_decoding_length": 0, "repetition_penalty": 1.0,
                "no_repeat_ngram_size": 0, **options}  # fmt: skip
    per_text = {key: tf.constant([value] * len(texts)) for key, value in settings.items()}
    out = module.translate_with_options(tf.constant(texts), **per_text)
    want = Translator(python.model, python.tokenizer, **options).translate(texts)
    assert [t.decode() for t in out["translation"].numpy()] == want and set(out["error"].numpy()) == {b""}
    scores = Translator(python.model, python.tokenizer, **options).translate_nbest(texts, n=1)
    np.testing.assert_allclose(out["score"].numpy(), [row[0][1] for row in scores], atol=1e-4)


def test_translate_with_options_refuses_a_texts_settings_out_of_range_and_serves_the_others(served):
    module, python = served
    texts = ["Jesus wept.", "Jesus wept.", "Jesus wept.", "Jesus wept."]
    settings = {
        "beam_size": [4, 0, 4, 1000],
        "alpha": [0.6, 0.6, float("nan"), 0.6],
        "max_decoding_length": [1000, 1000, 1000, 1000],
        "min_decoding_length": [0, 0, 0, 0],
        "repetition_penalty": [1.0, 1.0, 1.0, 1.0],
        "no_repeat_ngram_size": [0, 0, 0, 0],
    }
    out = module.translate_with_options(tf.constant(texts), **{k: tf.constant(v) for k, v in settings.items()})
    errors = [e.decode() for e in out["error"].numpy()]
    assert errors == [
        "",
        "beam_size must be >= 1",
        "alpha must be >= 0",
        "beam_size must be at most 64",
    ]
    translations = [t.decode() for t in out["translation"].numpy()]
    assert translations == [python.translate("Jesus wept."), "", "", ""] and out["score"].numpy()[1] == 0.0


def test_translate_constrained_equals_the_python_translator(served):
    module, python = served
    texts = ["And God said,", "", "Jesus wept.", "Amen."]
    phrases = [["Gott", ""], ["Gott", "und"], ["Tag für", "und"], ["", ""]]  # "": no phrase
    out = module.translate_constrained(tf.constant(texts), tf.constant(phrases))
    translations = [t.decode() for t in out["translation"].numpy()]
    assert translations == python.translate(texts, constraints=[[p for p in row if p] for row in phrases])
    assert translations[1] == "" and out["score"].numpy()[1] == 0.0  # no source tokens: nothing to translate
    assert "Gott" in translations[0] and "Tag für" in translations[2] and "und" in translations[2]
    assert translations[3] == python.translate("Amen.")
    empty = module.translate_constrained(tf.constant(texts[:2]), tf.zeros([2, 0], tf.string))
    assert [t.decode() for t in empty["translation"].numpy()] == python.translate(texts[:2])


class Unservable(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([], tf.float32, name="x")])
    def scalar_py_func(self, x):
        return {"y": tf.py_function(lambda v: v + 1, [x], tf.float32)}

    @tf.function(input_signature=[tf.TensorSpec([3, None], tf.int32, name="ids")])
    def fixed_batch(self, ids):
        return {"ids": ids + 1}


def test_check_reports_every_broken_rule(tmp_path):
    module = Unservable()
    path = str(tmp_path / "1")
    tf.saved_model.save(
        module, path, signatures={"scalar_py_func": module.scalar_py_func, "fixed_batch": module.fixed_batch}
    )
    problems = "\n".join(check_saved_model(path))
    assert "no serving_default signature" in problems
    assert "signature scalar_py_func input 'x' has no batch dimension" in problems
    assert "signature scalar_py_func output 'y' has no batch dimension" in problems
    assert "signature fixed_batch input 'ids' has a fixed first dimension 3" in problems
    assert "op EagerPyFunc calls back into Python" in problems


class FailsOnEmptyBatches(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def serving_default(self, text):
        tf.debugging.assert_positive(tf.size(text), message="no text")
        return {"length": tf.strings.length(text)}


def test_check_serves_hostile_inputs_and_reports_failures(tmp_path):
    from keras_transformer.exporters.serving_check import check_export

    module = FailsOnEmptyBatches()
    tf.saved_model.save(module, str(tmp_path / "saved_model" / "m" / "1"), signatures=module.serving_default)
    problems = check_export(str(tmp_path))
    assert len(problems) == 1 and "signature serving_default on a batch of 0 hostile inputs failed" in problems[0]
    assert "no text" in problems[0]


def test_export_command_needs_a_model_dir_and_an_output(capsys, tmp_path):
    from keras_transformer.cli.main import main

    assert main(["export", "--out", str(tmp_path)]) == 2
    assert "export needs --model-dir and --out (or --check OUT)" in capsys.readouterr().err
    assert main(["export", "--check", str(tmp_path)]) == 1
    assert "no SavedModel under saved_model/<name>/<version>/" in capsys.readouterr().err


@pytest.mark.slow
def test_a_savedmodel_decoding_with_xla_gives_the_graphs_translations(served, tmp_path):
    """`export --jit-compile`: the signatures' search compiled by XLA, saved and loaded in a
    fresh object (as TF Serving loads it), translates as the TensorFlow graph does."""
    import functools

    from keras_transformer.search.decoding import beam_search

    module, python = served
    xla = TranslationModule(module.model, module.tokenizer, functools.partial(beam_search, jit_compile=True))
    tf.saved_model.save(xla, str(tmp_path / "1"), signatures=xla.signatures())
    loaded = tf.saved_model.load(str(tmp_path / "1")).signatures["serving_default"]
    texts = ["And God said,", "", "Jesus wept."]
    assert [t.decode() for t in loaded(text=tf.constant(texts))["translation"].numpy()] == python.translate(texts)
    with_xla = Translator(python.model, python.tokenizer, python.decoding, jit_compile=True)
    assert with_xla.translate(texts) == module.translate(tf.constant(texts))["translation"].numpy().astype(str).tolist()
