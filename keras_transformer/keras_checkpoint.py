"""Checkpoints in Keras' own weights format, which every Keras backend reads: what a run on JAX or
PyTorch writes into a model dir (a run on TensorFlow writes `tf.train.Checkpoint`s, which only
TensorFlow reads), so that the TensorFlow tools translate, evaluate, average and export it unchanged.

A checkpoint is named by its prefix, as TensorFlow's are (`checkpoints/ckpt-1200`); a Keras one is
the one file `ckpt-1200.weights.h5` (`model.save_weights`): the model's weights and, in a training
checkpoint, every variable of its optimizer (the step count, Adam's moments, the moving average of
`--ema-decay`, and the step budget of a `StepBudgetSchedule`, which `compile_model` hands the
optimizer on these backends). The directory's state file is TensorFlow's (`model_dir.checkpoints`),
so both kinds are listed, pruned and recovered alike.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
from typing import Any

from keras_transformer.messages import first_line

KERAS_SUFFIX = ".weights.h5"
OPTIMIZER_GROUP = "optimizer/vars"  # where `save_weights` puts the optimizer's variables, "0", "1", ...


def is_keras_checkpoint(prefix: str) -> bool:
    """Whether the checkpoint `prefix` is a Keras one (`prefix.weights.h5`)."""
    return os.path.isfile(prefix + KERAS_SUFFIX)


@dataclasses.dataclass
class KerasCheckpoint:
    """`model`'s weights, and with `optimizer` (the model's own) its state: the counterpart of
    `tf.train.Checkpoint(model=..., optimizer=...)` in Keras' format. Errors are one-line
    `ValueError`s (`OSError`s for a write)."""

    model: Any
    optimizer: Any = None

    def _skipped(self) -> list:
        """What a weights-only file leaves out: the model's optimizer, if it has one."""
        optimizer = getattr(self.model, "optimizer", None)
        return [optimizer] if self.optimizer is None and optimizer is not None else []

    def _layer_names(self) -> list[str]:
        """The model's own layers, by the attribute names that name their groups in the file, found
        as Keras' saving finds them (on PyTorch a model's layers are torch modules, not in its `vars`)."""
        import keras
        from keras.src.saving import saving_lib

        return [name for name, value in saving_lib._walk_saveable(self.model) if isinstance(value, keras.layers.Layer)]

    def write(self, prefix: str) -> str:
        """Write `prefix.weights.h5` whole or not at all (a temporary file renamed into place)."""
        from keras.src.saving import saving_lib

        path, temporary = prefix + KERAS_SUFFIX, prefix + "_temp" + KERAS_SUFFIX
        try:
            saving_lib.save_weights_only(self.model, temporary, objects_to_skip=self._skipped() or None)
            os.replace(temporary, path)
        except (OSError, RuntimeError, ValueError) as error:  # h5py's write errors: OSError or RuntimeError
            with contextlib.suppress(FileNotFoundError):
                os.remove(temporary)
            raise error if isinstance(error, OSError) else OSError(str(error)) from error
        return prefix

    def read(self, prefix: str) -> None:
        """Restore from `prefix.weights.h5`: its weights and the model's must be the same (Keras
        itself reads a deeper model's first layers without a word), and with an optimizer, exactly
        its variables (Keras itself only warns and skips them otherwise)."""
        import h5py
        from keras.src.saving import saving_lib

        path = prefix + KERAS_SUFFIX
        try:
            with h5py.File(path, "r") as f:
                saved = len(f[OPTIMIZER_GROUP]) if OPTIMIZER_GROUP in f else 0
                weights = _weights_under(f, self._layer_names())
            if weights != len(self.model.weights):
                model = len(self.model.weights)
                raise ValueError(f"it holds {weights} weights, the model has {model}: a checkpoint of another model?")
            if self.optimizer is not None and saved != len(self.optimizer.variables):
                raise ValueError(
                    f"it holds {saved} optimizer variables, the run's optimizer has {len(self.optimizer.variables)}: "
                    "written with other training settings (--ema-decay, --grad-accumulation, a time budget)?"
                )
            saving_lib.load_weights_only(self.model, path, objects_to_skip=self._skipped() or None)
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(first_line(error)) from None


def _weights_under(f, groups: list[str]) -> int:
    """The arrays (weights) an h5py file `f` holds under its top-level `groups`."""
    found = []
    for group in groups:
        if group in f:
            f[group].visititems(lambda name, item: found.append(name) if hasattr(item, "shape") else None)
    return len(found)


def tensorflow_process(module: str, *args: str) -> tuple[list[str], dict]:
    """(the command, its environment) of a process that runs the package's `module` (`python -m`,
    its `main`) with `args` on Keras' TensorFlow backend, importing this package from where this
    process does. It sees no GPU: on JAX or PyTorch the accelerator is the training's (TensorFlow
    would take its memory)."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the package's parent
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""}
    env["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return [sys.executable, "-m", module, *args], env
