"""The Python inference API: `kt.Translator.from_model_dir(path).translate(...)`, on a model dir
with an untrained tiny model (a checkpoint of its initial weights: no training needed)."""

import os
import threading

import numpy as np
import pytest
import tensorflow as tf
from conftest import scramble

import keras_transformer as kt
from keras_transformer.model_dir import ModelDir, ModelDirError

SENTENCES = ["In the beginning God created the heavens and the earth.", "Jesus wept.", ""]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    directory = ModelDir(str(tmp_path_factory.mktemp("translation") / "model"))
    config = kt.TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, num_layers=1, max_length=24)
    directory.write(config, kt.TrainingConfig(), "fixture", tokenizer)
    model = kt.Transformer(config)
    model.build()
    directory.checkpoint_manager(tf.train.Checkpoint(model=model)).save(checkpoint_number=1)
    return directory.path, model


@pytest.fixture(scope="module")
def translator(model_dir):
    return kt.Translator.from_model_dir(model_dir[0], beam_size=3)


def test_the_package_exports_the_translator_and_the_loader_and_no_module_names():
    assert kt.Translator.__module__ == "keras_transformer.translation.translator"
    assert kt.load_model.__module__ == "keras_transformer.model_dir.directory"
    public = [name for name in dir(kt) if not name.startswith("_")]
    assert "os" not in public and "typing" not in public and "importlib" not in public
    assert sorted(kt.__all__) == sorted(
        [
            "PRESETS",
            "DataConfig",
            "DecodeResult",
            "DecodingConfig",
            "Ensemble",
            "Glossary",
            "Modifier",
            "TrainingConfig",
            "Transformer",
            "TransformerConfig",
            "Translator",
            "export_tensorflow",
            "beam_search",
            "compile_model",
            "evaluate",
            "greedy_search",
            "held_out",
            "import_huggingface",
            "import_marian",
            "ModelDir",
            "load_model",
            "read_pairs",
            "resolve_strategy",
            "train",
            "translate_file",
            "use_cpu_devices",
            "visualize",
        ]
    )
    assert all(callable(getattr(kt, name)) for name in kt.__all__ if name not in ("PRESETS", "visualize"))
    assert kt.visualize.__name__ == "keras_transformer.plots.visualize"
    assert kt.evaluate.__module__ == "keras_transformer.evaluation.evaluation"
    with pytest.raises(AttributeError, match="has no attribute 'translate'"):
        _ = kt.translate


def test_from_model_dir_loads_the_checkpoint_and_the_settings(model_dir, translator):
    _, model = model_dir
    assert translator.decoding == kt.DecodingConfig(beam_size=3, shortlist=False)  # decided: the dir has no shortlist
    assert len(translator.model.weights) == len(model.weights)
    for loaded, original in zip(translator.model.weights, model.weights):
        assert loaded.shape == original.shape and bool(tf.reduce_all(loaded == original))
    with pytest.raises(ModelDirError, match="has no averaged checkpoint yet"):
        kt.Translator.from_model_dir(model_dir[0], checkpoint="averaged")


def test_from_model_dir_in_bfloat16_translates(model_dir, translator):
    bf16 = kt.Translator.from_model_dir(model_dir[0], dtype="bfloat16", beam_size=3)
    assert bf16.model.dtype_policy.name == "bfloat16" and translator.model.dtype_policy.name == "float32"
    for loaded, original in zip(bf16.model.weights, model_dir[1].weights):
        assert loaded.dtype == "bfloat16" and bool(tf.reduce_all(loaded == tf.cast(original, "bfloat16")))
    translations = bf16.translate(SENTENCES)
    assert len(translations) == 3 and translations[2] == "" and all(isinstance(t, str) for t in translations)
    # Against float32: bfloat16 keeps 8 bits of mantissa, so its log-probabilities of the same pairs
    # stay within a few percent, and its search's choices score, by float32, about as well as
    # float32's own (they may differ where two hypotheses nearly tie).
    sources, best = SENTENCES[:2], translator.translate(SENTENCES[:2])
    exact = translator.score(sources, best)
    np.testing.assert_allclose([s.log_prob for s in bf16.score(sources, best)], [s.log_prob for s in exact], rtol=0.05)
    rescored = translator.score(sources, translations[:2])
    for theirs, ours in zip(rescored, exact):
        assert theirs.score >= ours.score - 0.05 * abs(ours.score)


def test_translate_a_string_returns_a_string(translator):
    translation = translator.translate("Jesus wept.")
    assert isinstance(translation, str)
    assert translation == translator.translate(["Jesus wept."])[0]


def test_translate_a_list_returns_a_list_in_order(translator):
    translations = translator.translate(SENTENCES)
    assert isinstance(translations, list) and len(translations) == 3 and translations[2] == ""
    assert translations == [translator.translate(s) for s in SENTENCES]
    assert translator.translate(tuple(SENTENCES[:2])) == translations[:2]
    assert translator.translate([]) == []


def test_batches_are_searched_side_by_side_with_the_same_translations(model_dir, translator):
    """`concurrent_batches` batches at once, each on a thread of its own: the translations and
    scores of one batch at a time, in the input's order, empty texts in place."""
    model, tokenizer = translator.model, translator.tokenizer
    texts = ["Jesus wept.", "", "And God said, Let there be light.", "Amen.", "In the beginning was the Word."] * 2

    class Threads(kt.Translator):
        def decode(self, source_ids, n=None, **extra):
            self.threads.add(threading.get_ident())
            return super().decode(source_ids, n, **extra)

    side_by_side = Threads(model, tokenizer, beam_size=3, batch_size=2, concurrent_batches=3)
    side_by_side.threads = set()
    one_at_a_time = kt.Translator(model, tokenizer, beam_size=3, batch_size=2, concurrent_batches=1)
    assert side_by_side.translate_nbest(texts) == one_at_a_time.translate_nbest(texts)
    assert len(side_by_side.threads) > 1 and side_by_side.concurrent_batches() == 3
    assert kt.Translator(model, tokenizer).concurrent_batches() == (
        tf.config.threading.get_inter_op_parallelism_threads() or len(os.sched_getaffinity(0))
    )


def test_eight_threads_translating_at_once_get_what_one_thread_gets(model_dir, fixture_pairs):
    """8 threads call one `Translator` at the same moment (a barrier), each with its own 1-3
    sentences, four times, as a web service's thread pool calls it: each call returns the translations
    that one thread calling alone gets, and none fails. (Cold, with 80 requests and the traces
    counted: `test_faults`' slow `test_a_translator_serves_eight_threads_as_it_serves_one`.)"""
    translator = kt.Translator.from_model_dir(model_dir[0], beam_size=2)  # a model of its own, to scramble
    scramble(translator.model)  # choices that vary from sentence to sentence (untrained, it says one word)
    words = [source.split()[:4] for source in fixture_pairs[0][:8]]
    requests = [[" ".join(words[(i + j) % 8][: 1 + (i + j) % 4]) for j in range(1 + i % 3)] for i in range(8)]
    alone = [translator.translate(request) for request in requests]  # one thread, one call at a time
    start, threaded, failures = threading.Barrier(8), [[] for _ in requests], []

    def serve(index):
        try:
            for _ in range(4):
                start.wait()  # every thread's call at once, four times
                threaded[index].append(translator.translate(requests[index]))
        except Exception as error:  # noqa: BLE001 - reported below
            failures.append(error)
            start.abort()

    threads = [threading.Thread(target=serve, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
    assert threaded == [[translations] * 4 for translations in alone]
    # requests translate apart (7 of 8 at least: two one-sentence requests may say the same), so a mix-up shows
    assert len({tuple(translations) for translations in alone}) >= 7


def test_translate_nbest(translator):
    hypotheses = translator.translate_nbest("Jesus wept.")
    assert len(hypotheses) == 3  # the beam size
    scores = [score for _, score in hypotheses]
    assert scores == sorted(scores, reverse=True) and all(isinstance(t, str) for t, _ in hypotheses)
    assert hypotheses[0][0] == translator.translate("Jesus wept.")
    both = translator.translate_nbest(SENTENCES[1:], n=2)
    assert both[0] == hypotheses[:2] and both[1] == [("", 0.0), ("", 0.0)]
    with pytest.raises(ValueError, match="^nbest must be between 1 and the beam size 3, got 4$"):
        translator.translate_nbest("Jesus wept.", n=4)
