"""keras-transformer: the Transformer of "Attention Is All You Need" (Vaswani et al., 2017) in Keras 3."""

import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TF's C++ info logs out of the CLI's output

from keras_transformer.config import PRESETS, TrainingConfig, TransformerConfig  # noqa: E402
from keras_transformer.decoding import DecodeResult, beam_search, greedy_search  # noqa: E402
from keras_transformer.model import Transformer  # noqa: E402

__all__ = ["PRESETS", "DecodeResult", "TrainingConfig", "Transformer", "TransformerConfig", "beam_search", "greedy_search"]
__version__ = "0.1.0"
