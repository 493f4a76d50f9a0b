"""What one Keras backend computes from the same weights and batches: run by tests/test_backends.py
in a process of its own per backend (KERAS_BACKEND: Keras fixes the backend when it is imported),
it prints one JSON line and writes arrays into DIR.

    KERAS_BACKEND=jax python tests/backend_parity.py DIR
    KERAS_BACKEND=tensorflow python tests/backend_parity.py DIR --decode DIR/jax.trained.weights.h5
    KERAS_BACKEND=jax python tests/backend_parity.py MODEL_DIR --model-dir

DIR holds `tokenizer.model` and `initial.weights.h5` (saved once, on TensorFlow). From those weights
the run computes the logits of the first batch of the `make_batches` pipeline (DIR/BACKEND.logits.npy)
and both learning-rate schedules at a few steps, trains `compile_model`'s model for `STEPS` steps of
`fit` on that pipeline (the loss of every step), saves the trained weights to
DIR/BACKEND.trained.weights.h5 and decodes `SOURCES` greedily by a full forward pass per step. With
`--decode`, it also decodes `SOURCES` with `kt.greedy_search` (TensorFlow's cached search, the
tools a model dir is translated with) from each of the given weights. With `--model-dir`, it only
decodes `SOURCES` greedily by full forward passes with the model dir's latest checkpoint (`load_model`
on this backend).
"""

import argparse
import hashlib
import json
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402  (the input pipeline is tf.data on every backend)

import keras_transformer as kt  # noqa: E402
from keras_transformer.data.batching import make_batches  # noqa: E402
from keras_transformer.data.tokenizer import SubwordTokenizer  # noqa: E402
from keras_transformer.special_tokens import EOS_ID, PAD_ID, START_ID  # noqa: E402
from keras_transformer.training.losses import LabelSmoothedCrossEntropy  # noqa: E402
from keras_transformer.training.metrics import MaskedAccuracy  # noqa: E402
from keras_transformer.training.optimization import compile_model  # noqa: E402
from keras_transformer.training.schedules import StepBudgetSchedule, TransformerSchedule  # noqa: E402

FIXTURE = pathlib.Path(__file__).parent / "data" / "fixture_bible.en-de.tsv"
MAX_LENGTH = 24  # buckets of 8, 12, 16 and 24 tokens: few shapes for JAX to compile
BATCH_TOKENS = 256
STEPS = 50
TRAINING = kt.TrainingConfig(warmup_steps=30)  # 50 steps then decode varied tokens, not one repeated
SCHEDULE_STEPS = [0, 4, 9, 10, 49, 99, 999]  # Keras' 0-based iterations
SOURCES = [
    "In the beginning God created the heavens and the earth.",
    "Jesus wept.",
    "And God said, Let there be light.",
    "The Lord is my shepherd; I shall not want.",
]
DECODE_LENGTH = 12  # tokens generated at most (max_decode_length), EOS included


def config(tokenizer):
    return kt.TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, max_length=MAX_LENGTH, dropout=0.0)


def model_with(tokenizer, weights: str) -> kt.Transformer:
    model = kt.Transformer(config(tokenizer))
    model.build()
    model.load_weights(weights)
    return model


def batches(tokenizer) -> tf.data.Dataset:
    """The training batches: the fixture's pairs through the package's pipeline, in the file's order
    (a shuffle buffer of 1), so that every iterator Keras opens on it yields the same batches (JAX's
    `fit` opens one for its symbolic build, then another to train)."""
    sources, targets = zip(*(line.split("\t") for line in FIXTURE.read_text(encoding="utf-8").splitlines()))
    pairs = tf.data.Dataset.from_tensor_slices((list(sources), list(targets)))
    return make_batches(
        pairs, tokenizer, max_length=MAX_LENGTH, batch_tokens=BATCH_TOKENS, training=True, shuffle_buffer=1
    )


def source_ids(tokenizer) -> np.ndarray:
    return tokenizer.source_ids(tf.constant(SOURCES), MAX_LENGTH)[0].numpy()  # [B, S]


def schedule_values() -> dict:
    eq3 = TransformerSchedule(d_model=32, warmup_steps=10)
    fitted = StepBudgetSchedule(d_model=32, total_steps=100, warmup_fraction=0.1, cooldown_fraction=0.2)
    return {
        "eq3": [float(eq3(step)) for step in SCHEDULE_STEPS],
        "fitted": [float(fitted(step)) for step in SCHEDULE_STEPS],
    }


def greedy_by_forward_passes(model, source: np.ndarray) -> tuple[list, list]:
    """Greedy decoding as the search defines it (pad and start never chosen, EOS ends a sentence),
    by a full forward pass over the prefix at every step: tokens [B, <= DECODE_LENGTH] and scores
    [B] (the chosen tokens' summed log-probabilities). The prefix is padded to one width, whose
    pads no earlier position sees (the decoder's self-attention is causal), so that JAX compiles
    the forward pass once."""
    batch = len(source)
    prefix = np.full((batch, DECODE_LENGTH + 1), PAD_ID, np.int32)  # [B, L + 1]
    prefix[:, 0] = START_ID
    done, scores = np.zeros(batch, bool), np.zeros(batch)
    for step in range(DECODE_LENGTH):
        logits = np.asarray(model.predict_on_batch((source, prefix)))[:, step]  # [B, V]
        shifted = logits - logits.max(-1, keepdims=True)
        log_probs = shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))  # log softmax, [B, V]
        log_probs[:, [PAD_ID, START_ID]] = -np.inf
        token = np.where(done, PAD_ID, log_probs.argmax(-1)).astype(np.int32)  # [B]
        scores += np.where(done, 0.0, log_probs[np.arange(batch), token])
        done |= token == EOS_ID
        prefix[:, step + 1] = token
        if done.all():
            break
    return [[int(t) for t in row if t != PAD_ID] for row in prefix[:, 1:]], scores.tolist()


class StepLosses(keras.callbacks.Callback):
    """The loss of every training step of one epoch, from the running means Keras logs."""

    def on_train_begin(self, logs=None):
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))

    def losses(self) -> list[float]:
        return [(i + 1) * mean - i * previous for i, (mean, previous) in enumerate(zip(self.means, [0.0, *self.means]))]


def decode_with_tensorflow_tools(tokenizer, weights: str) -> dict:
    """`kt.greedy_search` (TensorFlow's cached search) from the weights in `weights`."""
    result = kt.greedy_search(model_with(tokenizer, weights), source_ids(tokenizer), max_decode_length=DECODE_LENGTH)
    return {
        "greedy": [[int(t) for t in row if t != PAD_ID] for row in result.ids.numpy()[:, 0]],  # [B, L] -> rows
        "greedy_scores": result.scores.numpy()[:, 0].tolist(),
    }


def run(directory: pathlib.Path, decode: list[str]) -> dict:
    backend = keras.backend.backend()
    tokenizer = SubwordTokenizer.load(str(directory / "tokenizer.model"))
    model = model_with(tokenizer, str(directory / "initial.weights.h5"))
    data = batches(tokenizer)
    taken = list(data.take(STEPS).as_numpy_iterator())
    digest = hashlib.sha256()
    for (source, target_in), target_out in taken:
        digest.update(source.tobytes() + target_in.tobytes() + target_out.tobytes())
    (source, target_in), _ = taken[0]
    np.save(directory / f"{backend}.logits.npy", np.asarray(model.predict_on_batch((source, target_in))))

    compile_model(model, TRAINING)
    steps = StepLosses()
    history = model.fit(data, steps_per_epoch=STEPS, epochs=1, verbose=0, callbacks=[steps]).history
    model.save_weights(str(directory / f"{backend}.trained.weights.h5"))
    tokens, scores = greedy_by_forward_passes(model, source_ids(tokenizer))
    return {
        "backend": backend,
        "batches": digest.hexdigest(),
        "schedules": schedule_values(),
        "steps": int(model.optimizer.iterations.numpy()),
        "losses": steps.losses(),  # the first: the initial weights' loss on the first batch
        "accuracy": float(history["accuracy"][-1]),
        "greedy": tokens,
        "greedy_scores": scores,
        "decoded": {weights: decode_with_tensorflow_tools(tokenizer, weights) for weights in decode},
    }


def decode_model_dir(path: str) -> dict:
    """Greedy decoding of `SOURCES` by full forward passes with the latest checkpoint of the model dir
    `path`, on this backend."""
    model, tokenizer, values = kt.load_model(path)
    ids = tokenizer.source_ids(tf.constant(SOURCES), model.config.max_length)[0].numpy()  # [B, S]
    tokens, scores = greedy_by_forward_passes(model, ids)
    return {"backend": keras.backend.backend(), "checkpoint": values["checkpoint_path"], "greedy": tokens}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directory", type=pathlib.Path)
    parser.add_argument("--decode", nargs="*", default=[], metavar="WEIGHTS", help="decode with kt.greedy_search")
    parser.add_argument("--model-dir", action="store_true", help="DIRECTORY is a model dir: decode with it only")
    args = parser.parse_args()
    keras.utils.set_random_seed(0)
    print(json.dumps(decode_model_dir(str(args.directory)) if args.model_dir else run(args.directory, args.decode)))


if __name__ == "__main__":
    main()
