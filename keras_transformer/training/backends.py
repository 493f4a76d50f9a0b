"""What `train` does on each Keras backend (issue 38).

The model, the loss, the metrics, the schedules and `model.fit` on the `tf.data` pipeline are the
same on TensorFlow, JAX and PyTorch. So are the time budget, progress, checkpoints (Keras' format
on JAX and PyTorch: `keras_checkpoint`), the resume after SIGTERM, SIGINT or `kill -9`, validation,
early stopping on the validation loss, the moving average of the weights and `--init-from`.
What rests on TensorFlow alone is refused at the start, in one line: `tf.distribute`'s strategies
(several devices or hosts), the validation BLEU (it translates with the TensorFlow search), and on
PyTorch `--jit-compile` (`torch.compile`, never run here). JAX always compiles its step with XLA.
"""

from __future__ import annotations

BACKENDS = ("tensorflow", "jax", "torch")
ONE_DEVICE = ("auto", "one-device")  # the strategies that mean one device on any backend


def refusal(backend: str, training, strategy=None) -> str | None:
    """Why `train` cannot run `training` (a `TrainingConfig`) with `strategy` (a name, a
    `tf.distribute.Strategy` or None) on `backend`, in one line; None when it can."""
    if backend == "tensorflow":
        return None
    if backend not in BACKENDS:
        return f"unknown Keras backend {backend!r}; train on one of {', '.join(BACKENDS)}"
    name = strategy if strategy is None or isinstance(strategy, str) else type(strategy).__name__
    if name not in (None, *ONE_DEVICE):
        return f"--strategy {name} is TensorFlow's (tf.distribute): on {backend}, train on one device"
    from keras_transformer.training.distribute import tf_config_workers

    if tf_config_workers() > 1:
        return f"TF_CONFIG names several workers: multi-worker training is TensorFlow's, not {backend}'s"
    if training.bleu_every_epochs:
        return (
            f"--bleu-every-epochs translates with the TensorFlow search, which a {backend} model cannot run: "
            "drop it (--early-stopping then watches the validation loss), or train with --backend tensorflow"
        )
    if backend == "torch" and training.jit_compile:
        return "--jit-compile on torch (torch.compile) has never run here: drop it, or train with --backend jax"
    return None
