"""Training throughput of full steps through the real `model.fit` path.

The model is compiled by `keras_transformer.training.trainer.compile_model` (Adam on the Eq. 3
schedule, label-smoothed cross-entropy, masked accuracy) and fed one fixed synthetic batch
repeated, so the figure is the training step alone. After `--warmup` steps (tracing, XLA
compilation) it times `--steps` steps and prints one JSON line:

    python bench/train_throughput.py --workload medium --steps 20 [--jit-compile] [--mixed-precision]

`mfu` is model FLOPs per second (`model_flops_per_step`, formula in the line) over the fp32
matmul ceiling measured in this process, before and after the timed steps (the larger).
"""

from __future__ import annotations

import argparse

from common import (
    WORKLOADS,
    emit,
    fit_steps,
    load_average,
    matmul_ceiling_gflops,
    median,
    record,
    repeated,
    synthetic_batch,
)
from flops import FLOPS_FORMULA, model_flops_per_step


def build_ours(workload, jit_compile: bool):
    """Our Transformer, compiled exactly as `keras-transformer train` compiles it."""
    from keras_transformer import TrainingConfig, Transformer
    from keras_transformer.training.trainer import compile_model

    model = compile_model(Transformer(workload.config), TrainingConfig())
    model.jit_compile = jit_compile
    return model


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (tracing, compilation)")
    parser.add_argument(
        "--ceiling-size", type=int, default=2048, help="n of the n x n matmul that measures the ceiling"
    )
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile the training step")
    parser.add_argument(
        "--mixed-precision", action="store_true", help="the mixed_bfloat16 policy (no AMX here: slower)"
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import keras

    if args.mixed_precision:
        keras.mixed_precision.set_global_policy("mixed_bfloat16")
    workload = WORKLOADS[args.workload]
    load_before = load_average()
    ceiling = matmul_ceiling_gflops(args.ceiling_size)
    model = build_ours(workload, args.jit_compile)
    dataset = repeated(synthetic_batch(workload))
    fit_steps(model, dataset, args.warmup)
    times = fit_steps(model, dataset, args.steps)
    ceiling = max(ceiling, matmul_ceiling_gflops(args.ceiling_size))
    step_s = median(times)
    flops = model_flops_per_step(workload.config, workload.batch, workload.source_length, workload.target_length)
    achieved = flops / step_s / 1e9
    emit(
        record(
            benchmark="train_throughput",
            workload=args.workload,
            model="keras_transformer",
            batch=[workload.batch, workload.source_length, workload.target_length],
            jit_compile=args.jit_compile,
            mixed_precision=args.mixed_precision,
            steps=args.steps,
            warmup=args.warmup,
            tgt_tokens_per_s=round(workload.batch * workload.target_length / step_s, 1),
            step_s_median=round(step_s, 4),
            step_s_min=round(min(times), 4),
            step_s_max=round(max(times), 4),
            model_flops_per_step=flops,
            flops_formula=FLOPS_FORMULA,
            achieved_gflops=round(achieved, 2),
            matmul_ceiling_gflops=round(ceiling, 2),
            matmul_ceiling_size=args.ceiling_size,
            mfu=round(achieved / ceiling, 4),
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
