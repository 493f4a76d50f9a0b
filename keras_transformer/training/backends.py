"""What `train` does on each Keras backend (issue 38).

The model, the loss, the metrics, the schedules and `model.fit` on the `tf.data` pipeline are the
same on TensorFlow, JAX and PyTorch. So are the time budget, progress, checkpoints (Keras' format
on JAX and PyTorch: `keras_checkpoint`), the resume after SIGTERM, SIGINT or `kill -9`, validation,
the validation BLEU (translated by a TensorFlow process: `tensorflow_translator`), early stopping,
the moving average of the weights and `--init-from`. On JAX, several devices train through Keras' own
distribution API (`keras.distribution.DataParallel`: `keras_devices`), the synchronous data
parallelism of the paper's 8 GPUs (§5.2); PyTorch trains on one device.
What rests on TensorFlow alone is refused at the start, in one line: `tf.distribute`'s other
strategies (several hosts, TPUStrategy), `TF_CONFIG`, and on PyTorch `--jit-compile`
(`torch.compile`, never run here). JAX always compiles its step with XLA.
"""

from __future__ import annotations

import contextlib

BACKENDS = ("tensorflow", "jax", "torch")
ONE_DEVICE = ("auto", "one-device")  # the strategies that mean one device on any backend
JAX_STRATEGIES = (*ONE_DEVICE, "mirrored")  # auto and mirrored: every device JAX sees (`keras_devices`)


def refusal(backend: str, training, strategy=None) -> str | None:
    """Why `train` cannot run `training` (a `TrainingConfig`) with `strategy` (a name, a
    `tf.distribute.Strategy` or None) on `backend`, in one line; None when it can."""
    if backend == "tensorflow":
        return None
    if backend not in BACKENDS:
        return f"unknown Keras backend {backend!r}; train on one of {', '.join(BACKENDS)}"
    name = strategy if strategy is None or isinstance(strategy, str) else type(strategy).__name__
    if backend == "jax" and name not in (None, *JAX_STRATEGIES):
        return (
            f"--strategy {name} is TensorFlow's (tf.distribute): on jax, auto and mirrored train on every device "
            "JAX sees (keras.distribution.DataParallel), one-device on one"
        )
    if backend != "jax" and name not in (None, *ONE_DEVICE):
        return f"--strategy {name} is TensorFlow's (tf.distribute): on {backend}, train on one device"
    from keras_transformer.training.distribute import tf_config_workers

    if tf_config_workers() > 1:
        return f"TF_CONFIG names several workers: multi-worker training is TensorFlow's, not {backend}'s"
    if backend == "torch" and training.jit_compile:
        return "--jit-compile on torch (torch.compile) has never run here: drop it, or train with --backend jax"
    return None


class KerasDevices:
    """Where a JAX or PyTorch run trains, in the role a `tf.distribute.Strategy` has on TensorFlow:
    `scope()`, under which the run makes its variables (replicated on every device) and `fit` splits
    each batch's rows across the devices, and `num_replicas_in_sync`, the devices (a batch's rows are
    a multiple of it). `distribution`: Keras' `DataParallel`, or None for one device."""

    def __init__(self, distribution=None):
        self.distribution = distribution
        self.num_replicas_in_sync = int(distribution.device_mesh.devices.size) if distribution else 1

    def scope(self):
        return self.distribution.scope() if self.distribution else contextlib.nullcontext()

    def __str__(self) -> str:
        if self.distribution is None:
            return "one device"
        return f"{self.num_replicas_in_sync} devices with keras.distribution.DataParallel"


def keras_devices(backend: str, strategy: str | None = None) -> KerasDevices:
    """The devices a run on `backend` trains on, by `strategy` name (one that `refusal` accepts): on
    JAX with mirrored, or with auto (None) when JAX sees several devices, all of them through Keras'
    `DataParallel`; else one device. (On CPUs, XLA_FLAGS=--xla_force_host_platform_device_count=N
    makes N devices.)"""
    if backend != "jax" or strategy == "one-device":
        return KerasDevices()
    import keras

    devices = keras.distribution.list_devices()  # the accelerators, else the CPU devices
    if strategy == "mirrored" or len(devices) > 1:
        return KerasDevices(keras.distribution.DataParallel(devices=devices))
    return KerasDevices()
