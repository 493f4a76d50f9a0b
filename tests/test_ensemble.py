"""Ensemble decoding (search/ensemble.py): the step's log of the mean probability by hand, an
ensemble of one model (or of a model with itself) decodes as the model, refused mismatches, the
command line, and an exported ensemble that serves as the Python one."""

import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE
from test_export import assert_same_beams, decoded, run_artifact, texts

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.exporters.tensorflow import export_tensorflow
from keras_transformer.model_dir import ModelDir
from keras_transformer.search.decoding import beam_search
from keras_transformer.special_tokens import EOS_ID, START_ID
from keras_transformer.translation.alignment import format_pharaoh

SENTENCES = ["In the beginning God created the heavens and the earth.", "Jesus wept.", "And God said,"]
SOURCE = np.array([[40, 41, 42, 43, 2], [50, 51, 2, 0, 0]], np.int32)


def tiny(tokenizer, **overrides):
    model = kt.Transformer(
        kt.TransformerConfig.tiny(**{"vocab_size": tokenizer.vocab_size, "max_length": 24, **overrides})
    )
    model.build()
    return model


@pytest.fixture(scope="module")
def models(tokenizer):
    """Two different models (weights and depth) of one vocabulary."""
    return tiny(tokenizer, num_layers=1), tiny(tokenizer, num_layers=2)


def write_model_dir(path, model, tokenizer):
    directory = ModelDir(str(path))
    directory.write(model.config, kt.TrainingConfig(), "fixture", tokenizer)
    directory.checkpoint_manager(tf.train.Checkpoint(model=model)).save(checkpoint_number=1)
    return directory.path


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory, models, tokenizer):
    root = tmp_path_factory.mktemp("ensemble")
    return [write_model_dir(root / name, model, tokenizer) for name, model in zip("ab", models)]


def log_mean_softmax(logits):
    """log((1/M) sum_m softmax(logits_m)) in NumPy float64; logits [M, ..., V]."""
    logits = np.asarray(logits, np.float64)
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.log(probs.mean(0))


def test_a_step_gives_the_log_of_the_mean_of_the_models_softmaxes(models):
    ensemble = kt.Ensemble(models)
    target_in = np.array([[START_ID, 60, 61], [START_ID, 70, 71]], np.int32)
    full = np.stack([model((SOURCE, target_in)).numpy() for model in models])  # [M, B, T, V]
    want = log_mean_softmax(full)  # [B, T, V]
    assert np.abs(full[0] - full[1]).max() > 0.1  # the models disagree: the mean is not either's
    context, cache = ensemble.start_decoding(SOURCE, 1)
    for position in range(target_in.shape[1]):
        log_probs, cache = ensemble.decode_step(target_in[:, position], position, cache, context)  # [B, V]
        np.testing.assert_allclose(log_probs.numpy(), want[:, position], atol=1e-5)
        np.testing.assert_allclose(np.exp(log_probs.numpy()).sum(-1), 1.0, rtol=1e-5)  # normalized


def test_the_teacher_forced_pass_gives_the_log_of_the_mean_of_the_models_softmaxes(models):
    """`Ensemble.__call__`, what scoring reads: at every target position at once."""
    target_in = np.array([[START_ID, 60, 61, 62], [START_ID, 70, 0, 0]], np.int32)
    want = log_mean_softmax(np.stack([model((SOURCE, target_in)).numpy() for model in models]))  # [B, T, V]
    got = kt.Ensemble(models)((SOURCE, target_in))
    assert got.dtype == tf.float32 and got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want, atol=1e-5)


def test_an_ensemble_scores_a_pair_by_the_log_of_the_mean_of_the_models_softmaxes(models, tokenizer):
    """Its log-probability of a target (and EOS) is the sum, over the target's tokens, of the log of
    the mean probability the models give each, by hand in NumPy."""
    translator = kt.Translator(kt.Ensemble(models), tokenizer, alpha=0.0)
    (source,) = translator.source_ids(["Jesus wept."])  # [S]: ids, EOS
    target = tokenizer.tokenize(["Jesus weinte."]).to_list()[0]
    target_in, target_out = np.array([[START_ID, *target]], np.int32), [*target, EOS_ID]
    full = np.stack([model((source[None], target_in)).numpy() for model in models])  # [M, 1, T, V]
    by_hand = log_mean_softmax(full)[0, np.arange(len(target_out)), target_out]  # [T]
    (scored,) = translator.score(["Jesus wept."], ["Jesus weinte."])
    assert scored.tokens == len(target_out)
    np.testing.assert_allclose(scored.token_log_probs, by_hand, atol=1e-5)
    assert scored.log_prob == pytest.approx(by_hand.sum(), abs=1e-4) and scored.score == scored.log_prob  # alpha 0
    alone = [
        kt.Translator(model, tokenizer, alpha=0.0).score(["Jesus wept."], ["Jesus weinte."])[0] for model in models
    ]
    assert all(abs(one.log_prob - scored.log_prob) > 1e-3 for one in alone)  # neither model's alone


def test_an_ensemble_of_one_model_decodes_as_the_model(models):
    for ensemble in (kt.Ensemble(models[:1]), kt.Ensemble([models[0], models[0]])):
        want, got = beam_search(models[0], SOURCE), beam_search(ensemble, SOURCE)
        np.testing.assert_array_equal(got.ids.numpy(), want.ids.numpy())
        np.testing.assert_allclose(got.scores.numpy(), want.scores.numpy(), rtol=1e-5)


# Slow (issue 50 item 10): `make test` holds XLA's beams to the graph's in tests/test_decoding.py.
@pytest.mark.slow
def test_an_ensemble_decodes_with_xla_as_in_the_graph(models):
    ensemble = kt.Ensemble(models)
    want, got = beam_search(ensemble, SOURCE), beam_search(ensemble, SOURCE, jit_compile=True)
    np.testing.assert_array_equal(got.ids.numpy(), want.ids.numpy())
    np.testing.assert_allclose(got.scores.numpy(), want.scores.numpy(), rtol=1e-4)


def test_models_must_agree_on_the_vocabulary_and_the_length_limit(models, tokenizer):
    with pytest.raises(ValueError, match="must agree on vocab_size, got 397, 500"):
        kt.Ensemble([kt.Transformer(kt.TransformerConfig.tiny(vocab_size=n)) for n in (397, 500)])
    with pytest.raises(ValueError, match="must agree on max_length, got 24, 32"):
        kt.Ensemble([models[0], tiny(tokenizer, max_length=32)])
    with pytest.raises(ValueError, match="at least one model"):
        kt.Ensemble([])


def test_a_translator_of_several_model_dirs_translates_as_their_ensemble(model_dirs, models, tokenizer):
    translator = kt.Translator.from_model_dir(model_dirs)
    assert isinstance(translator.model, kt.Ensemble) and len(translator.model.models) == 2
    assert translator.translate(SENTENCES) == kt.Translator(kt.Ensemble(models), tokenizer).translate(SENTENCES)
    alone = kt.Translator.from_model_dir(model_dirs[:1])
    assert isinstance(alone.model, kt.Transformer)


def test_model_dirs_of_other_tokenizers_are_refused(tmp_path, model_dirs, fixture_pairs, capsys):
    sources, targets = fixture_pairs
    other = SubwordTokenizer.train(targets + sources[:200], 400, seed=3)
    assert other.model_proto != ModelDir(model_dirs[0]).tokenizer().model_proto
    path = write_model_dir(tmp_path / "other", tiny(other, num_layers=1), other)
    message = f"{path} has another tokenizer than {model_dirs[0]}: an ensemble's models must share one"
    with pytest.raises(ValueError, match=message):
        kt.Translator.from_model_dir([model_dirs[0], path])
    assert main(["translate", "--model-dir", model_dirs[0], "--model-dir", path, "Amen."]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error


@pytest.mark.slow  # the command line's twin of the Translator tests above (issue 50: make test's time)
def test_translate_and_evaluate_take_several_model_dirs(model_dirs, capsys):
    assert (
        main(["translate", "--no-split", "--model-dir", model_dirs[0], "--model-dir", model_dirs[1], *SENTENCES]) == 0
    )
    assert capsys.readouterr().out.splitlines() == kt.Translator.from_model_dir(model_dirs).translate(SENTENCES)
    data = ["--data", str(FIXTURE), "--split", "test", "--limit", "3", "--show", "0"]
    assert main(["evaluate", "--model-dir", model_dirs[0], "--model-dir", model_dirs[1], *data]) == 0
    assert '"models": ["' + model_dirs[0] + '", "' + model_dirs[1] + '"]' in capsys.readouterr().out


@pytest.fixture(scope="module")
def exported(tmp_path_factory, model_dirs):
    out = str(tmp_path_factory.mktemp("ensemble_export") / "export")
    ensemble, tokenizer = kt.Ensemble.from_model_dirs(model_dirs)
    return export_tensorflow(ensemble, tokenizer, out, log=lambda message: None), kt.Translator(ensemble, tokenizer)


@pytest.mark.slow
def test_an_exported_ensemble_serves_as_the_python_ensemble(exported):
    paths, translator = exported
    source_ids = np.array([[40, 41, 42, 43, 2], [50, 51, 2, 0, 0]], np.int32)
    reference = beam_search(translator.model, source_ids)
    outputs = run_artifact(
        "session",
        paths["saved_model"],
        [
            ("serving_default", {"text": texts(SENTENCES)}),
            ("translate_ids", {"source_ids": source_ids}),
            ("translate_with_alignments", {"text": texts(SENTENCES)}),
        ],
    )
    assert decoded(outputs[0]["translation"]) == translator.translate(SENTENCES)
    aligned = translator.translate_with_alignments(SENTENCES)
    assert decoded(outputs[2]["translation"]) == [translation for translation, _ in aligned]
    assert decoded(outputs[2]["alignment"]) == [format_pharaoh(pairs) for _, pairs in aligned]
    assert_same_beams(outputs[1]["ids"], reference.ids.numpy(), outputs[1]["scores"], reference.scores.numpy())
    lite = run_artifact("litert", paths["tflite"], [("serving_default", {"source_ids": source_ids})])
    assert_same_beams(lite[0]["ids"], reference.ids.numpy(), lite[0]["scores"], reference.scores.numpy())


def test_export_of_an_ensemble_to_ctranslate2_is_refused(model_dirs, tmp_path, capsys):
    args = ["export", "--model-dir", model_dirs[0], "--model-dir", model_dirs[1], "--out", str(tmp_path)]
    assert main([*args, "--format", "ctranslate2"]) == 2
    assert "--format ctranslate2 exports one model: pass one --model-dir" in capsys.readouterr().err
