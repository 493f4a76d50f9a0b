"""A model dir written by 0.1.0 (config.json with the reserved ids and label smoothing in the
model config, the data source's name under "data") still loads, translates and resumes."""

import json
import os
import shutil

import pytest
from conftest import TINY_TRAINING

import keras_transformer as kt
from keras_transformer.cli.main import main

# The model's fields that 0.1.0 did not have: the architecture options.
OPTIONS = (
    "num_encoder_layers",
    "num_decoder_layers",
    "ffn_activation",
    "sinusoid_layout",
    "output_bias",
    "start_from_zero_embedding",
)


def as_written_by_0_1_0(model_dir: str) -> None:
    """Rewrite `model_dir`'s config.json in 0.1.0's format."""
    path = os.path.join(model_dir, "config.json")
    with open(path, encoding="utf-8") as f:
        values = json.load(f)
    smoothing = values["training"].pop("label_smoothing")
    values["model"].update(pad_id=0, start_id=1, eos_id=2, label_smoothing=smoothing)
    values["data"] = values["data_config"]["data"]
    for name in ("subword_alpha", "uppercase_share", "titlecase_share", "source_noise"):  # fields 0.1.0 did not have
        values["data_config"].pop(name, None)
    for name in OPTIONS:
        values["model"].pop(name)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(values, f)


# Slow (issue 50 item 10: the suite's time): a resume through `main` is make test's in tests/test_faults.py.
@pytest.mark.slow
def test_a_0_1_0_model_dir_loads_translates_and_resumes(trained, tmp_path, capsys):
    model_dir = str(tmp_path / "old")
    shutil.copytree(trained.model_dir, model_dir)
    expected = kt.Translator.from_model_dir(trained.model_dir).translate(["Jesus wept.", "And God said,"])
    as_written_by_0_1_0(model_dir)
    values = kt.ModelDir(model_dir).read()
    assert values["training"]["label_smoothing"] == 0.1 and values["data_config"].data.endswith(".tsv")
    assert kt.Translator.from_model_dir(model_dir).translate(["Jesus wept.", "And God said,"]) == expected
    data = values["data_config"].data
    capsys.readouterr()
    assert main(["train", "--data", data, *TINY_TRAINING, "--max-steps", "33", "--model-dir", model_dir]) == 0
    assert "resumed from step 30" in capsys.readouterr().err
    assert kt.ModelDir(model_dir).latest_checkpoint().endswith("ckpt-33")
