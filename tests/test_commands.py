"""The commands a user types that only slow tests ran before (issue 50 items 3 and 4), each once on
a tiny model in `make test`: `export` and `export --check` (in process, `main`, as tests/test_cli.py
runs the command line), `import --from marian`, and `train --backend torch` in a process of its own
(Keras fixes its backend when first imported). The export's SavedModel, reloaded from disk with
`tf.saved_model.load`, serves `translate_with_options` (whose options change its output) and
`translate_document` as the Python `Translator` translates."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE
from marian_maker import fixture_spm, write_marian

from keras_transformer.cli.main import main
from keras_transformer.model_dir import ModelDir, load_model
from keras_transformer.model_dir.checkpoints import checkpoint_step
from keras_transformer.translation.alignment import format_pharaoh
from keras_transformer.translation.translator import Translator


def test_export_prints_and_writes_the_saved_models(cli_export, translating):
    """conftest's `cli_export`: `keras-transformer export --model-dir TRANSLATING --out OUT --no-tflite`."""
    out, paths = cli_export.out, cli_export.paths
    for key, name in (("saved_model", "translator"), ("saved_model_ids", "translator_ids")):
        assert paths[key] == os.path.join(out, "saved_model", name, "1")
        assert os.path.isfile(os.path.join(paths[key], "saved_model.pb")), key
    assert not any(key.startswith("tflite") for key in paths)  # --no-tflite
    with open(paths["metadata"], encoding="utf-8") as f:
        assert json.load(f)["model_dirs"] == [translating.model_dir]


def test_export_check_passes_an_exported_saved_model(cli_export, tmp_path, capsys):
    """`export --check OUT`: the serving contract, then the translations of held-out pairs (the model
    dir's validation split: the translating pairs) against the checkpoint's. On the export's ids-only
    SavedModel beside its translator.json (the model dir it names): the check of every artifact of an
    export, ~60 CPU-s (each text signature called as the model server would), is the slow tests'
    (tests/test_export.py)."""
    out = tmp_path / "export"
    ids = os.path.relpath(cli_export.paths["saved_model_ids"], cli_export.out)
    shutil.copytree(cli_export.paths["saved_model_ids"], out / ids)
    shutil.copy(cli_export.paths["metadata"], out)
    capsys.readouterr()
    assert main(["export", "--check", str(out), "--sample", "4"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        f"{out}: every SavedModel meets the TF Serving contract",
        f"{out / ids}: 100% identical, BLEU {lines[1].split(' BLEU ')[1]}",
    ]


def batching_parameters_message():
    """TF Serving's `tensorflow.serving.BatchingParameters` (tensorflow_serving/servables/tensorflow/
    session_bundle_config.proto, its fields as of TF Serving 2.21), built here: PyPI's
    tensorflow-serving-api ships the model-config protos but not this one."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, wrappers_pb2

    proto = descriptor_pb2.FileDescriptorProto(
        name="kt_test_session_bundle_config.proto",
        package="tensorflow.serving",
        syntax="proto3",
        dependency=["google/protobuf/wrappers.proto"],
    )
    message = proto.message_type.add(name="BatchingParameters")
    field = descriptor_pb2.FieldDescriptorProto
    for number, name in enumerate(("max_batch_size", "batch_timeout_micros", "max_enqueued_batches"), 1):
        message.field.add(name=name, number=number, type=field.TYPE_MESSAGE, type_name=".google.protobuf.Int64Value")
    message.field.add(
        name="num_batch_threads", number=4, type=field.TYPE_MESSAGE, type_name=".google.protobuf.Int64Value"
    )
    message.field.add(
        name="thread_pool_name", number=5, type=field.TYPE_MESSAGE, type_name=".google.protobuf.StringValue"
    )
    message.field.add(name="allowed_batch_sizes", number=6, type=field.TYPE_INT64, label=field.LABEL_REPEATED)
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


def test_export_batching_writes_tf_servings_text_protos(cli_export):
    """`export --batching` (conftest's `cli_export`): OUT/saved_model/batching_parameters.txt parses as
    TF Serving's BatchingParameters with serve's policy (4096 tokens / 32 per text, 5 ms), and
    OUT/saved_model/models.config as its ModelServerConfig, naming the three SavedModels at the paths
    the docker line mounts (OUT/saved_model as /models)."""
    from google.protobuf import text_format
    from tensorflow_serving.config import model_server_config_pb2

    base = os.path.join(cli_export.out, "saved_model")
    assert cli_export.paths["batching_parameters"] == os.path.join(base, "batching_parameters.txt")
    with open(cli_export.paths["batching_parameters"], encoding="utf-8") as f:
        parameters = text_format.Parse(f.read(), batching_parameters_message()())
    assert parameters.max_batch_size.value == 128 and parameters.batch_timeout_micros.value == 5000
    assert parameters.max_enqueued_batches.value == 64 and parameters.num_batch_threads.value >= 1
    with open(cli_export.paths["models_config"], encoding="utf-8") as f:
        config = text_format.Parse(f.read(), model_server_config_pb2.ModelServerConfig())
    served = [(c.name, c.base_path, c.model_platform) for c in config.model_config_list.config]
    names = ("translator", "translator_ids", "translator_int8")
    assert served == [(name, f"/models/{name}", "tensorflow") for name in names]
    assert all(os.path.isdir(os.path.join(base, name, "1")) for name in names)


# The reloaded SavedModel's per-request settings: the export's own (translate's: §6.1's beam 4,
# alpha 0.6), greedy, and the output cut at 3 tokens.
DEFAULTS = {"beam_size": 4, "alpha": 0.6, "max_decoding_length": 1000, "min_decoding_length": 0}
DEFAULTS |= {"repetition_penalty": 1.0, "no_repeat_ngram_size": 0}
GREEDY = {**DEFAULTS, "beam_size": 1, "alpha": 0.0}
CUT = {**DEFAULTS, "max_decoding_length": 3}


def served_with(signature, texts, settings):
    per_text = {key: tf.constant([value] * len(texts)) for key, value in settings.items()}
    out = signature(text=tf.constant(texts), **per_text)
    assert set(out["error"].numpy()) == {b""}
    return [t.decode() for t in out["translation"].numpy()], out["score"].numpy()


@pytest.fixture(scope="module")
def reloaded(cli_export, translating):
    """The exported text SavedModel as `tf.saved_model.load` gives it, and the model dir's
    `Translator` with the export's settings (`disable_unk`: `export_decoding`)."""
    saved = tf.saved_model.load(cli_export.paths["saved_model"])
    return saved, Translator.from_model_dir(translating.model_dir, disable_unk=True)


def test_the_reloaded_translate_with_options_serves_each_setting_as_python_does(reloaded, translating):
    saved, python = reloaded
    signature = saved.signatures["translate_with_options"]
    texts = translating.sources[:6]
    found = {name: served_with(signature, texts, settings) for name, settings in
             (("defaults", DEFAULTS), ("greedy", GREEDY), ("cut", CUT))}  # fmt: skip
    assert found["defaults"][0] == saved.signatures["serving_default"](text=tf.constant(texts))["translation"].numpy(
    ).astype(str).tolist()  # fmt: skip
    for name, settings in (("defaults", DEFAULTS), ("greedy", GREEDY), ("cut", CUT)):
        options = {"beam_size": settings["beam_size"], "alpha": settings["alpha"]}
        if name == "cut":
            options["max_decoding_length"] = 3
        nbest = Translator(python.model, python.tokenizer, python.decoding.replace(**options)).translate_nbest(texts, 1)
        assert found[name][0] == [row[0][0] for row in nbest], name
        np.testing.assert_allclose(found[name][1], [row[0][1] for row in nbest], atol=1e-4)
    # The options change the output: 3 tokens at most, cut from the uncut translations; greedy
    # scores other than beam 4's at alpha 0.6.
    tokens = [len(python.tokenizer.tokenize(t).numpy()) for t in found["cut"][0]]
    assert max(tokens) <= 3 and found["cut"][0] != found["defaults"][0]
    assert not np.allclose(found["greedy"][1], found["defaults"][1], atol=1e-3)


def test_the_reloaded_translate_document_translates_as_python_does_with_split(reloaded, translating):
    saved, python = reloaded
    a, b, c = translating.sources[:3]
    documents = [f"{a}  {b}\n{c}", "", b, f"  {c} {a}  "]
    out = saved.signatures["translate_document"](text=tf.constant(documents))["translation"].numpy()
    translated = [t.decode("utf-8") for t in out]
    assert translated == python.translate(documents, split=True)
    assert translated[0] != python.translate(documents[0])  # sentence by sentence, not as one text


def test_the_reloaded_translate_with_scores_gives_pythons_return_scores(reloaded, translating):
    """The SavedModel's `translate_with_scores` (reloaded with `tf.saved_model.load`) and
    `Translator.translate(..., return_scores=True)`: the same translations, alignments, sentence
    confidence and word scores (`translation/confidence.py`)."""
    saved, python = reloaded
    texts = [*translating.sources[:5], ""]
    out = saved.signatures["translate_with_scores"](text=tf.constant(texts))
    scored = python.translate(texts, return_scores=True)
    aligned = python.translate_with_alignments(texts)
    assert [t.decode() for t in out["translation"].numpy()] == [s.translation for s in scored]
    assert [t.decode() for t in out["alignment"].numpy()] == [format_pharaoh(pairs) for _, pairs in aligned]
    np.testing.assert_allclose(out["confidence"].numpy(), [s.confidence.score for s in scored], atol=1e-5)
    words = out["word_scores"].numpy()  # [B, W]
    for row, found in zip(words, scored):
        values = [value for _, value in found.confidence.words]
        np.testing.assert_allclose(row[: len(values)], values, atol=1e-5)
        assert not row[len(values) :].any()  # 0 past the words
    assert all(0 < s.confidence.score <= 1 for s in scored)
    assert scored[-1].confidence.flags == ("empty",) and scored[-1].translation == ""


def test_import_from_marian_writes_a_model_dir_of_its_weights(tmp_path, capsys):
    """`keras-transformer import --from marian DIR --model-dir OUT` prints the model dir and the
    checkpoint, which holds Marian's embedding as the model's."""
    marian = write_marian(tmp_path / "marian", fixture_spm())
    out = str(tmp_path / "model")
    assert main(["import", "--from", "marian", str(marian), "--model-dir", out]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"model_dir\t{out}" and lines[1] == f"checkpoint\t{ModelDir(out).latest_checkpoint()}"
    model, tokenizer, _ = load_model(out)
    embedding = np.load(marian / "model.npz")["Wemb"]  # [V, d_model]
    assert model.config.vocab_size == tokenizer.vocab_size >= embedding.shape[0]
    mine = next(w for w in model.weights if "embedding" in w.path).numpy()  # [V', d_model]
    assert any(np.array_equal(mine[i], embedding[0]) for i in range(mine.shape[0]))


def test_train_backend_torch_as_a_user_types_it(tmp_path):
    """`keras-transformer train --backend torch ...`: 2 steps of a 1-layer tiny model on PyTorch (~14
    CPU-s, JAX's compilation ~17), its checkpoint one that the TensorFlow tools load."""
    model_dir = str(tmp_path / "model")
    flags = ["--data", str(FIXTURE), "--preset", "tiny", "--num-layers", "1", "--vocab-size", "150"]
    flags += ["--tokenizer-sample", "200", "--batch-tokens", "256", "--max-length", "24", "--max-steps", "2"]
    flags += ["--steps-per-epoch", "2", "--warmup-steps", "1"]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
    train = [sys.executable, "-m", "keras_transformer", "train", "--backend", "torch", "--model-dir", model_dir]
    result = subprocess.run([*train, *flags], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    latest = ModelDir(model_dir).latest_checkpoint()
    assert latest and checkpoint_step(latest) == 2, result.stderr[-3000:]
    assert "training on torch" in result.stderr
    model, _, values = load_model(model_dir)
    assert values["checkpoint_path"] == latest and model.config.num_layers == 1
