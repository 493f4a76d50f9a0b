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
    "DecodingConfig": "keras_transformer.config",
    "TrainingConfig": "keras_transformer.config",
    "TransformerConfig": "keras_transformer.config",
    "held_out": "keras_transformer.model_dir.held_out",
    "read_pairs": "keras_transformer.data.sources",
    "DecodeResult": "keras_transformer.search.decoding",
    "beam_search": "keras_transformer.search.decoding",
    "greedy_search": "keras_transformer.search.decoding",
    "translate_file": "keras_transformer.files",
    "Ensemble": "keras_transformer.search.ensemble",
    "Modifier": "keras_transformer.search.search",
    "export_tensorflow": "keras_transformer.exporters.tensorflow",
    "Glossary": "keras_transformer.translation.glossary",
    "evaluate": "keras_transformer.evaluation.evaluation",
    "Translator": "keras_transformer.translation.translator",
    "import_huggingface": "keras_transformer.importers.huggingface",
    "import_marian": "keras_transformer.importers.marian",
    "Transformer": "keras_transformer.model",
    "ModelDir": "keras_transformer.model_dir",
    "load_model": "keras_transformer.model_dir",
    "resolve_strategy": "keras_transformer.training.distribute",
    "use_cpu_devices": "keras_transformer.training.distribute",
    "compile_model": "keras_transformer.training.optimization",
    "train": "keras_transformer.training.trainer",
}
_MODULES = {"visualize": "keras_transformer.plots.visualize"}  # attention and training plots
__all__ = [
    "DataConfig",
    "DecodeResult",
    "DecodingConfig",
    "Ensemble",
    "Glossary",
    "Modifier",
    "PRESETS",
    "TrainingConfig",
    "Transformer",
    "TransformerConfig",
    "Translator",
    "beam_search",
    "compile_model",
    "evaluate",
    "export_tensorflow",
    "greedy_search",
    "held_out",
    "import_huggingface",
    "import_marian",
    "ModelDir",
    "load_model",
    "read_pairs",
    "resolve_strategy",
    "use_cpu_devices",
    "visualize",
    "train",
    "translate_file",
]

if typing.TYPE_CHECKING:
    from keras_transformer.config import PRESETS, DataConfig, DecodingConfig, TrainingConfig, TransformerConfig
    from keras_transformer.data.sources import read_pairs
    from keras_transformer.evaluation.evaluation import evaluate
    from keras_transformer.exporters.tensorflow import export_tensorflow
    from keras_transformer.files import translate_file
    from keras_transformer.importers.huggingface import import_huggingface
    from keras_transformer.importers.marian import import_marian
    from keras_transformer.model import Transformer
    from keras_transformer.model_dir import ModelDir, load_model
    from keras_transformer.model_dir.held_out import held_out
    from keras_transformer.plots import visualize
    from keras_transformer.search.decoding import DecodeResult, beam_search, greedy_search
    from keras_transformer.search.ensemble import Ensemble
    from keras_transformer.search.search import Modifier
    from keras_transformer.training.distribute import resolve_strategy, use_cpu_devices
    from keras_transformer.training.optimization import compile_model
    from keras_transformer.training.trainer import train
    from keras_transformer.translation.glossary import Glossary
    from keras_transformer.translation.translator import Translator

del os, typing  # the package's namespace is its API


def __getattr__(name: str):
    import importlib

    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS, *_MODULES})
