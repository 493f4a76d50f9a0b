"""`export --check` translates held-out pairs with every artifact and compares them with the
checkpoint's translations: a servable but wrong artifact fails with one line naming it."""

import json
import os
import shutil

import pytest
from conftest import FIXTURE, TINY_TRAINING

from keras_transformer.cli.main import main
from keras_transformer.exporters.quality_check import ArtifactQuality
from keras_transformer.exporters.signatures import TranslationModule


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    """A tiny model trained on the fixture and its export (float32 SavedModels, TFLite, int8)."""
    root = tmp_path_factory.mktemp("quality")
    model_dir, out = str(root / "model"), str(root / "export")
    train = ["train", "--data", str(FIXTURE), *TINY_TRAINING, "--max-steps", "60", "--model-dir", model_dir]
    assert main(train) == 0
    assert main(["export", "--model-dir", model_dir, "--out", out]) == 0
    return model_dir, out


def test_the_export_records_its_model_dir_and_passes_its_own_check(export, capsys):
    model_dir, out = export
    with open(os.path.join(out, "translator.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["model_dir"] == os.path.abspath(model_dir) and metadata["saved_model_dtype"] == "float32"
    capsys.readouterr()
    assert main(["export", "--check", out, "--sample", "20"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{out}: every SavedModel meets the TF Serving contract"
    checked = {line.split(": ")[0]: line.split(": ")[1] for line in lines[1:]}
    assert len(checked) == 4, lines  # text and ids SavedModels, TFLite float and int8
    for artifact, verdict in checked.items():
        if not artifact.endswith("int8.tflite"):  # float32 on our search: the checkpoint's outputs
            assert verdict.startswith("100% identical, BLEU"), (artifact, verdict)


def test_an_artifact_with_other_weights_fails_the_check_in_one_line(export, tmp_path, capsys):
    from keras_transformer import Transformer, TransformerConfig
    from keras_transformer.model_dir import ModelDir

    model_dir, out = export
    damaged = str(tmp_path / "export")
    shutil.copytree(out, damaged)
    [version] = os.listdir(os.path.join(damaged, "saved_model", "translator_ids"))
    path = os.path.join(damaged, "saved_model", "translator_ids", version)
    shutil.rmtree(path)
    untrained = Transformer(ModelDir(model_dir).read()["model"])  # servable, same shapes, wrong weights
    TranslationModule(untrained).save(path)
    capsys.readouterr()
    assert main(["export", "--check", damaged, "--sample", "20"]) == 1
    problems = capsys.readouterr().err.splitlines()
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"keras-transformer: quality: {path}: ")
    assert "of its translations equal the checkpoint's (at least 90% expected)" in problems[0]


def test_tolerances():
    exact = ArtifactQuality("a", identical=0.8, bleu=10.0, bleu_drop=0.1, exact=True)
    assert exact.problem(0.9, 1.0) and exact.problem(0.8, 1.0) is None
    reduced = ArtifactQuality("b", identical=0.1, bleu=8.0, bleu_drop=1.5, exact=False)
    assert reduced.problem(0.9, 2.0) is None and "1.50 below the checkpoint's (at most 1.0)" in reduced.problem(
        0.9, 1.0
    )
    assert ArtifactQuality("c", None, None, None, False, "LiteRT is not installed").problem(0.9, 1.0) is None
