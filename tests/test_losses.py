import keras
import numpy as np
import pytest

from keras_transformer.evaluation.evaluation import corpus_scores
from keras_transformer.training.losses import LabelSmoothedCrossEntropy
from keras_transformer.training.metrics import MaskedAccuracy
from keras_transformer.training.schedules import TransformerSchedule

RNG = np.random.default_rng(0)
LOGITS = RNG.normal(size=(2, 4, 7)).astype("float32")
LABELS = np.array([[3, 4, 2, 0], [5, 2, 0, 0]])  # 0 = pad


@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_label_smoothing_matches_keras_on_non_pad_tokens(eps):
    mask = LABELS != 0
    reference = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=eps, reduction=None)
    per_token = np.asarray(reference(keras.ops.one_hot(LABELS, 7), LOGITS))
    expected = per_token[mask].mean()  # normalised by the number of non-pad tokens
    assert float(LabelSmoothedCrossEntropy(eps)(LABELS, LOGITS)) == pytest.approx(expected, rel=1e-5)


def test_pad_positions_do_not_count():
    loss = LabelSmoothedCrossEntropy(0.1)
    changed = LOGITS.copy()
    changed[LABELS == 0] = 100.0
    assert float(loss(LABELS, changed)) == pytest.approx(float(loss(LABELS, LOGITS)), rel=1e-6)


def test_masked_accuracy_ignores_pad():
    logits = np.zeros((1, 3, 5), "float32")
    logits[0, 0, 3] = logits[0, 1, 1] = logits[0, 2, 4] = 1.0
    metric = MaskedAccuracy()
    metric.update_state(np.array([[3, 2, 0]]), logits)
    assert float(metric.result()) == pytest.approx(0.5)


def test_schedule_at_known_steps():
    schedule = TransformerSchedule(d_model=512, warmup_steps=4000)
    lr = lambda step_num: float(schedule(step_num - 1))  # noqa: E731  (Keras passes 0-based iterations)
    assert lr(1) == pytest.approx(512**-0.5 * 4000**-1.5, rel=1e-5)
    assert lr(4000) == pytest.approx(512**-0.5 * 4000**-0.5, rel=1e-5)  # the peak, ~7.0e-4
    assert lr(4000) == pytest.approx(6.99e-4, rel=1e-3)
    assert lr(16000) == pytest.approx(512**-0.5 * 16000**-0.5, rel=1e-5)
    assert lr(2000) < lr(4000) > lr(8000)
    revived = TransformerSchedule.from_config(schedule.get_config())
    assert float(revived(99)) == float(schedule(99))


def test_corpus_scores_use_sacrebleu():
    scores = corpus_scores(["Der Hund bellt."], ["Der Hund bellt."])
    assert scores["bleu"] == 100.0 and scores["chrf"] == 100.0
    assert scores["bleu_signature"].startswith("nrefs:1|case:mixed")
