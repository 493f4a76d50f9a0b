"""Decoding runners against each other (default: ours vs keras-hub's beam sampler), same process,
interleaved A B A B.

The work and the runners are `decode_throughput.py`'s (read its docstring for what differs
between runners). After every runner's warm-up, each round times `--repeats` calls of the batch
and of batch 1 for every runner in turn; a load change on this shared machine hits all alike,
so the ratios (of medians, and the median of per-round ratios) are robust where absolute
figures are not. Prints one JSON line:

    python bench/decode_compare.py --search beam --runners python keras_hub --rounds 3
"""

from __future__ import annotations

import argparse

from common import emit, load_average, median, record
from decode_throughput import RUNNERS, add_work_arguments, build_model, measure, prepare, runner_fields, source_batch


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_work_arguments(parser)
    parser.add_argument(
        "--runners",
        nargs="+",
        choices=sorted(RUNNERS),
        default=["python", "keras_hub"],
        help="the first is the reference",
    )
    parser.add_argument("--rounds", type=int, default=3, help="A B rounds")
    parser.set_defaults(repeats=1)  # timed calls per runner per round
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    load_before = load_average()
    model = build_model(args.workload)
    batch = source_batch(model.config, args.sentences, args.source_length)
    runs = {name: prepare(name, model, batch, args) for name in args.runners}  # name: (run, generated)
    times = {name: [] for name in runs}  # name: [(batch_s, latency_s) per round]
    for _ in range(args.rounds):
        for name, (run, _) in runs.items():
            times[name].append(measure(run, batch, args.repeats))
    reference = args.runners[0]
    systems = {}
    for name, (_, generated) in runs.items():
        batch_s, latency_s = (median(t[i] for t in times[name]) for i in (0, 1))
        systems[name] = {
            **runner_fields(name, args, generated, batch_s, latency_s),
            "batch_s_per_round": [round(t[0], 4) for t in times[name]],
            "batch1_latency_s_per_round": [round(t[1], 4) for t in times[name]],
        }
    others = [name for name in runs if name != reference]

    def ratios(i):  # how many times faster the reference is: other's seconds / reference's seconds
        return {
            name: {
                "of_medians": round(median(t[i] for t in times[name]) / median(t[i] for t in times[reference]), 3),
                "median_of_rounds": round(median(o[i] / r[i] for o, r in zip(times[name], times[reference])), 3),
            }
            for name in others
        }

    emit(
        record(
            benchmark="decode_compare",
            workload=args.workload,
            search=args.search,
            sentences=args.sentences,
            source_length=args.source_length,
            rounds=args.rounds,
            repeats_per_round=args.repeats,
            reference=reference,
            speedup_of_reference_batch=ratios(0),
            speedup_of_reference_batch1_latency=ratios(1),
            systems=systems,
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
