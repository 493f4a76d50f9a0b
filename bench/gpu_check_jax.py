"""GPU check on JAX: `gpu_check.sh`'s measurement (`training.py throughput` with the GPU settings) on a
machine without TensorFlow.

The base preset (Vaswani et al., 2017, Table 3), vocab 32000, mixed_bfloat16, the training step
jit-compiled by Keras' JAX trainer (XLA), synthetic fixed-shape batches, Adam (§5.3) on Eq. 3 and
label-smoothed cross-entropy (§5.4). Prints target tokens/s, step time and MFU against this
device's measured bf16 matmul rate (`flops.matmul_rate`, the helper `training.py throughput` measures
with), then one JSON line with "backend", the jax and keras versions and the device.

The model is `kt.Transformer` itself (keras_transformer/model.py imports no TensorFlow; the
fixes that `model.fit` needs under `tf.distribute` are applied by TensorFlow training alone);
this script never imports TensorFlow. The loss has no pad mask (a synthetic batch holds no pad)
and no accuracy metric.
The policy is mixed_bfloat16 on every device; gpu_check.sh takes mixed_float16 (with loss
scaling) on GPUs, so compare the two scripts' figures with that in mind.

Knobs (env): PRESET=base BATCH=256 (sequences per device) LENGTH=64 STEPS=50 TIME_LIMIT_S=360
(then it dumps every thread's traceback and exits). On a CPU it runs too, for a dry run:

    PRESET=tiny BATCH=8 LENGTH=16 STEPS=3 python bench/gpu_check_jax.py
"""

import os

os.environ["KERAS_BACKEND"] = "jax"  # before keras is imported; keras_transformer would default to tensorflow

import faulthandler  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_transformer.config import TrainingConfig, TransformerConfig  # noqa: E402
from keras_transformer.model import Transformer  # noqa: E402
from keras_transformer.training.schedules import TransformerSchedule  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from flops import matmul_rate, model_flops_per_step  # noqa: E402  (bench/flops.py)

POLICY = "mixed_bfloat16"  # bfloat16 needs no loss scaling (Micikevicius et al., 2018)


def main():
    preset, batch = os.environ.get("PRESET", "base"), int(os.environ.get("BATCH", 256))
    length, steps = int(os.environ.get("LENGTH", 64)), int(os.environ.get("STEPS", 50))
    faulthandler.dump_traceback_later(float(os.environ.get("TIME_LIMIT_S", 360)), exit=True)
    devices = jax.devices()
    on_gpu = devices[0].platform != "cpu"  # "gpu" (CUDA plugin) or an accelerator alike
    print(f"devices: {len(devices)} x {devices[0].device_kind} ({devices[0].platform}{'' if on_gpu else ': dry run'})")
    peak = matmul_rate(8192 if on_gpu else 1024, "bfloat16")

    replicas = len(devices)
    if replicas > 1:  # gpu_check.sh's MirroredStrategy: the batch split over every device
        keras.distribution.set_distribution(keras.distribution.DataParallel())
    config = TransformerConfig.preset(
        preset, vocab_size=32000 if preset in ("base", "big") else 1000, max_length=max(length, 8)
    )
    training = TrainingConfig(mixed_precision=True, jit_compile=True, warmup_steps=4000)
    vocab, smoothing = config.vocab_size, training.label_smoothing

    def loss(target_out_ids, logits):
        """Cross-entropy against targets smoothed by epsilon_ls (§5.4); one-hot built on the device."""
        one_hot = keras.ops.one_hot(target_out_ids, vocab)  # [B, T, vocab]
        return keras.losses.categorical_crossentropy(one_hot, logits, from_logits=True, label_smoothing=smoothing)

    model = Transformer(config, dtype=POLICY)
    optimizer = keras.optimizers.Adam(
        TransformerSchedule(config.d_model, training.warmup_steps),
        beta_1=training.beta_1,
        beta_2=training.beta_2,
        epsilon=training.epsilon,
    )
    model.compile(optimizer=optimizer, loss=loss, jit_compile=True)
    model.build()
    optimizer.build(model.trainable_variables)

    global_batch = batch * replicas
    ids = np.random.default_rng(0).integers(3, vocab, size=(3, global_batch, length)).astype("int32")  # no pad

    def data():
        while True:
            yield (ids[0], ids[1]), ids[2]  # (source, target in), target out: [global_batch, length] each

    start = time.perf_counter()
    model.fit(data(), steps_per_epoch=3, epochs=1, verbose=0, shuffle=False)  # trace and XLA-compile
    compile_s = time.perf_counter() - start
    start = time.perf_counter()
    history = model.fit(data(), steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
    jax.block_until_ready([v.value for v in model.trainable_variables])
    elapsed = time.perf_counter() - start
    final_loss = history.history["loss"][-1]

    tokens = global_batch * length  # per side
    flops_per_step = model_flops_per_step(config, global_batch, length, length)
    step_s = elapsed / steps
    result = {
        "preset": preset,
        "replicas": replicas,
        "policy": POLICY,
        "jit_compile": True,
        "global_batch": f"{global_batch} x {length}",
        "target_tokens_per_s": round(tokens / step_s),
        "step_time_ms": round(1000 * step_s, 2),
        "compile_s": round(compile_s, 1),
        "model_tflops_per_s": round(flops_per_step / step_s / 1e12, 3),
        "measured_bf16_matmul_tflops_per_device": round(peak / 1e12, 3),
        "mfu": round(flops_per_step / step_s / (peak * replicas), 3),
        "final_loss": round(float(final_loss), 3),
        "backend": "jax",
        "jax": jax.__version__,
        "keras": keras.__version__,
        "device": devices[0].device_kind,
    }
    faulthandler.cancel_dump_traceback_later()
    print(
        f"target tokens/s: {result['target_tokens_per_s']}  step time: {result['step_time_ms']} ms  "
        f"MFU: {result['mfu']:.1%} (of {replicas} x {result['measured_bf16_matmul_tflops_per_device']} "
        "TFLOP/s bf16 matmul)"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
