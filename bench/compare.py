"""Ours against keras-hub's `TransformerEncoder`/`TransformerDecoder`, same shapes, same process,
interleaved A B A B.

Both models train through `model.fit` on the same fixed synthetic batch. After warm-up, each
round runs `--steps` steps of ours, then `--steps` of keras-hub; a load change on this shared
machine hits both alike, so the ratio of medians (and the median of per-round ratios) is robust
where absolute figures are not. Prints one JSON line:

    python bench/compare.py --workload medium --rounds 5 --steps 4 [--jit-compile]
"""

from __future__ import annotations

import argparse

from common import (
    WORKLOADS,
    emit,
    fit_steps,
    load_average,
    median,
    record,
    repeated,
    synthetic_batch,
)
from flops import matmul_rate, model_flops_per_step
from peers import build_keras_hub
from train_throughput import build_ours


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium")
    parser.add_argument("--rounds", type=int, default=5, help="A B rounds")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per model per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument(
        "--ceiling-size", type=int, default=2048, help="n of the n x n matmul that measures the ceiling"
    )
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile both training steps")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import keras_hub

    workload = WORKLOADS[args.workload]
    load_before = load_average()
    ceiling = matmul_rate(args.ceiling_size) / 1e9
    dataset = repeated(synthetic_batch(workload))
    models = {
        "ours": build_ours(workload, args.jit_compile),
        "keras_hub": build_keras_hub(workload.config, args.jit_compile),
    }
    for model in models.values():
        fit_steps(model, dataset, args.warmup)
    times = {name: [] for name in models}
    round_ratios = []
    for _ in range(args.rounds):
        for name, model in models.items():
            times[name].append(median(fit_steps(model, dataset, args.steps)))
        round_ratios.append(times["keras_hub"][-1] / times["ours"][-1])
    ceiling = max(ceiling, matmul_rate(args.ceiling_size) / 1e9)
    flops = model_flops_per_step(workload.config, workload.batch, workload.source_length, workload.target_length)
    tokens = workload.batch * workload.target_length
    systems = {}
    for name, model in models.items():
        step_s = median(times[name])
        systems[name] = {
            "step_s_median": round(step_s, 4),
            "step_s_per_round": [round(t, 4) for t in times[name]],
            "tgt_tokens_per_s": round(tokens / step_s, 1),
            "mfu": round(flops / step_s / 1e9 / ceiling, 4),
            "params": model.count_params(),
        }
    emit(
        record(
            benchmark="compare_train",
            workload=args.workload,
            batch=[workload.batch, workload.source_length, workload.target_length],
            jit_compile=args.jit_compile,
            rounds=args.rounds,
            steps_per_round=args.steps,
            speedup_ours_over_keras_hub=round(
                systems["keras_hub"]["step_s_median"] / systems["ours"]["step_s_median"], 3
            ),
            speedup_median_of_rounds=round(median(round_ratios), 3),
            systems=systems,
            model_flops_per_step=flops,
            matmul_ceiling_gflops=round(ceiling, 2),
            matmul_ceiling_size=args.ceiling_size,
            keras_hub_version=keras_hub.__version__,
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
