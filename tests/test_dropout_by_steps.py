"""Dropout by the steps a run makes (`TrainingConfig.dropout_from_steps`): off before the model is
built where `max_steps` falls short, off in the built model's traced step where a time budget's
estimate does, and kept otherwise."""

import keras
import numpy as np
import pytest
from conftest import FIXTURE

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.model import Transformer
from keras_transformer.training.callbacks.budget import TimeBudget
from keras_transformer.training.dropout import dropout_for_steps, dropout_off_below, without_dropout
from keras_transformer.training.optimization import compile_model
from keras_transformer.training.trainer import train

TINY = TransformerConfig.tiny(vocab_size=300, num_layers=1, dropout=0.1)


@pytest.mark.parametrize("from_steps, switched", [(100, True), (10, False)])
def test_a_budget_short_of_the_steps_turns_dropout_off_in_the_traced_step(from_steps, switched):
    """Eight ones through Dropout(0.5) into a sum (a kernel of ones, learning rate 0): the sum is 8,
    the target, only without dropout. 1 s a step, 40 s: the estimate after 3 timed steps is 40
    steps. Below `from_steps`, every step after the estimate's has a loss of exactly 0."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((8,)), keras.layers.Dropout(0.5), keras.layers.Dense(1, use_bias=False, kernel_initializer="ones")]
    )
    model.compile(keras.optimizers.SGD(0.0), "mse")
    messages = []
    clock = lambda: float(model.optimizer.iterations.numpy())
    on_estimate = dropout_off_below(model, from_steps, messages.append)
    budget = TimeBudget(40, calibration_steps=3, log=messages.append, clock=clock, on_estimate=on_estimate)
    x = np.ones((4, 8), "float32")
    history = model.fit(x, 8 * x[:, :1], batch_size=1, epochs=100, verbose=0, callbacks=[budget])
    losses = history.history["loss"]  # 10 epochs of 4 steps; the estimate at the first epoch's last step
    assert len(losses) == 10 and losses[0] > 0
    dropped = [f"dropout 0, not 0.5: the budget buys ~40 steps < dropout_from_steps {from_steps}"]
    assert messages == [
        "time budget 40s: 1.00s per step, about 40 steps in all",
        *(dropped if switched else []),
        "time budget of 40s used up at step 40",
    ]
    if switched:
        assert losses[1:] == [0.0] * 9 and model.layers[0].rate == 0.0
    else:
        assert min(losses[1:]) > 0 and model.layers[0].rate == 0.5


def test_without_dropout_reaches_every_dropout_layer_of_the_transformer():
    """The embedding sums' and every residual connection's (§5.4): 1 + 2 per encoder layer + 3 per
    decoder layer; then a training call is the inference call, and the training step is traced again."""
    config = TransformerConfig.tiny(vocab_size=60, dropout=0.1)
    model = compile_model(Transformer(config), TrainingConfig(warmup_steps=2))
    model.build()
    layers = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout)]
    assert [layer.rate for layer in layers] == [0.1] * (1 + 2 * config.num_layers + 3 * config.num_layers)
    ids = np.random.default_rng(0).integers(3, 60, size=(2, 7)).astype("int32")
    assert not np.allclose(model((ids, ids), training=True), model((ids, ids), training=False))
    model.make_train_function()
    traced = model.train_function
    without_dropout(model)
    assert [layer.rate for layer in layers] == [0.0] * len(layers) and model.train_function is not traced
    np.testing.assert_array_equal(model((ids, ids), training=True), model((ids, ids), training=False))


def test_max_steps_short_of_the_steps_builds_the_model_without_dropout():
    heard = []
    short = TrainingConfig(max_steps=8999, dropout_from_steps=9000)
    assert dropout_for_steps(TINY, short, heard.append).dropout == 0.0
    assert heard == ["dropout 0, not 0.1: max_steps 8999 < dropout_from_steps 9000"]
    assert dropout_for_steps(TINY, TrainingConfig(max_steps=9000, dropout_from_steps=9000), heard.append) is TINY
    budgeted = TrainingConfig(max_steps=10, dropout_from_steps=9000, time_budget_s=60.0)  # the budget decides
    assert dropout_for_steps(TINY, budgeted, heard.append) is TINY and len(heard) == 1
    with pytest.raises(ValueError, match="dropout_from_steps must be >= 0"):
        TrainingConfig(dropout_from_steps=-1)


class StopAfterDropoutGoes(keras.callbacks.Callback):
    """Ends `fit` two steps after the model's dropout layers are all at rate 0: the step traced
    again trains."""

    def on_train_begin(self, logs=None):
        self.steps_without = 0

    def on_train_batch_end(self, batch, logs=None):
        rates = [layer.rate for layer in self.model._flatten_layers() if isinstance(layer, keras.layers.Dropout)]
        self.steps_without += not any(rates)
        self.model.stop_training = self.steps_without > 2


def test_train_on_a_budget_short_of_the_steps_trains_on_without_dropout(tmp_path):
    """`train` with a 2-minute budget and a step threshold no budget reaches, ended by the test
    once the estimate (after the first 21 steps) has turned dropout off."""
    heard, stopper = [], StopAfterDropoutGoes()
    training = TrainingConfig(batch_tokens=512, time_budget_s=120.0, dropout_from_steps=10**9, steps_per_epoch=1000)
    model = train(
        str(tmp_path / "m"),
        TINY,
        training,
        DataConfig(data=str(FIXTURE)),
        verbose=0,
        callbacks=[stopper],
        log=heard.append,
    )
    assert any(line.startswith("dropout 0, not 0.1: the budget buys ~") for line in heard), heard
    assert stopper.steps_without == 3 and int(model.optimizer.iterations.numpy()) >= 21 + 2
