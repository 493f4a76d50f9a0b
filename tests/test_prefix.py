"""Decoding from a target prefix (search/prefix.py): every hypothesis starts with it, a prefix
taken from the unconstrained output changes nothing, and the forced tokens count in the score."""

import functools
import io

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.model_dir import ModelDir
from keras_transformer.search.decoding import beam_search, greedy_search
from keras_transformer.search.scoring import score
from keras_transformer.special_tokens import EOS_ID, PAD_ID

SOURCE = np.array([[5, 6, 7, 2], [8, 9, 2, 0], [4, 2, 0, 0], [10, 11, 5, 2]], np.int32)
PREFIX = np.array([[10, 11, 4], [6, 0, 0], [0, 0, 0], [4, 4, 9]], np.int32)  # lengths 3, 1, 0, 3


def tokens(row):
    return [int(t) for t in row if t != PAD_ID]


@pytest.mark.parametrize("search", [greedy_search, beam_search], ids=["greedy", "beam"])
def test_every_hypothesis_starts_with_its_prefix(scrambled_model, search):
    result = search(scrambled_model, SOURCE, target_prefix=PREFIX)
    for hypotheses, prefix in zip(result.ids.numpy(), PREFIX):
        for hypothesis in hypotheses:
            assert tokens(hypothesis)[: len(tokens(prefix))] == tokens(prefix)
    unconstrained = search(scrambled_model, SOURCE)
    np.testing.assert_array_equal(result.ids.numpy()[2], unconstrained.ids.numpy()[2])  # no prefix: as without


# Beam search on this model with the paper's alpha ends every sentence at once ([EOS]); alpha 2 does not.
@pytest.mark.parametrize(
    "search", [greedy_search, functools.partial(beam_search, alpha=2.0)], ids=["greedy", "beam-alpha-2"]
)
def test_a_prefix_of_the_unconstrained_output_gives_that_output(scrambled_model, search):
    unconstrained = search(scrambled_model, SOURCE)
    best = [tokens(row) for row in unconstrained.ids.numpy()[:, 0]]
    assert sum(len(row) >= 4 for row in best) >= 2
    for k in (1, 2, 3):
        prefix = np.zeros((len(SOURCE), k), np.int32)
        for i, row in enumerate(best):
            kept = [t for t in row[:k] if t != EOS_ID]  # a prefix holds no EOS
            prefix[i, : len(kept)] = kept
        result = search(scrambled_model, SOURCE, target_prefix=prefix)
        np.testing.assert_array_equal(result.ids.numpy()[:, 0], unconstrained.ids.numpy()[:, 0])
        np.testing.assert_allclose(result.scores.numpy()[:, 0], unconstrained.scores.numpy()[:, 0], atol=1e-5)


def test_the_forced_tokens_count_in_the_score(scrambled_model):
    result = greedy_search(scrambled_model, SOURCE, target_prefix=PREFIX)
    rows = [tokens(row) for row in result.ids.numpy()[:, 0]]
    ended = [i for i, row in enumerate(rows) if row[-1] == EOS_ID]
    assert ended
    targets = np.zeros((len(ended), max(len(rows[i]) for i in ended)), np.int32)
    for j, i in enumerate(ended):
        targets[j, : len(rows[i]) - 1] = rows[i][:-1]
    scored = score(scrambled_model, SOURCE[ended], targets, alpha=0.0)
    np.testing.assert_allclose(scored.score.numpy(), result.scores.numpy()[ended, 0], atol=1e-4)


GREEDY_BEAM = functools.partial(beam_search, beam_size=1)


# Beam 1 in `make test-slow` (issue 50 item 10).
@pytest.mark.parametrize(
    "search", [pytest.param(GREEDY_BEAM, id="greedy", marks=pytest.mark.slow), pytest.param(beam_search, id="beam")]
)
def test_controls_leave_a_prefix_alone(scrambled_model, search):
    """A prefix holding a suppressed token (or repeating a token under repetition controls) is still
    written whole, with the forced tokens' own scores (CTranslate2's logits processors skip a prefix);
    the controls apply after it: the suppressed token never follows it."""
    plain = search(scrambled_model, SOURCE, target_prefix=PREFIX)
    controlled = search(scrambled_model, SOURCE, target_prefix=PREFIX, suppress_ids=((4,),), no_repeat_ngram_size=1)
    for hypotheses, prefix in zip(controlled.ids.numpy(), PREFIX):
        for hypothesis in hypotheses:
            assert tokens(hypothesis)[: len(tokens(prefix))] == tokens(prefix)
            assert 4 not in tokens(hypothesis)[len(tokens(prefix)) :]
    assert np.all(np.isfinite(controlled.scores.numpy()))
    forced = beam_search(scrambled_model, SOURCE, beam_size=1, target_prefix=PREFIX[:, :1], max_decoding_length=1)
    suppressed = beam_search(
        scrambled_model,
        SOURCE,
        target_prefix=PREFIX[:, :1],
        max_decoding_length=1,
        beam_size=1,
        suppress_ids=((4,), (10,)),
    )
    prefixed = PREFIX[:, 0] != PAD_ID  # row 2 has none: its token is chosen, by the controls
    np.testing.assert_allclose(suppressed.scores.numpy()[prefixed], forced.scores.numpy()[prefixed], atol=1e-5)
    assert not np.array_equal(plain.ids.numpy(), controlled.ids.numpy())


def test_a_prefix_past_the_length_limit_is_cut_there(scrambled_model):
    prefix = np.array([[4, 5, 6, 7, 8, 9, 10]], np.int32)
    result = greedy_search(scrambled_model, SOURCE[:1], target_prefix=prefix, length_a=0.0, length_b=4)
    assert tokens(result.ids.numpy()[0, 0]) == [4, 5, 6, 7]


def test_bad_prefixes_are_refused(scrambled_model):
    with pytest.raises(ValueError, match=r"^target_prefix holds the start or EOS id \(row 1\)$"):
        beam_search(scrambled_model, SOURCE[:2], target_prefix=[[4, 5], [EOS_ID, 0]])
    with pytest.raises(ValueError, match=r"^target_prefix must be \[batch 2, length\], got shape \(1, 2\)$"):
        beam_search(scrambled_model, SOURCE[:2], target_prefix=[[4, 5]])
    graph = beam_search(scrambled_model, SOURCE[:2], target_prefix=[[4], [5]])
    xla = beam_search(scrambled_model, SOURCE[:2], target_prefix=[[4], [5]], jit_compile=True)  # the graph's search
    np.testing.assert_array_equal(xla.ids.numpy(), graph.ids.numpy())


SENTENCES = ["In the beginning God created the heavens and the earth.", "Jesus wept."]


def test_translator_continues_text_prefixes(untrained_model_dir):
    translator = kt.Translator.from_model_dir(untrained_model_dir, beam_size=2)
    for translation in translator.translate(SENTENCES, prefixes="Im Anfang"):
        assert translation.startswith("Im Anfang")
    one_each = translator.translate(SENTENCES, prefixes=["Und Gott", ""])
    assert one_each[0].startswith("Und Gott") and one_each[1] == translator.translate(SENTENCES[1])
    assert translator.translate(SENTENCES[1], prefixes="Jesus") == translator.translate([SENTENCES[1]], ["Jesus"])[0]
    for hypotheses in translator.translate_nbest(SENTENCES, prefixes="Da"):
        assert len(hypotheses) == 2 and all(text.startswith("Da") for text, _ in hypotheses)
    with pytest.raises(ValueError, match="^2 texts but 1 prefixes$"):
        translator.translate(SENTENCES, prefixes=["Da"])


@pytest.mark.slow  # the command line's twin of the test above (issue 50: make test's time)
def test_the_command_line_continues_prefixes_as_the_translator_does(untrained_model_dir, tmp_path, capsys, monkeypatch):
    translator = kt.Translator.from_model_dir(untrained_model_dir, beam_size=2)
    one_each = translator.translate(SENTENCES, prefixes=["Und Gott", ""])
    assert (
        main(["translate", "--model-dir", untrained_model_dir, "--beam-size", "2", "--prefix", "Im Anfang", *SENTENCES])
        == 0
    )
    assert capsys.readouterr().out.splitlines() == translator.translate(SENTENCES, prefixes="Im Anfang")
    prefixes = tmp_path / "prefixes.txt"
    prefixes.write_text("Und Gott\n\n", encoding="utf-8")
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{s}\n" for s in SENTENCES)))
    assert (
        main(["translate", "--model-dir", untrained_model_dir, "--beam-size", "2", "--prefix-file", str(prefixes)]) == 0
    )
    assert capsys.readouterr().out.splitlines() == one_each
    prefixes.write_text("Und Gott\n", encoding="utf-8")
    assert main(["translate", "--model-dir", untrained_model_dir, "--prefix-file", str(prefixes), *SENTENCES]) == 2
    assert capsys.readouterr().err.strip() == (
        f"keras-transformer: error: --prefix-file {prefixes} has 1 lines for 2 inputs"
    )
