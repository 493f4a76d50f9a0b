"""Checkpoint averaging (Vaswani et al., 2017, §6.1): "For the base models, we used a single
model obtained by averaging the last 5 checkpoints, which were written at 10-minute
intervals. For the big models, we averaged the last 20 checkpoints."
"""

from __future__ import annotations

import numpy as np

from keras_transformer.model_dir.checkpoints import (
    checkpoint_paths,
    checkpoint_step,
    restore,
    save_weights,
    weights_checkpoint,
)
from keras_transformer.model_dir.directory import ModelDir
from keras_transformer.model_dir.errors import ModelDirError


def average_checkpoints(model, paths: list[str]) -> None:
    """Set `model`'s weights to the element-wise mean of its weights in the checkpoints `paths`."""
    if not paths:
        raise ValueError("no checkpoints to average")
    checkpoint = weights_checkpoint(model)
    total = None
    for path in paths:
        restore(checkpoint, path, weights_only=True)
        values = [np.asarray(weight.numpy(), np.float64) for weight in model.weights]
        total = values if total is None else [t + v for t, v in zip(total, values)]
    for weight, value in zip(model.weights, total):
        weight.assign((value / len(paths)).astype(weight.dtype))


def average_last(path: str, last: int = 5, checkpoint: str = "latest") -> str:
    """Average the last `last` training checkpoints (`checkpoint` "latest"), or moving averages
    of the weights (`checkpoint` "ema": ema/ keeps `keep_checkpoints` of them), of the model dir
    `path` into its averaged/ checkpoint (numbered by the newest step); return the written path."""
    from keras_transformer.model import Transformer

    if last < 1:
        raise ValueError(f"--last must be >= 1, got {last}")
    model_dir = ModelDir(path)
    config = model_dir.read()["model"]
    if checkpoint not in ("latest", "ema"):
        raise ValueError(f"average reads the latest or the ema checkpoints, not {checkpoint!r}")
    directory = model_dir.checkpoint_dir if checkpoint == "latest" else model_dir.weights_dir("ema")
    paths = list(reversed(checkpoint_paths(directory)))  # oldest first
    if len(paths) < last:
        kind = "ema " if checkpoint == "ema" else ""
        raise ModelDirError(f"{path} holds {len(paths)} {kind}checkpoint(s), fewer than the {last} to average")
    paths = paths[-last:]
    model = Transformer(config)
    model.build()
    average_checkpoints(model, paths)
    return save_weights(model, model_dir.weights_dir("averaged"), checkpoint_step(paths[-1]))
