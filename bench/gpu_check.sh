#!/usr/bin/env bash
# GPU check: the base preset (Vaswani et al., 2017, Table 3) under MirroredStrategy on
# every visible GPU, mixed precision and XLA, on synthetic fixed-shape batches. Prints target
# tokens/s, step time and MFU against this GPU's measured bf16 matmul rate, then one JSON line.
# Bounded to 8 minutes. Knobs (env): PRESET=base BATCH=256 (sequences per replica) LENGTH=64
# STEPS=50 PYTHON=python3. On a CPU it runs too (PRESET=tiny), for a dry run of the script.
set -euo pipefail
cd "$(dirname "$0")/.."
export KERAS_BACKEND=tensorflow TF_CPP_MIN_LOG_LEVEL=${TF_CPP_MIN_LOG_LEVEL:-2}
exec timeout 480 "${PYTHON:-python3}" - <<'PY'
import json, os, sys, time

import keras
import numpy as np
import tensorflow as tf

from keras_transformer.config import TrainingConfig, TransformerConfig
from keras_transformer.training.distribute import mixed_precision_policy, resolve_strategy
from keras_transformer.model import Transformer
from keras_transformer.training.trainer import compile_model

sys.path.insert(0, "bench")
from flops import model_flops_per_step  # the benchmarks' FLOP count

preset, batch, length, steps = os.environ.get("PRESET", "base"), int(os.environ.get("BATCH", 256)), int(os.environ.get("LENGTH", 64)), int(os.environ.get("STEPS", 50))
gpus = tf.config.list_logical_devices("GPU")
device = gpus[0].name if gpus else "/cpu:0"
print(f"devices: {len(gpus)} GPU(s) {tf.config.experimental.get_device_details(tf.config.list_physical_devices('GPU')[0]) if gpus else '(none: CPU dry run)'}")


def matmul_rate(n=8192 if gpus else 1024, repeats=20):
    """Measured bf16 matmul FLOP/s of one device: the MFU denominator."""
    with tf.device(device):
        a = tf.random.normal([n, n], dtype=tf.bfloat16)
        b = tf.random.normal([n, n], dtype=tf.bfloat16)
        out = tf.linalg.matmul(a, b)  # eager: every product is computed in full (no XLA folding)
        float(out[0, 0])
        start = time.perf_counter()
        for _ in range(repeats):
            out = tf.linalg.matmul(a, b)
        float(out[0, 0])  # waits for the device
        return 2 * n**3 * repeats / (time.perf_counter() - start)


peak = matmul_rate()
strategy = resolve_strategy("mirrored")
replicas = strategy.num_replicas_in_sync
config = TransformerConfig.preset(preset, vocab_size=32000 if preset in ("base", "big") else 1000, max_length=max(length, 8))
training = TrainingConfig(mixed_precision=True, jit_compile=True, warmup_steps=4000)
policy = mixed_precision_policy(strategy)
with strategy.scope():
    model = compile_model(Transformer(config, dtype=policy), training)
    model.build()
    model.optimizer.build(model.trainable_variables)

global_batch = batch * replicas
rng = np.random.default_rng(0)
ids = rng.integers(3, config.vocab_size, size=(3, global_batch, length)).astype("int32")
data = tf.data.Dataset.from_tensors(((ids[0], ids[1]), ids[2])).repeat().prefetch(2)

start = time.perf_counter()
model.fit(data, steps_per_epoch=3, epochs=1, verbose=0, shuffle=False)  # trace and XLA-compile
compile_s = time.perf_counter() - start
start = time.perf_counter()
history = model.fit(data, steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
elapsed = time.perf_counter() - start
loss = history.history["loss"][-1]

tokens = global_batch * length  # per side
flops_per_step = model_flops_per_step(config, global_batch, length, length)
step_s = elapsed / steps
result = {
    "preset": preset, "replicas": replicas, "policy": policy, "jit_compile": True,
    "global_batch": f"{global_batch} x {length}", "target_tokens_per_s": round(tokens / step_s),
    "step_time_ms": round(1000 * step_s, 2), "compile_s": round(compile_s, 1),
    "model_tflops_per_s": round(flops_per_step / step_s / 1e12, 3),
    "measured_bf16_matmul_tflops_per_device": round(peak / 1e12, 3),
    "mfu": round(flops_per_step / step_s / (peak * replicas), 3), "final_loss": round(float(loss), 3),
}
print(f"target tokens/s: {result['target_tokens_per_s']}  step time: {result['step_time_ms']} ms  MFU: {result['mfu']:.1%} "
      f"(of {replicas} x {result['measured_bf16_matmul_tflops_per_device']} TFLOP/s bf16 matmul)")
print(json.dumps(result))
PY
