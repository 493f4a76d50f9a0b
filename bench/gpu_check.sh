#!/usr/bin/env bash
# GPU check: the base preset's training (Vaswani et al., 2017, Table 3) under MirroredStrategy on
# every visible GPU, mixed precision and XLA, synthetic fixed-shape batches: `training.py throughput`
# with the GPU settings (one JSON line: target tokens/s, step time, MFU against the measured
# float16 matmul rate of one GPU times the replicas). Bounded to 8 minutes. Knobs (env):
# WORKLOAD=base BATCH=256 (sequences per replica) LENGTH=64 STEPS=50 CEILING=8192 PYTHON=python3.
# On a CPU it runs too, for a dry run: WORKLOAD=tiny BATCH=8 LENGTH=16 STEPS=2 CEILING=256.
# It needs TensorFlow on the GPU machine. Where there is none (the H200 lent to this project: JAX and
# PyTorch only), `gpu_check_jax.py` trains the package itself on JAX: `prepare` its batches here,
# `run` them there (its docstring).
set -euo pipefail
cd "$(dirname "$0")/.."
exec timeout 480 "${PYTHON:-python3}" bench/training.py throughput --workload "${WORKLOAD:-base}" \
    --batch "${BATCH:-256}" --length "${LENGTH:-64}" --steps "${STEPS:-50}" --ceiling-size "${CEILING:-8192}" \
    --jit-compile --mixed-precision --strategy mirrored
