"""Training throughput of full steps through the real `model.fit` path, on this machine's CPU or
on every visible GPU.

The model is compiled by `keras_transformer.training.optimization.compile_model` (Adam on the Eq. 3
schedule, label-smoothed cross-entropy, masked accuracy) and fed one fixed synthetic batch
repeated, so the figure is the training step alone. After `--warmup` steps (tracing, XLA
compilation; their seconds are `warmup_s`) it times `--steps` steps and prints one JSON line:

    python bench/train_throughput.py --workload medium --steps 20 [--jit-compile] [--mixed-precision]
    python bench/train_throughput.py --workload base --batch 256 --length 64 --steps 50 --jit-compile \\
        --mixed-precision --strategy mirrored --ceiling-size 8192     # a GPU machine (gpu_check.sh)

`--strategy mirrored` trains under `MirroredStrategy` on every visible GPU (`--batch` sequences per
replica); `--mixed-precision` takes the package's policy for the devices (`mixed_float16` with loss
scaling on GPUs, `mixed_bfloat16` on CPUs: no AMX here, slower). `mfu` is model FLOPs per second
(`model_flops_per_step`, formula in the line) over the matmul rate of one device in the compute
dtype (`flops.matmul_rate`, measured in this process before and after the timed steps, the larger)
times the replicas.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

from common import WORKLOADS, emit, fit_steps, load_average, median, record, repeated, synthetic_batch
from flops import FLOPS_FORMULA, matmul_rate, model_flops_per_step


def build_ours(workload, jit_compile: bool, mixed_precision: bool = False, strategy=None):
    """Our Transformer, compiled exactly as `keras-transformer train` does it (`training.trainer._build`:
    under `strategy`'s scope, in its mixed-precision policy; `compile_model` builds the model and
    its optimizer before the first step)."""
    import tensorflow as tf

    from keras_transformer import TrainingConfig, Transformer
    from keras_transformer.training.distribute import mixed_precision_policy
    from keras_transformer.training.optimization import compile_model

    strategy = strategy or tf.distribute.get_strategy()
    training = TrainingConfig(mixed_precision=mixed_precision, jit_compile=jit_compile)
    with strategy.scope():
        dtype = mixed_precision_policy(strategy) if mixed_precision else None
        model = compile_model(Transformer(workload.config, dtype=dtype), training)
        model.jit_compile = jit_compile
    return model


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium")
    parser.add_argument("--batch", type=int, help="sequences per replica (default: the workload's)")
    parser.add_argument("--length", type=int, help="tokens per side (default: the workload's)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (tracing, compilation)")
    parser.add_argument(
        "--ceiling-size", type=int, default=2048, help="n of the n x n matmul that measures the ceiling"
    )
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile the training step")
    parser.add_argument("--mixed-precision", action="store_true", help="mixed_float16 on GPUs, mixed_bfloat16 on CPUs")
    parser.add_argument(
        "--strategy", choices=["default", "mirrored"], default="default", help="mirrored: every visible GPU"
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    import tensorflow as tf

    from keras_transformer.training.distribute import mixed_precision_policy, resolve_strategy

    strategy = resolve_strategy("mirrored") if args.strategy == "mirrored" else tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    workload = WORKLOADS[args.workload]
    workload = dataclasses.replace(workload, batch=(args.batch or workload.batch) * replicas)  # the global batch
    if args.length:
        config = dataclasses.replace(workload.config, max_length=max(workload.config.max_length, args.length))
        workload = dataclasses.replace(workload, config=config, source_length=args.length, target_length=args.length)
    policy = mixed_precision_policy(strategy) if args.mixed_precision else "float32"
    dtype = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}.get(policy, "float32")
    gpus = tf.config.list_logical_devices("GPU")
    load_before = load_average()
    ceiling = matmul_rate(args.ceiling_size, dtype)
    model = build_ours(workload, args.jit_compile, args.mixed_precision, strategy)
    dataset = repeated(synthetic_batch(workload))
    start = time.perf_counter()
    fit_steps(model, dataset, args.warmup)
    warmup_s = time.perf_counter() - start
    times = fit_steps(model, dataset, args.steps)
    ceiling = max(ceiling, matmul_rate(args.ceiling_size, dtype))
    step_s = median(times)
    flops = model_flops_per_step(workload.config, workload.batch, workload.source_length, workload.target_length)
    achieved = flops / step_s / 1e9
    emit(
        record(
            benchmark="train_throughput",
            workload=args.workload,
            model="keras_transformer",
            batch=[workload.batch, workload.source_length, workload.target_length],
            devices=[device.name for device in gpus] or ["CPU"],
            replicas=replicas,
            policy=policy,
            jit_compile=args.jit_compile,
            mixed_precision=args.mixed_precision,
            steps=args.steps,
            warmup=args.warmup,
            warmup_s=round(warmup_s, 1),
            tgt_tokens_per_s=round(workload.batch * workload.target_length / step_s, 1),
            step_s_median=round(step_s, 4),
            step_s_min=round(min(times), 4),
            step_s_max=round(max(times), 4),
            model_flops_per_step=flops,
            flops_formula=FLOPS_FORMULA,
            achieved_gflops=round(achieved, 2),
            matmul_ceiling_gflops=round(ceiling / 1e9, 2),
            matmul_ceiling_dtype=dtype,
            matmul_ceiling_size=args.ceiling_size,
            mfu=round(achieved / (ceiling / 1e9 * replicas), 4),
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
