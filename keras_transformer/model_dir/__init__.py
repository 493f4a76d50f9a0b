"""The model directory and what belongs to one model: one module per concern.

- `directory`: `ModelDir` (config.json, the tokenizer, the paths of its parts, the train lock) and
  `load_model`;
- `checkpoints`: its checkpoints, listed, recovered, pruned, written and restored;
- `held_out`: the held-out pairs of the data the model was trained on;
- `shortlist`: its vocabulary shortlist (shortlist.npz), counted from its training pairs and chosen
  for a search;
- `errors`: `ModelDirError` and its kinds.

The names below load on first use (PEP 562), as the package's own do: a process that runs one of
these modules (`python -m keras_transformer.model_dir.checkpoints`) imports it once.
"""

_EXPORTS = {
    "ModelDir": "keras_transformer.model_dir.directory",
    "load_model": "keras_transformer.model_dir.directory",
    "CheckpointWriteError": "keras_transformer.model_dir.errors",
    "ModelDirError": "keras_transformer.model_dir.errors",
    "ModelDirLocked": "keras_transformer.model_dir.errors",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    import importlib

    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value
    return value
