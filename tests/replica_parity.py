"""Run by test_distribute.py in a fresh process (logical devices must be set before TF starts):
train the same tiny model on the same batches on one device and under MirroredStrategy on
2 logical CPU devices; print the per-step losses and the largest weight difference as JSON."""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer.config import TrainingConfig, TransformerConfig  # noqa: E402
from keras_transformer.distribute import DistributedTransformer, resolve_strategy, use_cpu_devices  # noqa: E402
from keras_transformer.training import compile_model  # noqa: E402

use_cpu_devices(2)
CONFIG = TransformerConfig.tiny(vocab_size=50, dropout=0.0)
# Adam's epsilon 1e-9 (§5.3) turns float rounding in a near-zero gradient into a full-size step
# of either sign; a larger epsilon keeps the comparison about the gradients.
TRAINING = TrainingConfig(warmup_steps=3, learning_rate_scale=2.0, epsilon=1e-4)


def batches():
    """Padded id batches of 4, 5 and 4 sequences: 5 splits unevenly (3 + 2) over 2 replicas."""
    rng = np.random.default_rng(0)
    out = []
    for size, length in [(4, 8), (5, 8), (4, 8)]:
        ids = rng.integers(3, CONFIG.vocab_size, size=(3, size, length)).astype("int32")
        for row in range(size):  # ragged lengths: pad the tails
            ids[:, row, rng.integers(2, length + 1) :] = CONFIG.pad_id
        ids[2, :, 0] = 3  # every target has at least one token
        out.append(((ids[0], ids[1]), ids[2]))
    return out


def run(strategy, initial):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(DistributedTransformer(CONFIG), TRAINING)
        model.build()
        model.optimizer.build(model.trainable_variables)
    if initial is not None:
        model.set_weights(initial)
    initial = [w.copy() for w in model.get_weights()]
    losses = []
    logger = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: losses.append((float(logs["loss"]), int(model.optimizer.iterations.numpy()))))
    data = batches()
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(data),
        output_signature=(
            (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)),
            tf.TensorSpec([None, None], tf.int32),
        ),
    )
    model.fit(dataset.repeat(), steps_per_epoch=len(data), epochs=1, verbose=0, callbacks=[logger], shuffle=False)
    return losses, model.get_weights(), initial, int(model.optimizer.iterations.numpy())


one_losses, one_weights, initial, one_steps = run(tf.distribute.get_strategy(), None)
strategy = resolve_strategy(sys.argv[1] if len(sys.argv) > 1 else "mirrored")
mirrored_losses, mirrored_weights, _, mirrored_steps = run(strategy, initial)
print(
    json.dumps(
        {
            "replicas": strategy.num_replicas_in_sync,
            "steps": [one_steps, mirrored_steps],
            "one_device_losses": one_losses,
            "mirrored_losses": mirrored_losses,
            "max_loss_difference": max(abs(a[0] - b[0]) for a, b in zip(one_losses, mirrored_losses)),
            "max_weight_difference": max(float(np.max(np.abs(a - b))) for a, b in zip(one_weights, mirrored_weights)),
            "max_weight_change": max(float(np.max(np.abs(a - b))) for a, b in zip(one_weights, initial)),
        }
    )
)
