"""The validation-BLEU callback keeps the weights of the best BLEU, and resumes from its record."""

import json
import os

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.model_dir import weights_checkpoint
from keras_transformer.training.callbacks.bleu import BleuCallback

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
