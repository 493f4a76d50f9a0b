"""Data, one subcommand per question; `memory` prints one JSON line.

`memory`: peak memory (RSS) and time to the first training step of a short `tiny` training, per
data source. Each source trains in a fresh process (`--steps` steps of the tiny preset, one epoch, the
validation capped by --valid-pairs), which reports its peak RSS (`ru_maxrss`) and the seconds
from its start to the end of its first training step (tokenizer, graph tracing included).
The goal: a large TSV costs at most a few hundred MB more than the embedded Bible.

    python bench/data.py make-tsv /tmp/big.tsv --lines 2000000   # the Bible repeated, numbered
    python bench/data.py memory --data bible-en-de /tmp/big.tsv
"""

from __future__ import annotations

import time

START = time.monotonic()  # before the imports: the first step's time counts them

import argparse
import gzip
import json
import os
import resource
import subprocess
import sys
import tempfile

from common import command_line


def make_tsv(path: str, lines: int) -> None:
    """`lines` pairs: the embedded Bible's verses over and over, each side numbered (" #N"), so that
    no two lines are equal."""
    from importlib import resources

    bible = resources.files("keras_transformer") / "resources" / "bible.en-de.tsv.gz"
    with gzip.open(bible, "rt", encoding="utf-8") as f:
        verses = [line.rstrip("\n").split("\t")[3:5] for line in f][1:]
    with open(path, "w", encoding="utf-8") as out:
        for number in range(lines):
            source, target = verses[number % len(verses)]
            out.write(f"{source} #{number}\t{target} #{number}\n")


def child(data: str, steps: int, valid_pairs: int) -> None:
    """Train in this process; print {"peak_rss_mb", "first_step_s", "total_s"}."""
    import keras

    from keras_transformer import DataConfig, TrainingConfig, TransformerConfig
    from keras_transformer.training.trainer import train

    class FirstStep(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if not hasattr(self, "at"):
                self.at = time.monotonic() - START

    first = FirstStep()
    config = TransformerConfig.tiny()
    training = TrainingConfig.preset("tiny", max_steps=steps, steps_per_epoch=steps, batch_tokens=1024)
    with tempfile.TemporaryDirectory() as model_dir:
        data_config = DataConfig(data=data, valid_pairs=valid_pairs)
        train(model_dir, config, training, data_config, verbose=0, callbacks=[first], log=lambda _: None)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux
    total_s = time.monotonic() - START
    print(json.dumps({"peak_rss_mb": round(peak_mb), "first_step_s": round(first.at, 1), "total_s": round(total_s, 1)}))


def memory_arguments(parser) -> None:
    parser.add_argument("--data", nargs="+", default=["bible-en-de"], help="data sources, each in a fresh process")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--valid-pairs", type=int, default=3000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)


def make_tsv_arguments(parser) -> None:
    parser.add_argument("path", help="the TSV to write")
    parser.add_argument("--lines", type=int, default=2_000_000)


def memory(args) -> None:
    if args.child:
        child(args.data[0], args.steps, args.valid_pairs)
        return
    from common import emit, load_average, record

    runs = {}
    for data in args.data:
        command = [sys.executable, __file__, "memory", "--child", "--data", data, "--steps", str(args.steps)]
        command += ["--valid-pairs", str(args.valid_pairs)]
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": os.pathsep.join(sys.path)}
        result = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
        if result.returncode:
            raise SystemExit(f"{data}: {result.stderr[-2000:]}")
        size = os.path.getsize(data) if os.path.isfile(data) else None
        runs[data] = {**json.loads(result.stdout.strip().splitlines()[-1]), "file_mb": size and round(size / 2**20)}
    first = runs[args.data[0]]["peak_rss_mb"]
    emit(
        record(
            benchmark="data_memory",
            preset="tiny",
            steps=args.steps,
            runs=runs,
            peak_rss_above_first_mb={data: run["peak_rss_mb"] - first for data, run in runs.items()},
            load_after=load_average(),
        )
    )


COMMANDS = {
    "memory": (memory_arguments, memory, "peak RSS and time to the first step of a tiny training, per data source"),
    "make-tsv": (make_tsv_arguments, lambda args: make_tsv(args.path, args.lines), "a TSV of the Bible repeated"),
}
main = command_line(__doc__, COMMANDS)

if __name__ == "__main__":
    main()
