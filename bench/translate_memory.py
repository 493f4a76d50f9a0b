"""Memory of one long `keras-transformer translate` job: N lines (the embedded Bible's English
side, repeated) piped through the CLI's stdin; the process's resident memory (VmRSS) sampled
every 0.2 s: at its first output line, its peak, and at its last; the lines out (one per line
in, in order: a repeated verse, one translation). One JSON line.

    python bench/translate_memory.py --model-dir runs/demo --lines 100000
"""

from __future__ import annotations

import argparse
import gzip
import pathlib
import subprocess
import sys
import threading
import time

from common import emit, record

BIBLE = pathlib.Path(__file__).resolve().parent.parent / "keras_transformer" / "resources" / "bible.en-de.tsv.gz"


def rss_mb(pid: int) -> float | None:
    try:
        status = pathlib.Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return None
    kilobytes = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), None)
    return None if kilobytes is None else kilobytes / 1024  # None: the process has exited


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--lines", type=int, default=100_000)
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=64)
    args = p.parse_args(argv)
    with gzip.open(BIBLE, "rt", encoding="utf-8") as f:
        verses = [line.split("\t")[0] for line in f.read().splitlines()]  # the first column: English
    lines = [verses[i % len(verses)] for i in range(args.lines)]
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
    line = record(
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
    emit(line)


if __name__ == "__main__":
    main()
