"""Decoding throughput and batch-1 latency at base dimensions with random weights (issue 6).

The work is fixed: `--sentences` x `--source-length` random source tokens, exactly `--generate`
target tokens per hypothesis (EOS is never chosen; see `forbid_eos`). Prints one JSON line with
target tokens/s for the batch and the latency of one sentence:

    python bench/decode_throughput.py --search greedy

`--search beam` (beam 4, alpha 0.6) runs once `keras_transformer.beam_search` exists (the beam
search issue). Other execution paths (SavedModel, XLA, TFLite) plug in as entries of `RUNNERS`.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import FIRST_TOKEN, WORKLOADS, emit, load_average, median, record


def forbid_eos(model) -> None:
    """Pin the EOS logit to -d_model so that no search ever ends a hypothesis early.

    The last decoder LayerNorm's normalised output n has zero mean, so with its beta set to 1 and
    the EOS embedding row to -1 the logit is (n + 1) . (-1) = -d_model, far below every other
    (random) logit. The weights change, not the code: every execution path sees the same model.
    """
    norm = model.decoder.blocks[-1].feed_forward_residual.layer_norm
    norm.beta.assign(np.ones(norm.beta.shape, "float32"))
    table = model.embedding.embeddings.numpy()
    table[model.config.eos_id] = -1.0
    model.embedding.embeddings.assign(table)


def python_runner(model, search: str, generate: int, beam_size: int, alpha: float):
    """The package's own `tf.function` search, called from Python."""
    import keras_transformer

    if search == "greedy":
        return lambda ids: keras_transformer.greedy_search(model, ids, a=0.0, b=generate).ids
    if not hasattr(keras_transformer, "beam_search"):
        raise SystemExit("keras_transformer.beam_search does not exist yet (beam search issue); use --search greedy")
    return lambda ids: keras_transformer.beam_search(model, ids, beam_size=beam_size, alpha=alpha, max_decode_length=generate).ids


RUNNERS = {"python": python_runner}


def time_calls(run, ids, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(run(ids))  # materialise the result: the search has finished
        times.append(time.perf_counter() - start)
    return times


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="base", help="model sizes")
    parser.add_argument("--search", choices=["greedy", "beam"], default="greedy")
    parser.add_argument("--runner", choices=sorted(RUNNERS), default="python")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty (Wu et al., 2016)")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--generate", type=int, default=64, help="target tokens per hypothesis, forced")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls (after one untimed call)")
    return parser.parse_args(argv)


def main(argv=None):
    from keras_transformer import Transformer

    args = parse_args(argv)
    config = WORKLOADS[args.workload].config
    load_before = load_average()
    model = Transformer(config)
    model.build()
    forbid_eos(model)
    run = RUNNERS[args.runner](model, args.search, args.generate, args.beam_size, args.alpha)
    rng = np.random.default_rng(0)
    batch = rng.integers(FIRST_TOKEN, config.vocab_size, size=(args.sentences, args.source_length), dtype=np.int32)
    ids = np.asarray(run(batch))  # [B, beam, L]; traces the search
    generated = (ids != config.pad_id).sum(axis=-1)
    if not (generated == args.generate).all() or (ids == config.eos_id).any():
        raise SystemExit(f"the work is not fixed: generated lengths {sorted(set(generated.ravel()))}, want {args.generate}")
    batch_s = median(time_calls(run, batch, args.repeats))
    one = batch[:1]
    run(one)  # batch 1 is a new shape for the caller, not for the tf.function; warm it anyway
    latency_s = median(time_calls(run, one, args.repeats))
    emit(
        record(
            benchmark="decode_throughput",
            workload=args.workload,
            search=args.search,
            runner=args.runner,
            beam_size=args.beam_size if args.search == "beam" else 1,
            alpha=args.alpha if args.search == "beam" else None,
            sentences=args.sentences,
            source_length=args.source_length,
            generated_tokens=args.generate,
            batch_s_median=round(batch_s, 4),
            tgt_tokens_per_s=round(args.sentences * args.generate / batch_s, 1),
            batch1_latency_s=round(latency_s, 4),
            repeats=args.repeats,
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
