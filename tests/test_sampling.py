"""Random sampling (search/sampling.py): top-k 1 is greedy, a seed reproduces, and the first
tokens of many samples follow the tempered, cut, renormalised softmax (a chi-square test)."""

import io
import math

import numpy as np
import pytest
import tensorflow as tf

import keras_transformer as kt
from keras_transformer.cli.main import main
from keras_transformer.config import DecodingConfig
from keras_transformer.model_dir import ModelDir
from keras_transformer.search.decoding import greedy_search
from keras_transformer.search.sampling import sample, sample_with_seed
from keras_transformer.search.scoring import score
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID

SOURCE = np.array([[5, 6, 7, 2], [8, 9, 2, 0], [4, 2, 0, 0], [10, 11, 5, 2]], np.int32)
SEED = tf.constant([7, 0], tf.int64)


def test_top_k_one_and_a_tiny_nucleus_are_greedy(scrambled_model):
    greedy = greedy_search(scrambled_model, SOURCE).ids.numpy()[:, 0]
    for settings in (DecodingConfig(sampling_topk=1), DecodingConfig(sampling_topk=0, sampling_topp=1e-6)):
        ids, _ = sample_with_seed(scrambled_model, SOURCE, SEED, settings.replace(alpha=0.0))
        np.testing.assert_array_equal(ids.numpy()[:, 0], greedy)


def test_a_seed_gives_the_same_samples_and_another_seed_others(scrambled_model):
    settings = dict(sampling_topk=0, num_samples=4)
    first = sample(scrambled_model, SOURCE, seed=3, **settings)
    again = sample(scrambled_model, SOURCE, seed=3, **settings)
    other = sample(scrambled_model, SOURCE, seed=4, **settings)
    assert first.ids.shape[:2] == (4, 4) and first.scores.shape == (4, 4)
    np.testing.assert_array_equal(first.ids.numpy(), again.ids.numpy())
    np.testing.assert_array_equal(first.scores.numpy(), again.scores.numpy())
    assert not np.array_equal(first.ids.numpy(), other.ids.numpy())
    assert np.all(np.diff(first.scores.numpy(), axis=1) <= 0)  # best first


def test_sample_scores_are_the_samples_scores(scrambled_model):
    result = sample(scrambled_model, SOURCE, sampling_topk=0, sampling_temperature=1.5, num_samples=3, seed=1)
    ids = result.ids.numpy().reshape(-1, result.ids.shape[-1])
    rows = [[int(t) for t in row if t != PAD_ID] for row in ids]
    ended = [i for i, row in enumerate(rows) if row[-1] == EOS_ID]
    assert len(ended) >= 4 and max(len(rows[i]) for i in ended) >= 3
    targets = np.zeros((len(ended), max(len(rows[i]) - 1 for i in ended)), np.int32)
    for j, i in enumerate(ended):
        targets[j, : len(rows[i]) - 1] = rows[i][:-1]
    scored = score(scrambled_model, np.repeat(SOURCE, 3, axis=0)[ended], targets)
    np.testing.assert_allclose(scored.score.numpy(), result.scores.numpy().reshape(-1)[ended], atol=1e-4)


def expected_first_tokens(model, source, temperature, topk, topp):
    """The distribution of the first sampled token, computed in NumPy from one forward pass."""
    logits = model((source[None], np.array([[START_ID]], np.int32)), training=False).numpy()[0, 0]
    log_probs = logits - np.log(np.sum(np.exp(logits - logits.max()))) - logits.max()
    log_probs[[PAD_ID, START_ID]] = -np.inf
    z = log_probs / temperature
    if topk:
        z[z < np.sort(z)[-topk]] = -np.inf
    p = np.exp(z - z.max())
    p /= p.sum()
    order = np.argsort(-p, kind="stable")
    before = np.cumsum(p[order]) - p[order]
    p[order[before >= topp]] = 0.0
    return p / p.sum()


def chi_square_critical(df: int, z: float = 3.719) -> float:
    """The upper 1e-4 quantile of chi-square with `df` degrees of freedom, by the Wilson-Hilferty
    approximation (within ~1% of the exact quantile for df >= 2): z is the normal's 1e-4 quantile."""
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def pooled(observed, expected, smallest: float = 5.0):
    """The cells with fewer than `smallest` expected draws pooled into one (itself merged into the
    next smallest cell if still too small), so that the chi-square approximation holds."""
    order = np.argsort(expected)
    small = order[np.cumsum(expected[order]) < smallest]
    small = order[: len(small) + 1] if len(small) else small  # the pool reaches `smallest`
    large = np.setdiff1d(np.arange(len(expected)), small)
    cells = [observed[large], [observed[small].sum()]] if len(small) else [observed[large]]
    means = [expected[large], [expected[small].sum()]] if len(small) else [expected[large]]
    return np.concatenate(cells), np.concatenate(means)


@pytest.mark.parametrize(
    "temperature, topk, topp",
    # `make test`: the softmax and top-k with top-p and a temperature; the rest in `make test-slow` (issue 50 item 10).
    [
        (1.0, 0, 1.0),
        pytest.param(0.7, 0, 1.0, marks=pytest.mark.slow),
        pytest.param(1.0, 5, 1.0, marks=pytest.mark.slow),
        pytest.param(3.0, 0, 0.8, marks=pytest.mark.slow),
        (2.0, 6, 0.85),
    ],
)
def test_first_token_frequencies_follow_the_softmax(scrambled_model, temperature, topk, topp):
    draws = 20000
    settings = DecodingConfig(
        sampling_topk=topk or 0,
        sampling_topp=topp,
        sampling_temperature=temperature,
        num_samples=draws,
        length_a=0.0,
        length_b=1,  # one token per sample
    )
    ids, _ = sample_with_seed(scrambled_model, SOURCE[:1], SEED, settings)
    counts = np.bincount(ids.numpy()[0, :, 0], minlength=12)
    p = expected_first_tokens(scrambled_model, SOURCE[0], temperature, topk, topp)
    assert counts[p == 0].sum() == 0  # nothing outside the top-k and the nucleus
    observed, expected = pooled(counts[p > 0], draws * p[p > 0])
    assert len(expected) >= 3  # a test with at least 2 degrees of freedom
    statistic = float(np.sum((observed - expected) ** 2 / expected))
    assert statistic < chi_square_critical(len(expected) - 1), (observed, expected.round(1))
    if temperature != 1.0:  # the test has the power to see a temperature ignored
        untempered = expected_first_tokens(scrambled_model, SOURCE[0], 1.0, topk, topp)
        observed, expected = pooled(counts[untempered > 0], draws * untempered[untempered > 0])
        assert np.sum((observed - expected) ** 2 / expected) > chi_square_critical(len(expected) - 1)


def test_sampling_settings_are_checked():
    with pytest.raises(ValueError, match="^sampling_topp, num_samples, seed need sampling: set sampling_topk"):
        DecodingConfig(sampling_topp=0.9, num_samples=2, seed=1)
    with pytest.raises(ValueError, match=r"^sampling_topp must be in \(0, 1\], got 0.0$"):
        DecodingConfig(sampling_topk=0, sampling_topp=0.0)
    with pytest.raises(ValueError, match=r"^sampling runs without jit_compile \(XLA\)$"):
        DecodingConfig(sampling_topk=5, jit_compile=True)
    with pytest.raises(ValueError, match="^sampling_temperature must be > 0, got 0$"):
        DecodingConfig(sampling_topk=0, sampling_temperature=0)


SENTENCES = ["In the beginning God created the heavens and the earth.", "Jesus wept.", ""]
SETTINGS = dict(sampling_topk=20, sampling_topp=0.9, num_samples=3, seed=5)  # the flags below say the same


def test_translator_samples_reproducibly(untrained_model_dir):
    translator = kt.Translator.from_model_dir(untrained_model_dir, **SETTINGS)
    samples = translator.translate_nbest(SENTENCES)
    assert [len(s) for s in samples] == [3, 3, 3] and samples[2] == [("", 0.0)] * 3
    assert len({text for text, _ in samples[0]}) > 1  # three different draws
    assert translator.translate(SENTENCES) == [s[0][0] for s in samples]  # the best-scoring sample
    assert kt.Translator.from_model_dir(untrained_model_dir, **SETTINGS).translate_nbest(SENTENCES) == samples
    prefixed = translator.translate_nbest(SENTENCES[:2], prefixes="Im")  # sampling continues a prefix (issue 49)
    assert all(text.startswith("Im") for hypotheses in prefixed for text, _ in hypotheses)


@pytest.mark.slow  # the command line's twin of the test above (issue 50: make test's time)
def test_the_command_line_samples_as_the_translator_does(untrained_model_dir, capsys, monkeypatch):
    samples = kt.Translator.from_model_dir(untrained_model_dir, **SETTINGS).translate_nbest(SENTENCES)
    flags = ["--sampling-topk", "20", "--sampling-topp", "0.9", "--num-samples", "3", "--seed", "5"]
    monkeypatch.setattr("sys.stdin", io.StringIO("".join(f"{s}\n" for s in SENTENCES)))
    assert main(["translate", "--model-dir", untrained_model_dir, *flags]) == 0
    lines = [line.split("\t") for line in capsys.readouterr().out.splitlines()]
    want = [(str(i), f"{s:.4f}", text) for i, hypotheses in enumerate(samples) for text, s in hypotheses]
    assert [tuple(line) for line in lines] == want
    assert (
        main(["translate", "--model-dir", untrained_model_dir, "--sampling-topk", "0", "--seed", "5", SENTENCES[1]])
        == 0
    )
    one = capsys.readouterr().out.splitlines()
    assert len(one) == 1 and one == kt.Translator.from_model_dir(
        untrained_model_dir, sampling_topk=0, seed=5
    ).translate(SENTENCES[1:2])
