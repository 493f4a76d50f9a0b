"""The validation-BLEU callback keeps the weights of the best BLEU, and resumes from its record:
with a scripted translator, and in a `train` run with the real one."""

import json
import os

import keras
import numpy as np
import pytest
import sacrebleu
import tensorflow as tf
from conftest import FIXTURE

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.model_dir import ModelDir, load_model
from keras_transformer.model_dir.checkpoints import weights_checkpoint
from keras_transformer.training.callbacks.bleu import BleuCallback
from keras_transformer.training.trainer import train
from keras_transformer.translation.translator import Translator

REFERENCES = ["the lord is my shepherd", "and god said let there be light"]


class ScriptedTranslator:
    """Returns the next scripted list of translations on every call."""

    def __init__(self, outputs):
        self.outputs = list(outputs)

    def translate(self, sources):
        return self.outputs.pop(0)


def tiny_model():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def run_epochs(callback, model, epochs):
    """Each epoch: 10 optimizer steps, and every weight set to the epoch number."""
    callback.set_model(model)
    for epoch in epochs:
        model.optimizer.iterations.assign(10 * (epoch + 1))
        for weight in model.weights:
            weight.assign(np.full(weight.shape, epoch, weight.dtype))
        callback.on_epoch_end(epoch, {})


def test_keeps_the_best_weights(tmp_path):
    best_dir = str(tmp_path / "best")
    outputs = [["a b c", "d e f"], REFERENCES, ["the lord is my", "and god said"]]  # BLEU 0, 100, lower
    logs = []
    callback = BleuCallback(ScriptedTranslator(outputs), ["s1", "s2"], REFERENCES, best_dir, log=logs.append)
    run_epochs(callback, tiny_model(), range(3))
    assert json.load(open(os.path.join(best_dir, "bleu.json"))) == {"step": 20, "bleu": 100.0}
    restored = tiny_model()
    weights_checkpoint(restored).restore(tf.train.latest_checkpoint(best_dir)).expect_partial()
    np.testing.assert_array_equal(restored.weights[0].numpy(), 1.0)  # epoch 1's weights
    assert logs[-1].endswith("(best 100.0 at step 20)")


def test_every_k_epochs_and_resume(tmp_path):
    best_dir = str(tmp_path / "best")
    callback = BleuCallback(
        ScriptedTranslator([REFERENCES]), ["s1", "s2"], REFERENCES, best_dir, every_epochs=2, log=lambda _: None
    )
    run_epochs(callback, tiny_model(), range(2))  # only epoch 1 is scored
    resumed = BleuCallback(
        ScriptedTranslator([["a b c", "d e f"]]), ["s1", "s2"], REFERENCES, best_dir, every_epochs=2, log=lambda _: None
    )
    assert resumed.best == {"step": 20, "bleu": 100.0}
    run_epochs(resumed, tiny_model(), range(2, 4))
    assert json.load(open(os.path.join(best_dir, "bleu.json")))["step"] == 20  # a worse BLEU saves nothing


class Scores(keras.callbacks.Callback):
    """At each epoch end, after the BLEU callback (`train` runs the caller's callbacks after its
    own): the step, the BLEU it logged, sacreBLEU's BLEU of a `Translator` of the model on the
    validation pairs, and the weights."""

    def __init__(self, model_dir, sources, references):
        super().__init__()
        self.model_dir, self.sources, self.references = model_dir, sources, references
        self.epochs = []

    def on_train_begin(self, logs=None):
        self.translator = Translator(self.model, ModelDir(self.model_dir).tokenizer())

    def on_epoch_end(self, epoch, logs=None):
        bleu = sacrebleu.corpus_bleu(self.translator.translate(self.sources), [self.references]).score
        step = int(self.model.optimizer.iterations.numpy())
        self.epochs.append((step, logs["val_bleu"], bleu, [w.numpy() for w in self.model.weights]))


@pytest.mark.slow  # ~10 CPU seconds: a `train` run's traces (a step, validation, the search)
def test_training_logs_the_bleu_of_its_translator_and_keeps_the_best_weights(tmp_path):
    """`train` with validation BLEU every 40 steps, on the 12 shortest fixture pairs (training and
    validation both, so that BLEU rises as the model learns them; measured 2026-12-04: 0.0, 86.16,
    97.54): each BLEU logged is sacreBLEU's on a real `Translator`'s translations of the validation
    pairs, and best/ holds the weights of the best, written again as BLEU rose."""
    pairs = sorted(FIXTURE.read_text(encoding="utf-8").splitlines(), key=len)[:12]
    (tmp_path / "pairs.tsv").write_text("\n".join(pairs) + "\n", encoding="utf-8")
    sources, references = zip(*(pair.split("\t") for pair in pairs))
    model_dir = str(tmp_path / "model")
    config = TransformerConfig.tiny(vocab_size=120, num_layers=1, dropout=0.0, norm_first=True, max_length=32)
    training = TrainingConfig(
        max_steps=120, steps_per_epoch=40, bleu_every_epochs=1, batch_tokens=256, warmup_fraction=0.1,
        learning_rate_scale=5.0, label_smoothing=0.0, shuffle_buffer=100,
    )  # fmt: skip
    data = DataConfig(data=str(tmp_path / "pairs.tsv"), valid_data=str(tmp_path / "pairs.tsv"))
    scores, lines = Scores(model_dir, list(sources), list(references)), []
    train(model_dir, config, training, data, callbacks=[scores], verbose=0, log=lines.append)
    assert [step for step, *_ in scores.epochs] == [40, 80, 120]
    for step, logged, bleu, _ in scores.epochs:
        assert logged == round(bleu, 2)
        assert f"step {step}: validation BLEU {logged} on 12 sentences" in "\n".join(lines)
    best = max(scores.epochs, key=lambda epoch: epoch[1])  # the first of equal BLEUs
    assert best[0] > 40  # BLEU rose after the first evaluation: best/ was written again
    assert json.load(open(os.path.join(model_dir, "best", "bleu.json"))) == {"step": best[0], "bleu": best[1]}
    restored = load_model(model_dir, "best")[0]
    for weight, kept in zip(restored.weights, best[3]):
        np.testing.assert_array_equal(weight.numpy(), kept)
