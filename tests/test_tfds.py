"""TFDS sources offline: a tiny translation dataset prepared locally (a `GeneratorBasedBuilder`
in a temporary TFDS_DATA_DIR) is found by name and trained from, without the network; a dataset
that needs the network fails with one line."""

import os
import re
import subprocess
import sys

import pytest
import tensorflow_datasets as tfds
from conftest import FIXTURE

from keras_transformer.data.errors import DataError
from keras_transformer.data.sources import pairs_dataset, read_pairs

TINY = ["--preset", "tiny", "--vocab-size", "300", "--batch-tokens", "512", "--warmup-steps", "10"]


class FixtureTranslation(tfds.core.GeneratorBasedBuilder):
    """The 400-pair fixture as a TFDS translation dataset: 300 train, 50 validation, 50 test pairs."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        return tfds.core.DatasetInfo(
            builder=self,
            features=tfds.features.Translation(languages=("en", "de")),
            supervised_keys=("en", "de"),
        )

    def _split_generators(self, dl_manager):
        lines = FIXTURE.read_text(encoding="utf-8").splitlines()
        parts = {"train": lines[:300], "validation": lines[300:350], "test": lines[350:]}
        return {split: self._generate_examples(part) for split, part in parts.items()}

    def _generate_examples(self, lines):
        for index, line in enumerate(lines):
            english, german = line.split("\t")
            yield index, {"en": english, "de": german}


class NeedsNetwork(tfds.core.GeneratorBasedBuilder):
    """A dataset whose preparation downloads (from a port where nothing listens)."""

    VERSION = tfds.core.Version("1.0.0")

    def _info(self):
        features = tfds.features.Translation(languages=("en", "de"))
        return tfds.core.DatasetInfo(builder=self, features=features, supervised_keys=("en", "de"))

    def _split_generators(self, dl_manager):
        return {"train": self._generate_examples(dl_manager.download("http://127.0.0.1:9/corpus.tar.gz"))}

    def _generate_examples(self, path):
        yield from ()


@pytest.fixture(scope="module")
def tfds_data_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("tfds"))
    FixtureTranslation(data_dir=data_dir).download_and_prepare()
    return data_dir


def test_a_prepared_dataset_is_read_by_name(tfds_data_dir):
    sources, targets = read_pairs("tfds:fixture_translation", "validation", tfds_data_dir=tfds_data_dir)
    english, german = FIXTURE.read_text(encoding="utf-8").splitlines()[300].split("\t")
    assert len(sources) == 50 and english in sources and german in targets


def test_a_dataset_that_needs_the_network_fails_with_one_line(tmp_path, monkeypatch):
    from tensorflow_datasets.core.download import downloader

    monkeypatch.setattr(downloader, "MAX_RETRIES", 0)  # no back-off: one attempt
    with pytest.raises(DataError) as error:
        pairs_dataset("tfds:needs_network", "train", tfds_data_dir=str(tmp_path), tfds_download=True)
    message = str(error.value)
    assert "\n" not in message
    assert re.fullmatch(
        f"cannot load tfds:needs_network: it is not prepared in {tmp_path} and downloading it failed "
        r"\(.*127.0.0.1.*\); "
        r"prepare it where there is internet \(tfds build needs_network --data_dir DIR\) and pass --tfds-data-dir DIR",
        message,
    )


@pytest.mark.slow
def test_train_and_evaluate_from_tfds_offline(tfds_data_dir, tmp_path):
    """In fresh processes, which do not define the builder: TFDS finds it in TFDS_DATA_DIR."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "TFDS_DATA_DIR": tfds_data_dir}
    model_dir = str(tmp_path / "model")

    def run(*args):
        command = [sys.executable, "-m", "keras_transformer", *args]
        return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)

    data = ["--data", "tfds:fixture_translation"]
    trained = run("train", *data, "--model-dir", model_dir, "--max-steps", "3", "--steps-per-epoch", "3", *TINY)
    assert trained.returncode == 0, trained.stderr[-3000:]
    assert "learned a " in trained.stderr and "trained to step 3" in trained.stderr
    evaluated = run("evaluate", "--model-dir", model_dir, "--beam-size", "1", "--limit", "5", "--show", "0")
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert '"sentences": 5' in evaluated.stdout
