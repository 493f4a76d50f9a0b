"""Data and memory, one subcommand per question; `memory` and `translate-memory` print one JSON line.

`memory`: peak memory (RSS) and time to the first training step of a short `tiny` training, per
data source. Each source trains in a fresh process (`--steps` steps of the tiny preset, one epoch, the
validation capped by --valid-pairs), which reports its peak RSS (`ru_maxrss`) and the seconds
from its start to the end of its first training step (tokenizer, graph tracing included).
The goal: a large TSV costs at most a few hundred MB more than the embedded Bible.

    python bench/data.py make-tsv /tmp/big.tsv --lines 2000000   # the Bible repeated, numbered
    python bench/data.py memory --data bible-en-de /tmp/big.tsv

`translate-memory`: memory of one long `keras-transformer translate` job: N lines (the embedded
Bible's English side, repeated) piped through the CLI's stdin; the process's resident memory
(VmRSS) sampled every 0.2 s: at its first output line, its peak, and at its last; the lines out
(one per line in, in order: a repeated verse, one translation):

    python bench/data.py translate-memory --model-dir runs/demo --lines 100000

`corpus`: what Apache Beam costs (issue 53): N lines (the embedded Bible's English side, repeated)
through `keras-transformer translate-corpus` on DirectRunner (two worker processes by default)
and through the same export's SavedModel in one process (`SavedModelTranslator`, what the
pipeline's workers call: the in-process path), each a fresh process timed from its start to its
exit (start-up, TensorFlow and the model's loading included in both), the two paths alternating
over `--rounds`. Throughput ratio: the pipeline's lines/s over the one process's (goal: at least
0.8 on 2 cores); `outputs_identical`: the pipeline's lines, put back in order by id, equal the
in-process translations:

    python bench/data.py corpus --export runs/demo-export [--lines 20000] [--rounds 1] [-- BEAM OPTIONS]
"""

from __future__ import annotations

import time

START = time.monotonic()  # before the imports: the first step's time counts them

import argparse
import gzip
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import threading

from common import command_line


def bible_verses() -> list[list[str]]:
    """The embedded Bible's [English, German] verses (its columns book, chapter, verse, en, de)."""
    from importlib import resources

    bible = resources.files("keras_transformer") / "resources" / "bible.en-de.tsv.gz"
    with gzip.open(bible, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n").split("\t")[3:5] for line in f][1:]


def make_tsv(path: str, lines: int) -> None:
    """`lines` pairs: the embedded Bible's verses over and over, each side numbered (" #N"), so that
    no two lines are equal."""
    verses = bible_verses()
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


def rss_mb(pid: int) -> float | None:
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    kilobytes = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return None if kilobytes is None else kilobytes / 1024  # None: the process has exited


def english_lines(count: int) -> list[str]:
    """`count` lines to translate: the embedded Bible's English verses, over and over."""
    verses = [english for english, _ in bible_verses()]
    return [verses[i % len(verses)] for i in range(count)]


def translate_memory_arguments(parser) -> None:
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--lines", type=int, default=100_000)
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=64)


def translate_memory(args) -> None:
    from common import emit, record

    lines = english_lines(args.lines)
    command = [sys.executable, "-m", "keras_transformer", "translate", "--model-dir", args.model_dir]
    command += ["--beam-size", str(args.beam_size), "--batch-size", str(args.batch_size)]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    writer = threading.Thread(
        target=lambda: (process.stdin.write("\n".join(lines).encode() + b"\n"), process.stdin.close())
    )
    writer.start()
    outputs, samples, first_output_rss = [], [], None
    reader = threading.Thread(target=lambda: outputs.extend(process.stdout))
    reader.start()
    start = time.perf_counter()
    while process.poll() is None:
        rss = rss_mb(process.pid)
        if rss is not None:
            samples.append((time.perf_counter() - start, rss, len(outputs)))
            if first_output_rss is None and outputs:
                first_output_rss = rss
        time.sleep(0.2)
    seconds = time.perf_counter() - start
    writer.join()
    reader.join()
    outputs = [line.decode("utf-8").rstrip("\n") for line in outputs]
    first = {}
    in_order = all(outputs[i] == outputs[first.setdefault(line, i)] for i, line in enumerate(lines[: len(outputs)]))
    while_translating = [rss for _, rss, done in samples if done]
    emit(
        record(
            benchmark="translate_memory",
            model_dir=args.model_dir,
            lines_in=len(lines),
            lines_out=len(outputs),
            repeated_lines_translated_alike=in_order,
            exit_status=process.returncode,
            seconds=round(seconds, 1),
            lines_per_s=round(len(outputs) / seconds, 1),
            rss_mb_at_first_output=round(first_output_rss or 0, 1),
            rss_mb_peak=round(max(rss for _, rss, _ in samples), 1),
            rss_mb_at_last_sample=round(while_translating[-1] if while_translating else 0, 1),
            rss_mb_by_quarter=[
                round(while_translating[int(q * (len(while_translating) - 1))], 1) for q in (0, 0.25, 0.5, 0.75, 1)
            ]
            if while_translating
            else [],
        )
    )


def corpus_arguments(parser) -> None:
    parser.add_argument("--export", required=True, help="`keras-transformer export`'s OUT")
    parser.add_argument("--lines", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=1, help="pipeline and in-process runs, alternating")
    parser.add_argument("--workdir", help="where the input and outputs go (default: a temporary directory)")
    parser.add_argument("beam_args", nargs="*", help="after --: Beam options for translate-corpus")


def in_process(args) -> None:
    """The one-process path (a child of `corpus`): translate --input's lines, write them to --output."""
    from keras_transformer.translation.exported import SavedModelTranslator

    with open(args.input, encoding="utf-8") as f:
        lines = f.read().splitlines()
    translations = SavedModelTranslator(args.export).translate(lines)
    with open(args.output, "w", encoding="utf-8") as out:
        out.writelines(line + "\n" for line in translations)


def in_process_arguments(parser) -> None:
    parser.add_argument("--export", required=True)
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", required=True)


def timed_run(command: list[str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def pipeline_rows(prefix: str) -> dict[str, str]:
    """{line number: translation} of translate-corpus's shards PREFIX-*-of-*."""
    rows = {}
    for path in pathlib.Path(prefix).parent.glob(pathlib.Path(prefix).name + "-*-of-*"):
        for line in path.read_text(encoding="utf-8").splitlines():
            line_id, translation = line.split("\t", 1)
            rows[int(line_id.rsplit(":", 1)[1])] = translation
    return rows


def corpus(args) -> None:
    from common import emit, median, record

    workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix="bench-corpus-"))
    workdir.mkdir(parents=True, exist_ok=True)
    source = workdir / "lines.txt"
    lines = english_lines(args.lines)
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    beam_args = args.beam_args[1:] if args.beam_args[:1] == ["--"] else args.beam_args
    seconds = {"pipeline": [], "in_process": []}
    for round_ in range(args.rounds):
        prefix = str(workdir / f"round{round_}" / "part")
        command = [sys.executable, "-m", "keras_transformer", "translate-corpus", "--input", str(source)]
        command += ["--output", prefix, "--export", args.export, "--", *beam_args]
        seconds["pipeline"].append(timed_run(command))
        single = workdir / f"round{round_}.in_process.txt"
        command = [sys.executable, __file__, "in-process", "--export", args.export]
        seconds["in_process"].append(timed_run(command + ["--input", str(source), "--output", str(single)]))
    rows = pipeline_rows(prefix)
    expected = single.read_text(encoding="utf-8").splitlines()
    failures = pathlib.Path(prefix).parent.glob("part.failed-*")
    failed = sum(len(path.read_text(encoding="utf-8").splitlines()) for path in failures)
    rates = {name: len(lines) / median(values) for name, values in seconds.items()}
    emit(
        record(
            benchmark="corpus",
            export=args.export,
            lines=len(lines),
            beam_args=beam_args or "DirectRunner, --direct_num_workers=2, multi_processing (the default)",
            seconds=seconds,
            lines_per_s={name: round(rate, 1) for name, rate in rates.items()},
            throughput_ratio=round(rates["pipeline"] / rates["in_process"], 3),
            lines_out=len(rows),
            failed=failed,
            outputs_identical=[rows.get(n) for n in range(1, len(lines) + 1)] == expected,
        )
    )


COMMANDS = {
    "memory": (memory_arguments, memory, "peak RSS and time to the first step of a tiny training, per data source"),
    "make-tsv": (make_tsv_arguments, lambda args: make_tsv(args.path, args.lines), "a TSV of the Bible repeated"),
    "translate-memory": (translate_memory_arguments, translate_memory, "RSS of one long translate job on stdin"),
    "corpus": (corpus_arguments, corpus, "translate-corpus on DirectRunner beside one process on the same export"),
    "in-process": (in_process_arguments, in_process, "(corpus's child) an export's SavedModel on a file's lines"),
}
main = command_line(__doc__, COMMANDS)

if __name__ == "__main__":
    main()
