"""The vocabulary shortlist (issue 39 item 2): built from pairs (`data/shortlist.py`), searched over
(`search/shortlist.py`), in `Translator`, the command line and the SavedModel."""

import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
from conftest import scramble

import keras_transformer as kt
from keras_transformer import DecodingConfig, Transformer, TransformerConfig
from keras_transformer.data.shortlist import Shortlist, count_pairs
from keras_transformer.search.decoding import beam_search, greedy_search
from keras_transformer.search.ensemble import Ensemble
from keras_transformer.search.sampling import sample
from keras_transformer.special_tokens import EOS_ID, PAD_ID
from keras_transformer.translation.markup import SPAN

VOCAB = 40
SOURCE = np.array([[5, 6, 7, 2], [8, 9, 2, 0]], np.int32)


@pytest.fixture(scope="module")
def model():
    """A scrambled tiny model with an output bias (random too), so that slicing it is checked."""
    model = Transformer(TransformerConfig.tiny(vocab_size=VOCAB, dropout=0.0, max_length=20, output_bias=True))
    model.build()
    return scramble(model)


def only(ids) -> Shortlist:
    """A shortlist of the tokens `ids` for every batch (no source token has targets of its own)."""
    return Shortlist(np.full((VOCAB, 1), PAD_ID, np.int32), np.array(sorted(ids), np.int32))


EVERY_TOKEN = only(range(VOCAB))


def assert_same(found, expected):
    np.testing.assert_array_equal(found.ids.numpy(), expected.ids.numpy())
    np.testing.assert_allclose(found.scores.numpy(), expected.scores.numpy(), rtol=1e-5, atol=1e-6)


# --- building --------------------------------------------------------------------------------------


def test_counts_keep_each_source_tokens_targets_by_dice_and_the_most_frequent_targets():
    """By hand: c(s), c(t) and c(s, t) count pairs (a repeat within a pair counts once); Dice
    2 c(s, t) / (c(s) + c(t)) ranks each source token's targets, ties by c(s, t), then by id."""
    sources = [np.array(ids) for ids in ([4, 5, 4], [4], [5, 6], [6])]
    targets = [np.array(ids) for ids in ([10, 11], [10, 12, 12], [11, 13], [13])]
    counts = count_pairs([(sources[:2], targets[:2]), (sources[2:], targets[2:])], vocab_size=14)
    shortlist = counts.shortlist(per_source=2, frequent=3)
    assert counts.pairs == 4
    # 4: pairs 0, 1. Dice with 10: 2*2/(2+2) = 1; 11: 2*1/(2+2) = 0.5; 12: 2*1/(2+1) = 0.67.
    np.testing.assert_array_equal(shortlist.table[4], [10, 12])
    # 5: pairs 0, 2. 11: 2*2/(2+2) = 1; 10: 2/4 = 0.5; 13: 2/4 = 0.5 (ties, c = 1 each: the lower id).
    np.testing.assert_array_equal(shortlist.table[5], [11, 10])
    # 6: pairs 2, 3. 13: 2*2/(2+2) = 1; 11: 2/4.
    np.testing.assert_array_equal(shortlist.table[6], [13, 11])
    assert np.all(shortlist.table[[0, 1, 2, 3, 7, 10]] == PAD_ID)  # no pair holds them: nothing
    # Occurrences: 10 x2, 11 x2, 12 x2, 13 x2: ties by id.
    np.testing.assert_array_equal(shortlist.frequent, [10, 11, 12])


def test_counts_merged_in_parts_equal_counts_merged_at_once(monkeypatch):
    """The running merge of (s, t) codes (every `MERGE_EVERY` codes) changes no count."""
    from keras_transformer.data import shortlist as module

    rng = np.random.default_rng(0)
    batches = [
        ([rng.integers(4, 30, rng.integers(1, 8)) for _ in range(20)], [rng.integers(4, 30, 5) for _ in range(20)])
        for _ in range(5)
    ]
    once = count_pairs(batches, 30).shortlist(4, 5)
    monkeypatch.setattr(module, "MERGE_EVERY", 7)
    parts = count_pairs(batches, 30).shortlist(4, 5)
    np.testing.assert_array_equal(once.table, parts.table)
    np.testing.assert_array_equal(once.frequent, parts.frequent)


# --- the search ------------------------------------------------------------------------------------


def test_the_restricted_output_layers_logits_equal_the_full_layers_on_the_kept_ids(model):
    """E^T's columns and the output bias' entries of the kept ids, gathered once: each step's
    logits [B, V'] are the full step's [B, V] at those ids."""
    kept = tf.constant([0, 1, 2, 3, 7, 19, 38], tf.int32)
    tokens = tf.constant([1, 1], tf.int32)
    for weights in (model, model.with_int8()):  # float32, and int8 rows with their scales
        (context, cache), (full_context, full_cache) = (
            weights.start_decoding(SOURCE, 1, vocabulary=kept),
            weights.start_decoding(SOURCE, 1),
        )
        logits, _ = weights.decode_step(tokens, 0, cache, context)
        full, _ = weights.decode_step(tokens, 0, full_cache, full_context)
        assert logits.shape == (2, 7)
        np.testing.assert_allclose(logits.numpy(), tf.gather(full, kept, axis=1).numpy(), rtol=1e-5, atol=1e-5)


# `make test` searches the beam with a control and an n-best list; `make test-slow` the rest (issue 50 item 10).
@pytest.mark.parametrize(
    "decoding",
    [
        pytest.param(DecodingConfig(no_repeat_ngram_size=2, nbest=2), id="beam-controls-nbest"),
        pytest.param(DecodingConfig(), id="beam", marks=pytest.mark.slow),
        pytest.param(DecodingConfig.greedy(), id="greedy", marks=pytest.mark.slow),
    ],
)
def test_a_shortlist_of_every_token_gives_the_full_searchs_tokens_and_scores(model, decoding):
    assert_same(
        beam_search(model, SOURCE, decoding, lexical_shortlist=EVERY_TOKEN), beam_search(model, SOURCE, decoding)
    )


def test_the_search_never_writes_a_token_outside_the_shortlist(model):
    """Leaving token x out of the shortlist is suppressing x: its logit leaves the softmax either
    way, so the two searches agree exactly (which checks the output bias' slice and the map back)."""
    full = beam_search(model, SOURCE)
    x = int(full.ids.numpy()[0, 0, 0])
    found = beam_search(model, SOURCE, lexical_shortlist=only(set(range(VOCAB)) - {x}))
    assert x not in found.ids.numpy()
    assert_same(found, beam_search(model, SOURCE, suppress_ids=((x,),)))


def test_greedy_over_a_shortlist_that_holds_its_output_gives_the_same_tokens(model):
    """The full argmax is in the shortlist at every step, so it is the shortlist's argmax; the
    scores are over the shortlist's softmax, so at least as high."""
    full = greedy_search(model, SOURCE)
    output = set(full.ids.numpy().ravel().tolist()) | {2}
    found = greedy_search(model, SOURCE, lexical_shortlist=only(output))
    assert len(output) < VOCAB / 2
    np.testing.assert_array_equal(found.ids.numpy(), full.ids.numpy())
    assert np.all(found.scores.numpy() >= full.scores.numpy() - 1e-6)
    assert np.any(found.scores.numpy() > full.scores.numpy() + 1e-3)


def test_the_union_holds_each_source_tokens_targets(model):
    """Source token 5's targets are searched over for the sentence that holds it, as if frequent."""
    table = np.full((VOCAB, 2), PAD_ID, np.int32)
    table[5] = [20, 21]
    by_source = Shortlist(table, np.array([10, 11], np.int32))
    assert_same(
        beam_search(model, SOURCE, lexical_shortlist=by_source),
        beam_search(model, SOURCE, lexical_shortlist=only([10, 11, 20, 21])),
    )


def test_prefix_constraint_and_suppressed_tokens_outside_the_shortlist_are_honoured(model):
    """The ids of a prefix, of constraints and of suppressed sequences join the batch's shortlist:
    the search equals one whose shortlist held them, and honours them."""
    small = [10, 11, 12]
    prefix = np.array([[30, 31], [32, 0]], np.int32)
    found = beam_search(model, SOURCE, lexical_shortlist=only(small), target_prefix=prefix)
    assert_same(found, beam_search(model, SOURCE, lexical_shortlist=only(small + [30, 31, 32]), target_prefix=prefix))
    ids = found.ids.numpy()
    assert np.all(ids[0, :, :2] == [30, 31]) and np.all(ids[1, :, 0] == 32)

    phrases = np.array([[[33, 34]], [[35, 0]]], np.int32)
    found = beam_search(model, SOURCE, lexical_shortlist=only(small), constraints=phrases)
    assert_same(found, beam_search(model, SOURCE, lexical_shortlist=only(small + [33, 34, 35]), constraints=phrases))
    best = found.ids.numpy()[:, 0].tolist()
    assert any(best[0][i : i + 2] == [33, 34] for i in range(len(best[0]))) and 35 in best[1]

    # A suppressed token is ruled out; a suppressed sequence outside the shortlist adds nothing to it.
    output = beam_search(model, SOURCE, lexical_shortlist=only(small)).ids.numpy()
    chosen = int(output[output > 3][0])  # a token it writes (not EOS, which every shortlist keeps)
    found = beam_search(model, SOURCE, lexical_shortlist=only(small), suppress_ids=((chosen,), (36, 37)))
    assert chosen not in found.ids.numpy() and not set(found.ids.numpy().ravel().tolist()) & {36, 37}
    assert_same(found, beam_search(model, SOURCE, lexical_shortlist=only(set(small) - {chosen})))


@pytest.mark.slow  # issue 50 item 10: the suite's time
def test_sampling_and_an_ensemble_over_every_token_equal_their_full_searches(model):
    settings = dict(sampling_topk=5, num_samples=3, seed=4)
    assert_same(sample(model, SOURCE, lexical_shortlist=EVERY_TOKEN, **settings), sample(model, SOURCE, **settings))
    ensemble = Ensemble([model, model])
    assert_same(beam_search(ensemble, SOURCE, lexical_shortlist=EVERY_TOKEN), beam_search(ensemble, SOURCE))


def test_a_shortlist_needs_dynamic_shapes_and_the_setting_needs_a_shortlist(model):
    for settings in ({"jit_compile": True}, {"max_decode_length": 10}):
        with pytest.raises(ValueError, match="needs dynamic shapes"):
            beam_search(model, SOURCE, lexical_shortlist=EVERY_TOKEN, **settings)
    with pytest.raises(ValueError, match="the shortlist setting needs a vocabulary shortlist"):
        beam_search(model, SOURCE, shortlist=True)


# --- the model dir, Translator, the command line, the SavedModel ----------------------------------


@pytest.fixture(scope="module")
def shortlisted_dir(trained, tmp_path_factory):
    """A copy of the trained model dir with the shortlist that `keras-transformer shortlist` built."""
    from keras_transformer.cli.main import main

    path = str(tmp_path_factory.mktemp("shortlisted") / "model")
    shutil.copytree(trained.model_dir, path)
    assert main(["shortlist", "--model-dir", path, "--per-source", "8", "--frequent", "20"]) == 0
    return path


def test_the_shortlist_counts_the_training_pairs_into_the_model_dir(shortlisted_dir, trained):
    """The command's shortlist.npz: the training split's pairs, tokenized as the model reads them."""
    import keras_transformer as kt
    from keras_transformer.model_dir.shortlist import build_shortlist, load_shortlist

    shortlist = load_shortlist(shortlisted_dir, 300)
    assert shortlist.table.shape == (300, 8) and shortlist.frequent.shape == (20,)
    assert 0 < shortlist.pairs and np.any(shortlist.table[4:] != PAD_ID)
    tokenizer = kt.ModelDir(shortlisted_dir).tokenizer()
    god = tokenizer.tokenize_source(["God"]).to_list()[0][-1]
    assert set(tokenizer.tokenize(["Gott"]).to_list()[0]) & set(shortlist.table[god].tolist())
    again = build_shortlist(shortlisted_dir, per_source=8, frequent=20, log=lambda line: None)
    reloaded = Shortlist.load(again)
    np.testing.assert_array_equal(reloaded.table, shortlist.table)
    np.testing.assert_array_equal(reloaded.frequent, shortlist.frequent)
    with pytest.raises(ValueError, match="has no shortlist.npz: build one with `keras-transformer shortlist"):
        kt.Translator.from_model_dir(trained.model_dir, shortlist=True)
    with pytest.raises(ValueError, match="is for a vocabulary of 300 tokens, the model has 400"):
        load_shortlist(shortlisted_dir, 400)


def test_the_translator_searches_over_the_shortlist(shortlisted_dir, fixture_pairs):
    texts = fixture_pairs[0][:6]
    translator = kt.Translator.from_model_dir(shortlisted_dir, shortlist=True, beam_size=2)
    shortlisted = translator.translate(texts)
    by_default = kt.Translator.from_model_dir(shortlisted_dir, beam_size=2)  # the model dir has one: on
    assert by_default.decoding.search.shortlist is True and by_default.translate(texts) == shortlisted
    full = kt.Translator.from_model_dir(shortlisted_dir, shortlist=False, beam_size=2)
    assert full.lexical_shortlist is None and full.decoding.search.shortlist is False
    for static in ({"max_decode_length": 30}, {"jit_compile": True}):  # static shapes: off, no error
        fixed = kt.Translator.from_model_dir(shortlisted_dir, **static)
        assert fixed.lexical_shortlist is None and fixed.decoding.search.shortlist is False
    rows = translator.source_ids(texts)
    source_ids = np.stack([np.pad(row, (0, max(map(len, rows)) - len(row))) for row in rows]).astype(np.int32)
    ids, _ = translator.decode(source_ids, 1)
    shortlist = translator.lexical_shortlist
    union = {0, 1, 2, 3, *shortlist.frequent.tolist(), *shortlist.table[source_ids].ravel().tolist()}
    assert set(ids.numpy().ravel().tolist()) <= union < set(range(300))


@pytest.mark.slow  # the command line's twin of the test above (issue 50: make test's time)
def test_the_command_line_searches_over_the_shortlist_unless_told_not_to(shortlisted_dir, fixture_pairs, capsys):
    from keras_transformer.cli.main import main

    texts = fixture_pairs[0][:6]
    shortlisted = kt.Translator.from_model_dir(shortlisted_dir, shortlist=True, beam_size=2).translate(texts)
    assert main(["translate", "--model-dir", shortlisted_dir, "--no-split", "--beam-size", "2", *texts]) == 0
    assert capsys.readouterr().out.splitlines() == shortlisted
    evaluate = ["evaluate", "--model-dir", shortlisted_dir, "--show", "0", "--limit", "2"]
    for flags, setting in (([], True), (["--no-shortlist"], False)):
        assert main([*evaluate, *flags]) == 0
        assert json.loads(capsys.readouterr().out)["shortlist"] is setting


@pytest.mark.slow  # an XLA compilation; `jit_compile` turning the shortlist off: the test above, in-process
def test_evaluate_with_jit_compile_searches_without_the_shortlist(shortlisted_dir, capsys):
    from keras_transformer.cli.main import main

    assert main(["evaluate", "--model-dir", shortlisted_dir, "--show", "0", "--limit", "2", "--jit-compile"]) == 0
    assert json.loads(capsys.readouterr().out)["shortlist"] is False


def test_the_saved_model_searches_over_the_shortlist_as_translator_does(shortlisted_dir, fixture_pairs, tmp_path):
    """The ids-only SavedModel of a shortlisted export (its shortlist saved as variables) gives
    `Translator`'s ids with the shortlist."""
    import functools

    import keras_transformer as kt
    from keras_transformer.exporters.signatures import TranslationModule, variables

    translator = kt.Translator.from_model_dir(shortlisted_dir, shortlist=True, beam_size=2)
    shortlist = variables(translator.lexical_shortlist)
    decode = functools.partial(beam_search, decoding=translator.decoding, lexical_shortlist=shortlist)
    TranslationModule(translator.model, decode=decode, lexical_shortlist=shortlist).save(str(tmp_path / "saved"))
    loaded = tf.saved_model.load(str(tmp_path / "saved")).signatures["serving_default"]
    rows = translator.source_ids(fixture_pairs[0][:8])
    source_ids = np.stack([np.pad(row, (0, max(map(len, rows)) - len(row))) for row in rows]).astype(np.int32)
    expected_ids, expected_scores = translator.decode(source_ids)
    served = loaded(source_ids=tf.constant(source_ids))
    np.testing.assert_array_equal(served["ids"].numpy(), expected_ids.numpy())
    np.testing.assert_allclose(served["scores"].numpy(), expected_scores.numpy(), rtol=1e-5)


def test_train_builds_the_shortlist_when_asked(monkeypatch, tmp_path):
    """`train --build-shortlist` counts the model dir's training pairs once training ends."""
    from keras_transformer.cli import main as cli
    from keras_transformer.model_dir import shortlist as module
    from keras_transformer.training import trainer

    calls = []
    monkeypatch.setattr(trainer, "train", lambda model_dir, *args, **kwargs: calls.append(("train", model_dir)))
    monkeypatch.setattr(module, "build_shortlist", lambda model_dir, **kwargs: calls.append(("shortlist", model_dir)))
    path = str(tmp_path / "m")
    assert cli.main(["train", "--model-dir", path, "--data", "x.tsv", "--build-shortlist"]) in (0, None)
    assert calls == [("train", path), ("shortlist", path)]
    calls.clear()
    assert cli.main(["train", "--model-dir", path, "--data", "x.tsv"]) in (0, None)
    assert calls == [("train", path)]


def test_export_check_holds_tflite_and_ctranslate2_to_the_full_search_of_a_shortlisted_export(monkeypatch, tmp_path):
    """`export --check` on an export with a shortlist: the SavedModels search over it, TFLite and
    CTranslate2 do not, so each is held to the checkpoint's translations of its own kind of search."""
    import json
    import types

    from keras_transformer.exporters import quality_check
    from keras_transformer.model_dir import held_out

    sources = ["a", "b"]
    (tmp_path / "translator.json").write_text(json.dumps({"saved_model_shortlist": True}))

    def translations(shortlist):
        return [f"{text} {'shortlisted' if shortlist else 'full'}" for text in sources]

    class FakeTranslator:
        span_rule = SPAN  # the markup check's rule (no tokenizer here)

        def __init__(self, decoding):
            self.shortlist = decoding.search.shortlist

        def translate(self, texts, **options):
            return translations(self.shortlist)

    pairs = types.SimpleNamespace(sources=sources, references=translations(False), target_lang=None)
    monkeypatch.setattr(held_out, "held_out", lambda *args: pairs)
    monkeypatch.setattr(
        quality_check.Translator, "from_model_dir", lambda dirs, checkpoint, decoding: FakeTranslator(decoding)
    )
    runners = {
        "shortlisted": (lambda texts: translations(True), True, "shortlisted"),
        "tflite": (lambda texts: translations(False), True, "plain"),
    }
    monkeypatch.setattr(quality_check, "_runners", lambda out, translator, metadata: runners)
    reports, problems = quality_check.check_quality(str(tmp_path), ["model_dir"])
    assert problems == []
    assert [(report.artifact, report.identical) for report in reports] == [("shortlisted", 1.0), ("tflite", 1.0)]


@pytest.mark.slow
def test_ctranslate2s_vocabulary_map_gives_our_greedy_tokens_over_the_shortlist(
    shortlisted_dir, fixture_pairs, tmp_path
):
    """`export --format ctranslate2 --shortlist` writes the shortlist as CTranslate2's vmap.txt
    (the frequent targets on the empty source's line): CTranslate2's greedy search with `use_vmap`
    gives `Translator`'s greedy tokens over the shortlist, sentence by sentence (a call's union is
    its sentence's), on a shortlist that holds none of the full search's output tokens."""
    import json
    import os

    ctranslate2 = pytest.importorskip("ctranslate2")
    import keras_transformer as kt
    from keras_transformer.cli.main import main
    from keras_transformer.model_dir.shortlist import load_shortlist
    from keras_transformer.search.search import decode_limits

    model_dir, out = str(tmp_path / "model"), str(tmp_path / "ct2")
    shutil.copytree(shortlisted_dir, model_dir)
    full = kt.Translator.from_model_dir(model_dir, beam_size=1)
    rows = full.source_ids(fixture_pairs[0][:6])
    outputs = {int(t) for row in rows for t in full.decode(row[None].astype(np.int32), 1)[0].numpy().ravel()}
    unused = [t for t in range(4, 300) if t not in outputs]  # a shortlist that changes every greedy output
    table = np.array([unused[s % 40 : s % 40 + 3] for s in range(300)], np.int32)
    Shortlist(table, np.array(unused[40:44], np.int32)).save(os.path.join(model_dir, "shortlist.npz"))
    assert main(["export", "--model-dir", model_dir, "--format", "ctranslate2", "--shortlist", "--out", out]) == 0
    with open(os.path.join(out, "shared_vocabulary.json"), encoding="utf-8") as f:
        tokens = json.load(f)
    with open(os.path.join(out, "vmap.txt"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    shortlist = load_shortlist(model_dir, 300)
    assert lines[0] == "\t" + " ".join(tokens[t] for t in shortlist.frequent)
    assert len(lines) == 1 + int(np.sum(np.any(shortlist.table != PAD_ID, axis=1)))
    shortlisted = kt.Translator.from_model_dir(model_dir, shortlist=True, beam_size=1)
    engine, ids = ctranslate2.Translator(out), {token: i for i, token in enumerate(tokens)}
    for row in rows:
        source_ids = row[None].astype(np.int32)  # [1, S]
        ours = [int(t) for t in shortlisted.decode(source_ids, 1)[0].numpy()[0, 0] if t != PAD_ID]
        assert set(ours) - {EOS_ID} and not set(ours) & outputs - {EOS_ID}  # not the full search's tokens
        (result,) = engine.translate_batch(
            [[tokens[i] for i in row[:-1]]],
            beam_size=1,
            max_decoding_length=int(decode_limits(source_ids, shortlisted.model.config.max_length).numpy()[0]),
            return_end_token=True,
            use_vmap=True,
        )
        assert [ids[token] for token in result.hypotheses[0]] == ours
