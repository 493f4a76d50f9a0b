"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in Keras 3.

    import keras_transformer as kt

    kt.Translator.from_model_dir("runs/small").translate("Jesus wept.")

The names below load on first use (PEP 562), so `import keras_transformer` and the command
line's `--help` and `--version` do not import TensorFlow.
"""

import os
import typing

os.environ.setdefault("KERAS_BACKEND", "tensorflow")

__version__ = "0.1.0"

_EXPORTS = {
    "PRESETS": "keras_transformer.config",
    "DataConfig": "keras_transformer.config",
    "TrainingConfig": "keras_transformer.config",
    "TransformerConfig": "keras_transformer.config",
    "DecodeResult": "keras_transformer.inference.decoding",
    "beam_search": "keras_transformer.inference.decoding",
    "greedy_search": "keras_transformer.inference.decoding",
    "Transformer": "keras_transformer.model",
    "load_model": "keras_transformer.model_dir",
    "Translator": "keras_transformer.inference.translator",
}
__all__ = [
    "PRESETS",
    "DataConfig",
    "DecodeResult",
    "TrainingConfig",
    "Transformer",
    "TransformerConfig",
    "Translator",
    "beam_search",
    "greedy_search",
    "load_model",
]

if typing.TYPE_CHECKING:
    from keras_transformer.config import PRESETS, DataConfig, TrainingConfig, TransformerConfig
    from keras_transformer.inference.decoding import DecodeResult, beam_search, greedy_search
    from keras_transformer.inference.translator import Translator
    from keras_transformer.model import Transformer
    from keras_transformer.model_dir import load_model

del os, typing  # the package's namespace is its API


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
