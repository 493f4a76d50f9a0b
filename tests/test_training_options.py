"""Speed options and the divergence guard: mixed precision stays close to float32, gradient
accumulation of N equal micro-batches equals one step, a NaN loss stops training unsaved.

One layer each side: what these prove does not depend on depth, and a layer less halves every trace."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE

from keras_transformer.config import TrainingConfig, TransformerConfig
from keras_transformer.model import Transformer
from keras_transformer.special_tokens import PAD_ID
from keras_transformer.training.optimization import compile_model
from keras_transformer.training.trainer import TrainingDiverged, train

CONFIG = TransformerConfig.tiny(vocab_size=60, num_layers=1, dropout=0.0)
RNG = np.random.default_rng(0)
SOURCE, TARGET_IN, TARGET_OUT = (RNG.integers(3, 60, size=(4, 8)).astype("int32") for _ in range(3))
TARGET_OUT[:, 6:] = PAD_ID


def compiled(training, dtype=None, weights=None):
    model = compile_model(Transformer(CONFIG, dtype=dtype), training)
    model.build()
    if weights is not None:
        model.set_weights(weights)
    return model


@pytest.fixture(scope="module")
def float32_steps():
    """The float32 reference of both tests below, trained once: (initial weights, the weights after
    its first step, the losses of its first 2 steps) on the same batch, from seed 0."""
    keras.utils.set_random_seed(0)
    reference = compiled(TrainingConfig(warmup_steps=2))
    initial = reference.get_weights()
    losses = []
    for step in range(2):
        losses.append(reference.train_on_batch((SOURCE, TARGET_IN), TARGET_OUT, return_dict=True)["loss"])
        if step == 0:
            after_first = reference.get_weights()
    assert int(reference.optimizer.iterations) == 2
    return initial, after_first, losses


def test_mixed_bfloat16_steps_are_finite_and_close_to_float32(float32_steps):
    """The loss of the same weights and the loss after one update, each within 1% of float32's
    (bfloat16 keeps 8 significant bits). Not later steps: at the schedule's peak float32's own loss
    jumps (3.52 -> 4.37 at step 3), and a 2-core AVX2 CPU, whose bfloat16 matmuls round otherwise
    than AVX-512's, was 4.9% off there against 0.4% at step 2."""
    initial, _, expected_losses = float32_steps
    mixed = compiled(TrainingConfig(warmup_steps=2), "mixed_bfloat16", initial)
    assert mixed.encoder.compute_dtype == "bfloat16" and mixed.embedding.embeddings.dtype == "float32"
    for expected in expected_losses:
        loss = mixed.train_on_batch((SOURCE, TARGET_IN), TARGET_OUT, return_dict=True)["loss"]
        assert np.isfinite(loss) and loss == pytest.approx(expected, rel=1e-2)
    assert mixed((SOURCE, TARGET_IN)).dtype == "float32"  # logits stay float32


def test_accumulating_two_equal_micro_batches_is_one_step(float32_steps):
    initial, after_one_step, _ = float32_steps
    accumulated = compiled(TrainingConfig(warmup_steps=2, grad_accumulation=2), weights=initial)
    accumulated.train_on_batch((SOURCE, TARGET_IN), TARGET_OUT)
    assert int(accumulated.optimizer.iterations) == 0  # no update yet
    np.testing.assert_array_equal(accumulated.get_weights()[0], initial[0])
    accumulated.train_on_batch((SOURCE, TARGET_IN), TARGET_OUT)
    assert int(accumulated.optimizer.iterations) == 1
    for a, b in zip(accumulated.get_weights(), after_one_step):
        np.testing.assert_allclose(a, b, atol=1e-6)


def test_a_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    config = TransformerConfig.tiny(vocab_size=300, num_layers=1)
    training = TrainingConfig(
        batch_tokens=512, warmup_steps=1, learning_rate_scale=1e30, max_steps=8, steps_per_epoch=8, checkpoint_every=1
    )
    with pytest.raises(TrainingDiverged, match=r"NaN or infinite at step (\d+); stopped without saving") as error:
        train(str(tmp_path / "model"), config, training, str(FIXTURE), verbose=0, log=lambda message: None)
    diverged = int(str(error.value).split("at step ")[1].split(";")[0])
    latest = tf.train.latest_checkpoint(str(tmp_path / "model" / "checkpoints"))
    assert latest is not None and latest.endswith(f"ckpt-{diverged - 1}")  # the last finite step, not the NaN one
    assert f"last good checkpoint: {latest}" in str(error.value)
