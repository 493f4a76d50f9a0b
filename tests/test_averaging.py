"""Checkpoint averaging (§6.1): the mean of known weights, through the model dir and the CLI's loader."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import TrainingConfig, Transformer, TransformerConfig
from keras_transformer.model_dir import ModelDir, ModelDirError, load_model
from keras_transformer.training.averaging import average_checkpoints, average_last


def constant_checkpoints(model, manager, values):
    """Save one checkpoint per value, every weight of `model` filled with it, numbered 10, 20, ..."""
    for step, value in enumerate(values, start=1):
        for weight in model.weights:
            weight.assign(np.full(weight.shape, value, weight.dtype))
        manager.save(checkpoint_number=10 * step)


@pytest.fixture
def model_dir(tmp_path, tokenizer):
    config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, num_layers=1, d_model=8, d_ff=8, num_heads=2)
    directory = ModelDir(str(tmp_path / "model"))
    directory.write(config, TrainingConfig(), "fixture", tokenizer)
    model = Transformer(config)
    model.build()
    optimizer = keras.optimizers.Adam()  # as in training: the optimizer reaches most weights
    optimizer.build(model.trainable_variables)
    constant_checkpoints(
        model, directory.checkpoint_manager(tf.train.Checkpoint(model=model, optimizer=optimizer)), [1.0, 2.0, 4.0, 8.0]
    )
    return directory


def test_average_checkpoints_gives_the_mean(model_dir):
    model, _, _ = load_model(model_dir.path)
    paths = [model_dir.resolve_checkpoint(None).replace("ckpt-40", f"ckpt-{step}") for step in (10, 20, 40)]
    average_checkpoints(model, paths)
    for weight in model.weights:
        np.testing.assert_allclose(weight.numpy(), (1.0 + 2.0 + 8.0) / 3.0, rtol=1e-6)


def test_average_last_writes_the_averaged_checkpoint(model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a relative model dir, as on the command line
    path = average_last("model", last=3)
    assert path.endswith("averaged/ckpt-40")
    model, _, _ = load_model("model", "averaged")
    for weight in model.weights:
        np.testing.assert_allclose(weight.numpy(), (2.0 + 4.0 + 8.0) / 3.0, rtol=1e-6)
    latest, _, _ = load_model(model_dir.path)  # training checkpoints are untouched
    np.testing.assert_allclose(latest.weights[0].numpy(), 8.0)


def test_averaging_more_checkpoints_than_kept_is_refused(model_dir):
    with pytest.raises(ModelDirError, match="holds 4 checkpoint\\(s\\), fewer than the 6 to average"):
        average_last(model_dir.path, last=6)
    with pytest.raises(ModelDirError, match="has no averaged checkpoint yet"):
        load_model(model_dir.path, "averaged")
