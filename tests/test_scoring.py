"""Scoring given translations (search/scoring.py): teacher-forced log-probabilities that equal
what the search computed, whatever the batch; `Translator.score` and `keras-transformer score`."""

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.model_dir import ModelDir
from keras_transformer.search.decoding import beam_search, greedy_search
from keras_transformer.search.scoring import score
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

SOURCE = np.array([[5, 6, 7, 2], [8, 9, 2, 0], [4, 2, 0, 0], [10, 11, 5, 2]], np.int32)


def padded(rows):
    batch = np.full((len(rows), max(1, *map(len, rows))), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


def ended_hypotheses(ids):
    """The hypotheses [B, K, L] that end in EOS: (flat indices, their tokens before EOS)."""
    flat = ids.reshape(-1, ids.shape[-1])
    rows = [[int(t) for t in row if t != PAD_ID] for row in flat]
    ended = [i for i, row in enumerate(rows) if row and row[-1] == EOS_ID]
    return ended, [rows[i][:-1] for i in ended]


@pytest.mark.parametrize("alpha", [0.6, 0.0])
def test_the_score_of_a_search_output_is_the_score_the_search_reported(scrambled_model, alpha):
    result = beam_search(scrambled_model, SOURCE, alpha=alpha)
    ended, targets = ended_hypotheses(result.ids.numpy())
    assert len(ended) >= 8 and max(map(len, targets)) >= 3  # most end, some after several tokens
    sources = np.repeat(SOURCE, result.ids.shape[1], axis=0)[ended]
    scores = score(scrambled_model, sources, padded(targets), alpha=alpha)
    np.testing.assert_allclose(scores.score.numpy(), result.scores.numpy().reshape(-1)[ended], atol=1e-4)
    np.testing.assert_array_equal(scores.tokens.numpy(), [len(t) + 1 for t in targets])
    np.testing.assert_allclose(tf.reduce_sum(scores.token_log_probs, axis=1), scores.log_prob, rtol=1e-6)
    if alpha == 0.0:
        np.testing.assert_array_equal(scores.score.numpy(), scores.log_prob.numpy())


def test_greedy_scores_equal_the_scored_greedy_outputs(scrambled_model):
    result = greedy_search(scrambled_model, SOURCE)
    ended, targets = ended_hypotheses(result.ids.numpy())
    scores = score(scrambled_model, SOURCE[ended], padded(targets), alpha=0.0)
    np.testing.assert_allclose(scores.score.numpy(), result.scores.numpy()[ended, 0], atol=1e-4)


def test_scores_do_not_depend_on_the_batch(scrambled_model):
    """Up to float rounding: oneDNN picks its kernels by shape, so the batch changes the order of
    the sums (on an AMD EPYC with AVX-512: 1.3e-5 on a score of -24.6)."""
    targets = [[4, 5, 6, 7, 8], [9], [], [10, 11, 10, 11, 4, 4, 4], [6, 6]]
    sources = np.concatenate([SOURCE, SOURCE[:1]])
    together = score(scrambled_model, sources, padded(targets))
    order = [3, 0, 4, 2, 1]
    shuffled = score(scrambled_model, sources[order], padded([targets[i] for i in order]))
    np.testing.assert_allclose(shuffled.score.numpy(), together.score.numpy()[order], rtol=1e-6, atol=1e-5)
    for i, target in enumerate(targets):
        alone = score(scrambled_model, sources[i : i + 1], padded([target]))
        np.testing.assert_allclose(alone.score.numpy(), together.score.numpy()[i : i + 1], rtol=1e-6, atol=1e-5)
        counted = len(target) + 1
        np.testing.assert_allclose(
            alone.token_log_probs.numpy()[0, :counted], together.token_log_probs.numpy()[i, :counted], atol=1e-5
        )
    assert np.all(together.token_log_probs.numpy()[2, 1:] == 0.0)  # nothing after the empty target's EOS


def test_an_empty_target_scores_eos_first(scrambled_model):
    result = score(scrambled_model, SOURCE[:1], np.zeros((1, 0), np.int32), alpha=0.6)
    logits = scrambled_model((SOURCE[:1], np.array([[START_ID]], np.int32)), training=False)[0, 0]
    want = tf.nn.log_softmax(logits).numpy()[EOS_ID]
    assert result.tokens.numpy().tolist() == [1]
    np.testing.assert_allclose(result.log_prob.numpy(), [want], rtol=1e-6)
    np.testing.assert_allclose(result.score.numpy(), [want / ((5 + 1) / 6) ** 0.6], rtol=1e-6)


def test_score_refuses_mismatched_batches(scrambled_model):
    with pytest.raises(ValueError, match=r"must be \[batch, length\] of one batch, got \(4, 4\) and \(1, 2\)"):
        score(scrambled_model, SOURCE, np.ones((1, 2), np.int32))


PAIRS = [("In the beginning God created the heavens and the earth.", "Im Anfang schuf Gott"), ("Jesus wept.", "")]


def test_translator_scores_text_pairs(untrained_model_dir, capsys):
    translator = kt.Translator.from_model_dir(untrained_model_dir, batch_size=1)
    sources, targets = zip(*PAIRS)
    scores = translator.score(sources, targets)
    assert [s.tokens for s in scores] == [len(translator.target_ids([targets[0]])[0]) + 1, 1]
    for s in scores:
        assert len(s.token_log_probs) == s.tokens and s.log_prob == pytest.approx(sum(s.token_log_probs), rel=1e-5)
        assert s.score == pytest.approx(s.log_prob / ((5 + s.tokens) / 6) ** 0.6, rel=1e-5)
    batched = kt.Translator.from_model_dir(untrained_model_dir, batch_size=8).score(sources, targets)
    assert [s.score for s in batched] == pytest.approx([s.score for s in scores], abs=1e-5)
    long_target = "Gott " * 40
    assert translator.score(["Amen."], [long_target])[0].tokens == 24  # cut to max_length - 1, then EOS
    assert "warning: target of" in capsys.readouterr().err
    with pytest.raises(ValueError, match="^2 sources but 1 targets$"):
        translator.score(sources, targets[:1])


def test_cli_scores_stdin_and_a_file(untrained_model_dir, tmp_path, capsys, monkeypatch):
    import io

    lines = "".join(f"{source}\t{target}\n" for source, target in PAIRS)
    monkeypatch.setattr("sys.stdin", io.StringIO(lines))
    assert main(["score", "--model-dir", untrained_model_dir, "--alpha", "0"]) == 0
    printed = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    want = kt.Translator.from_model_dir(untrained_model_dir, alpha=0.0).score(*zip(*PAIRS))
    assert [float(normalised) for normalised, _, _ in printed] == pytest.approx([s.score for s in want], abs=1e-5)
    assert [float(log_prob) for _, log_prob, _ in printed] == pytest.approx([s.log_prob for s in want], abs=1e-5)
    assert [int(tokens) for _, _, tokens in printed] == [s.tokens for s in want]
    data = tmp_path / "pairs.tsv"
    data.write_text(lines, encoding="utf-8")
    assert main(["score", "--model-dir", untrained_model_dir, "--data", str(data), "--alpha", "0"]) == 0
    assert [line.split("\t") for line in capsys.readouterr().out.splitlines()] == printed
    data.write_text("no tab here\n", encoding="utf-8")
    assert main(["score", "--model-dir", untrained_model_dir, "--data", str(data)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"keras-transformer: error: {data}:1: expected SOURCE<TAB>TARGET, got 1 fields"
    )
