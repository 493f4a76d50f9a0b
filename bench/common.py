"""Shared pieces of the benchmarks: workloads, synthetic batches, step
timing through `model.fit`, and the machine/software record of every figure (model FLOPs and the
matmul rate: `flops.py`).

Every benchmark prints one JSON line; `record()` gives the fields they all share.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import platform
import statistics
import subprocess
import sys
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_transformer import TransformerConfig  # noqa: E402
from keras_transformer.cpu import cpu_flags  # noqa: E402
from keras_transformer.special_tokens import RESERVED_IDS, START_ID  # noqa: E402

FIRST_TOKEN = len(RESERVED_IDS)  # synthetic batches use no reserved id (pad, start, EOS, unknown)


@dataclasses.dataclass(frozen=True)
class Workload:
    """A model and a fixed batch shape: `batch` sentences of `source_length` and `target_length` tokens."""

    config: TransformerConfig
    batch: int
    source_length: int
    target_length: int


WORKLOADS = {
    # the peers' comparison (not the `small` preset): d_model 256, 4 heads, d_ff 1024, 3 + 3 layers, vocab 8000,
    # 64 x 32 tokens
    "medium": Workload(
        TransformerConfig(vocab_size=8000, num_layers=3, d_model=256, d_ff=1024, num_heads=4), 64, 32, 32
    ),
    # the `small` preset (the CPU recipe: d_model 128, 3 + 3 pre-LN layers), vocab 8000, 64 x 32 tokens
    "small": Workload(TransformerConfig.small(vocab_size=8000), 64, 32, 32),
    # the paper's base (Table 3), vocab 32000, 64 x 64 tokens
    "base": Workload(TransformerConfig.base(vocab_size=32000), 64, 64, 64),
    # the paper's big (Table 3), vocab 32000, 64 x 64 tokens
    "big": Workload(TransformerConfig.big(vocab_size=32000), 64, 64, 64),
    # for the smoke test only: seconds, not minutes
    "tiny": Workload(TransformerConfig.tiny(vocab_size=500), 8, 12, 12),
}


def synthetic_batch(workload: Workload, seed: int = 0):
    """((source_ids, target_in_ids), target_out_ids), int32, random non-reserved tokens, no padding."""
    rng = np.random.default_rng(seed)
    vocab = workload.config.vocab_size

    def ids(length):
        return rng.integers(FIRST_TOKEN, vocab, size=(workload.batch, length), dtype=np.int32)

    target = ids(workload.target_length)
    target_in = np.concatenate([np.full((workload.batch, 1), START_ID, np.int32), target[:, :-1]], axis=1)
    return (ids(workload.source_length), target_in), target


def repeated(batch) -> tf.data.Dataset:
    """The same batch forever, as the input pipeline of `model.fit` (no host work per step)."""
    return tf.data.Dataset.from_tensors(batch).repeat()


class StepTimes(keras.callbacks.Callback):
    """Wall time of every training step seen by `model.fit`, host overhead included: from the end
    of one step to the end of the next (the first step of a `fit` call from its own start)."""

    def __init__(self):
        super().__init__()
        self.times: list[float] = []

    def on_train_batch_begin(self, batch, logs=None):
        if batch == 0:
            self._last = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        float(logs["loss"])  # the step's results exist: it has finished
        now = time.perf_counter()
        self.times.append(now - self._last)
        self._last = now


def fit_steps(model, dataset, steps: int) -> list[float]:
    """Run `steps` training steps with `model.fit` and return each step's wall time in seconds."""
    timer = StepTimes()
    model.fit(dataset, epochs=1, steps_per_epoch=steps, callbacks=[timer], shuffle=False, verbose=0)
    return timer.times


def median(values) -> float:
    return float(statistics.median(values))


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor()
    for line in out.splitlines():
        if line.startswith("Model name:"):
            return line.split(":", 1)[1].strip()
    return platform.processor()


def held_out_pairs(model_dir: str, limit: int | None = None, split: str = "test"):
    """The first `limit` (or all) pairs of `split` (the held-out `test` split; "train": the pairs it
    learned from) of the data the model in `model_dir` was trained on, through the package's one
    reader (`keras_transformer.model_dir.held_out`: the first of weighted sources, the model's direction):
    sources tagged with a multilingual model's target language, as `evaluate` reads them: a
    `HeldOut` (sources, references, ..., spec: the data read)."""
    from keras_transformer.data.tokenizer import tag
    from keras_transformer.model_dir.held_out import held_out

    pairs = held_out(model_dir, split, limit)
    return pairs._replace(sources=[tag(text, pairs.target_lang) for text in pairs.sources])


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def record(**fields) -> dict:
    """The fields every benchmark line carries: date, command, machine, load, versions."""
    import keras_transformer

    return {
        **fields,
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]),
        "machine": {
            "cpu": cpu_model(),
            "cores": os.cpu_count(),
            "cpu_flags": cpu_flags(),
            "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads() or os.cpu_count(),
            "load_average_1_5_15": load_average(),
        },
        "versions": {
            "python": platform.python_version(),
            "tensorflow": tf.__version__,
            "keras": keras.__version__,
            "numpy": np.__version__,
            "keras_transformer": keras_transformer.__version__,
        },
    }


def command_line(doc: str, commands: dict):
    """A question's `main(argv=None)`: one parser, a subcommand per entry of `commands` (name:
    (add_arguments(parser), run(args), help)); the description is `doc`'s first paragraph.
    `main.parser()` builds that parser."""
    import argparse

    def parser():
        parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
        subcommands = parser.add_subparsers(dest="subcommand", required=True)
        for name, (arguments, _, help) in commands.items():
            arguments(subcommands.add_parser(name, help=help, description=help))
        return parser

    def main(argv=None):
        args = parser().parse_args(argv)
        return commands[args.subcommand][1](args)

    main.parser = parser
    return main


def emit(line: dict) -> None:
    """Print the benchmark's one JSON line."""
    import json

    print(json.dumps(line), flush=True)
