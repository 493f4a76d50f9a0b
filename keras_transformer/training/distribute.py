"""Where training runs: one device, several GPUs, several hosts or a TPU, with `tf.distribute`.

The paper trained on 8 GPUs with synchronous data parallelism (Vaswani et al., 2017, §5.2);
`tf.distribute` gives the same on any of these with one code path. Every strategy splits the
global batch across its replicas, and the loss (`losses.py`) divides each replica's token-loss
sum by the *global* non-pad token count, so updates do not depend on the number of replicas.
What Keras 3.15 itself needs to train under every strategy is in `keras_compat.py`.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

from keras_transformer.config import STRATEGIES
from keras_transformer.training.keras_compat import is_multi_worker


def use_cpu_devices(count: int) -> None:
    """Split the CPU into `count` logical devices, so that `mirrored` can be tried without GPUs.
    Must run before TensorFlow touches a device."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * count)


def tf_config_workers() -> int:
    """The number of workers the `TF_CONFIG` environment variable names (0 when unset)."""
    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    return len(config.get("cluster", {}).get("worker", []))


def resolve_strategy(name: str = "auto", collective_timeout_s: float | None = None) -> tf.distribute.Strategy:
    """The strategy called `name` (one of `STRATEGIES`).

    auto: `MultiWorkerMirroredStrategy` when `TF_CONFIG` names several workers,
    `MirroredStrategy` when more than one GPU is visible, else TensorFlow's default strategy.
    mirrored: all GPUs, or all (logical) CPU devices when there is no GPU. `collective_timeout_s`
    bounds every multi-worker collective, so a dead peer ends the run instead of hanging it.
    """
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; choose one of {', '.join(STRATEGIES)}")
    # Physical, not logical: listing logical devices starts the runtime, after which collectives
    # can no longer be configured ("Collective ops must be configured at program startup").
    gpus = tf.config.list_physical_devices("GPU")
    if name == "auto":
        if tf_config_workers() > 1:
            name = "multi-worker"
        elif len(gpus) > 1:
            name = "mirrored"
        else:
            return tf.distribute.get_strategy()
    if name == "one-device":
        return tf.distribute.OneDeviceStrategy("/gpu:0" if gpus else "/cpu:0")
    if name == "mirrored":
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([d.name for d in devices])
    if name == "multi-worker":
        if tf_config_workers() < 1:
            raise ValueError("--strategy multi-worker needs TF_CONFIG naming the cluster's workers")
        options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=collective_timeout_s)
        return tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver()  # tpu: Colab / Cloud TPU VM
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)


def worker_id(strategy: tf.distribute.Strategy) -> int:
    """This worker's task id (0 is the chief); 0 outside multi-worker training."""
    return strategy.cluster_resolver.task_id if is_multi_worker(strategy) else 0


def mixed_precision_policy(strategy: tf.distribute.Strategy) -> str:
    """mixed_float16 (with loss scaling, added by `Model.compile`) on GPUs; mixed_bfloat16 on
    CPUs and TPUs, whose bfloat16 needs no loss scaling (Micikevicius et al., 2018)."""
    if isinstance(strategy, tf.distribute.TPUStrategy) or not tf.config.list_logical_devices("GPU"):
        return "mixed_bfloat16"
    return "mixed_float16"


def check_jit_compile(strategy: tf.distribute.Strategy) -> None:
    """Refuse XLA where TF 2.21 cannot run it: several replicas on (logical) CPU devices."""
    if strategy.num_replicas_in_sync > 1 and all("CPU" in d.upper() for d in strategy.extended.worker_devices):
        raise ValueError(
            "--jit-compile does not work with several replicas on CPU devices: XLA cannot read a "
            'variable placed on another CPU device ("Trying to access resource ... located in device '
            'CPU:1 from device CPU:0"); use one device, or GPUs'
        )
