"""Throughput of one `Translator` called from 8 threads vs from 1, as a web service's thread pool
calls it: requests of 1-3 held-out Bible verses each, the same requests in both runs (after a
warm-up that traces the search); one JSON line.

    python bench/threads.py --model-dir runs/demo --requests 200
"""

from __future__ import annotations

import argparse
import concurrent.futures
import time

from common import emit, held_out_pairs, record

from keras_transformer.inference.translator import Translator


def requests_of(sources: list[str], count: int) -> list[list[str]]:
    """`count` requests of 1-3 consecutive verses (mixed lengths), cycling through `sources`."""
    requests, start = [], 0
    for index in range(count):
        size = 1 + index % 3
        requests.append([sources[(start + k) % len(sources)] for k in range(size)])
        start += size
    return requests


def timed(translator: Translator, requests: list[list[str]], threads: int) -> tuple[float, list[list[str]]]:
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        outputs = list(pool.map(translator.translate, requests))
    return time.perf_counter() - start, outputs


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--beam-size", type=int, default=4)
    args = p.parse_args(argv)
    translator = Translator.from_model_dir(args.model_dir, beam_size=args.beam_size)
    sources = held_out_pairs(args.model_dir, 500).sources
    requests = requests_of(sources, args.requests)
    translator.translate(requests[0])  # tracing
    one_s, one = timed(translator, requests, 1)
    many_s, many = timed(translator, requests, args.threads)
    sentences = sum(len(request) for request in requests)
    line = record(
        benchmark="threads",
        model_dir=args.model_dir,
        requests=len(requests),
        sentences=sentences,
        beam_size=args.beam_size,
        threads=args.threads,
        sentences_per_s_1_thread=round(sentences / one_s, 2),
        sentences_per_s_n_threads=round(sentences / many_s, 2),
        speedup=round(one_s / many_s, 3),
        identical_outputs=one == many,
    )
    emit(line)


if __name__ == "__main__":
    main()
