"""Run by test_distribute.py in a fresh process (logical devices must be set before TF starts):
train the same tiny model on the same batches on one device and under a strategy on 2 logical
CPU devices, through the public API (`kt.Transformer`, `compile_model`, `model.fit`); print the
per-step losses, then `model.evaluate`'s loss on the same batches, and the largest weight
difference as JSON: one line per SIZES, each run on models of its own.

    python tests/replica_parity.py STRATEGY SIZES...   # SIZES: sequences per batch, e.g. 4,5,4
"""

import json
import os
import sys

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import keras_transformer as kt  # noqa: E402
from keras_transformer.special_tokens import PAD_ID
from keras_transformer.training.distribute import resolve_strategy, use_cpu_devices  # noqa: E402
from keras_transformer.training.optimization import compile_model  # noqa: E402

use_cpu_devices(2)
CONFIG = kt.TransformerConfig.tiny(vocab_size=50, num_layers=1, dropout=0.0)  # what is compared is not depth
# Adam's epsilon 1e-9 (§5.3) turns float rounding in a near-zero gradient into a full-size step
# of either sign; a larger epsilon keeps the comparison about the gradients.
TRAINING = kt.TrainingConfig(warmup_steps=3, learning_rate_scale=2.0, epsilon=1e-4)


def batches(sizes):
    """Padded id batches of `sizes` sequences of 8 tokens: an odd size splits unevenly (5 = 3 + 2)
    over 2 replicas."""
    rng = np.random.default_rng(0)
    out = []
    for size in sizes:
        ids = rng.integers(3, CONFIG.vocab_size, size=(3, size, 8)).astype("int32")
        for row in range(size):  # ragged lengths: pad the tails
            ids[:, row, rng.integers(2, 9) :] = PAD_ID
        ids[2, :, 0] = 3  # every target has at least one token
        out.append(((ids[0], ids[1]), ids[2]))
    return out


def run(strategy, sizes, initial):
    keras.utils.set_random_seed(0)
    with strategy.scope():
        model = compile_model(kt.Transformer(CONFIG), TRAINING)
        model.build()
        model.optimizer.build(model.trainable_variables)
    if initial is not None:
        model.set_weights(initial)
    initial = [w.copy() for w in model.get_weights()]
    losses = []
    logger = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
    data = batches(sizes)
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(data),
        output_signature=(
            (tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None, None], tf.int32)),
            tf.TensorSpec([None, None], tf.int32),
        ),
    )
    model.fit(dataset.repeat(), steps_per_epoch=len(data), epochs=1, verbose=0, callbacks=[logger], shuffle=False)
    validation = model.evaluate(dataset, verbose=0, return_dict=True)["loss"]  # finite: ends with an empty step
    return losses + [validation], model.get_weights(), initial, int(model.optimizer.iterations.numpy())


strategy = resolve_strategy(sys.argv[1])
for argument in sys.argv[2:]:
    sizes = [int(size) for size in argument.split(",")]
    one_losses, one_weights, initial, one_steps = run(tf.distribute.get_strategy(), sizes, None)
    mirrored_losses, mirrored_weights, _, mirrored_steps = run(strategy, sizes, initial)
    print(
        json.dumps(
            {
                "sizes": argument,
                "replicas": strategy.num_replicas_in_sync,
                "steps": [one_steps, mirrored_steps],
                "one_device_losses": one_losses,
                "mirrored_losses": mirrored_losses,
                "max_loss_difference": max(abs(a - b) for a, b in zip(one_losses, mirrored_losses)),
                "max_weight_difference": max(
                    float(np.max(np.abs(a - b))) for a, b in zip(one_weights, mirrored_weights)
                ),
                "max_weight_change": max(float(np.max(np.abs(a - b))) for a, b in zip(one_weights, initial)),
            }
        ),
        flush=True,
    )
