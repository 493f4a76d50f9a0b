import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import pathlib  # noqa: E402

import keras  # noqa: E402
import pytest  # noqa: E402

DATA = pathlib.Path(__file__).parent / "data"
FIXTURE = DATA / "fixture_bible.en-de.tsv"
# A tiny model that trains in seconds on the fixture (the CLI and resume tests' `train` flags).
TINY_TRAINING = ["--preset", "tiny", "--vocab-size", "300", "--batch-tokens", "512", "--warmup-steps", "10"]


@pytest.fixture(autouse=True)
def _seed():
    keras.utils.set_random_seed(0)


@pytest.fixture(scope="session")
def fixture_pairs():
    sources, targets = [], []
    for line in FIXTURE.read_text(encoding="utf-8").splitlines():
        source, target = line.split("\t")
        sources.append(source)
        targets.append(target)
    return sources, targets


@pytest.fixture(scope="session")
def tokenizer(fixture_pairs):
    from keras_transformer.data.tokenizer import SubwordTokenizer

    sources, targets = fixture_pairs
    return SubwordTokenizer.train(sources + targets, 400)


@pytest.fixture(scope="session")
def scrambled_model():
    """A tiny untrained model over 12 tokens with large random weights: its choices vary from step
    to step, and EOS is likely enough that most searches end before their limit."""
    import numpy as np

    from keras_transformer import Transformer, TransformerConfig

    model = Transformer(TransformerConfig.tiny(vocab_size=12, dropout=0.0, max_length=20))
    model.build()
    rng = np.random.default_rng(1)
    for weight in model.weights:
        if "layer_norm" not in weight.path:
            weight.assign(rng.normal(scale=2.0, size=weight.shape) / np.sqrt(weight.shape[0]))
    return model
