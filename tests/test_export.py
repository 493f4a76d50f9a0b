"""Proofs of every exported artifact: each runs in a fresh process that imports only
tensorflow (+ tensorflow_text) or only LiteRT, and gives the Python model's translations."""

import contextlib
import io
import json
import os
import pickle
import shutil
import subprocess
import sys

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf
from ai_edge_litert.interpreter import Interpreter
from conftest import ARCHITECTURE_OPTIONS, FIXTURE, scramble

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.cli.main import main
from keras_transformer.data.sources import read_pairs
from keras_transformer.exporters.quality_check import ArtifactQuality, _runners
from keras_transformer.exporters.signatures import IDS_SPEC, TranslationModule
from keras_transformer.exporters.tensorflow import export_tensorflow, next_version, prediction_log, tflite_models
from keras_transformer.model_dir import ModelDir, load_model
from keras_transformer.search.decoding import beam_search, decode_limits
from keras_transformer.translation.translator import Translator

PROBE = os.path.join(os.path.dirname(__file__), "probes", "run_artifact.py")
PACKAGE_MODULES = {"keras_transformer", "sentencepiece"}  # tensorflow_text itself imports keras


class Exported:
    """The shared tiny model (conftest's `trained`: 30 steps), its export, and its Python reference."""

    def __init__(self, model_dir, root):
        self.model_dir = model_dir
        self.model, self.tokenizer, _ = load_model(model_dir)
        self.out = str(root / "export")
        quiet = lambda message: None
        self.paths = export_tensorflow(self.model, self.tokenizer, self.out, log=quiet, model_dirs=[model_dir])
        self.translator = Translator(self.model, self.tokenizer, batch_size=256)
        self.sentences = read_pairs(str(FIXTURE), "test")[0] + read_pairs(str(FIXTURE), "validation")[0]

    def source_ids(self, texts):
        return padded_source_ids(self.translator, texts)


def padded_source_ids(translator, texts):
    """[B, S] padded ids, exactly as the Python `translator` builds them."""
    rows = translator.source_ids(texts)
    batch = np.zeros((len(rows), max(len(r) for r in rows)), np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    return Exported(trained.model_dir, tmp_path_factory.mktemp("export"))


def run_artifact(kind, path, calls):
    """Outputs of `calls` [(signature, inputs)] run by tests/probes/run_artifact.py in a fresh process."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONPATH": ""}
    result = subprocess.run(
        [sys.executable, PROBE, kind, path],
        input=pickle.dumps(calls),
        capture_output=True,
        env=env,
        cwd=os.path.dirname(PROBE),
        timeout=600,
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    outputs = pickle.loads(result.stdout)
    assert not PACKAGE_MODULES & set(outputs[0].pop("__modules__")), "the probe imported package code"
    return outputs


PROBES = []  # the @probe functions, whose artifact runs `probed` makes together


def probe(build):
    """Register `build(exported) -> [(kind, artifact, calls)]`, one test's runs of artifacts
    (`kind` as run_artifact's, `artifact` a key of `exported.paths`), for `probed` to make."""
    PROBES.append(build)
    return build


@pytest.fixture(scope="module")
def probed(exported):
    """{build: [the outputs of each (kind, artifact, calls) it returned]} for every @probe function:
    the calls of every test, run by one fresh process per runtime and artifact (run_artifact, which
    imports no package code), in the order registered, as one model server serves one request
    after another. A process per test paid TensorFlow's import, the artifact's load and each
    signature's first run (its graph optimised and instantiated) again for every test."""
    runs = {build: build(exported) for build in PROBES}
    grouped = {}
    for kind, artifact, calls in (run for test_runs in runs.values() for run in test_runs):
        grouped.setdefault((kind, artifact), []).extend(calls)
    outputs = {
        (kind, artifact): iter(run_artifact(kind, exported.paths[artifact], calls))
        for (kind, artifact), calls in grouped.items()
    }
    return {
        build: [[next(outputs[kind, artifact]) for _ in calls] for kind, artifact, calls in test_runs]
        for build, test_runs in runs.items()
    }


def assert_same_beams(got_ids, want_ids, got_scores, want_scores):
    """Equal n-best lists: equal scores, and equal ids for every beam whose score no other beam of
    its sentence ties. The test model is barely trained, so several hypotheses (the same tokens in
    another order) can tie to float32 precision, and two runtimes may keep either of them."""
    got_ids, want_ids = np.asarray(got_ids), np.asarray(want_ids)
    want_scores = np.asarray(want_scores)
    assert got_ids.shape == want_ids.shape
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-4)
    gaps = np.abs(want_scores[:, :, None] - want_scores[:, None, :])  # [B, K, K]
    tied = ((gaps <= 1e-4 * np.abs(want_scores)[:, :, None]) & ~np.eye(want_scores.shape[1], dtype=bool)).any(
        -1
    )  # [B, K]
    np.testing.assert_array_equal(got_ids[~tied], want_ids[~tied])
    assert (~tied).sum() >= len(want_ids)  # every sentence's comparison is not vacuous in aggregate


def texts(values):
    return np.array([t.encode("utf-8") if isinstance(t, str) else t for t in values], dtype=object)


def decoded(strings):
    return [s.decode("utf-8") for s in strings]


@pytest.mark.slow
def test_export_writes_every_artifact(exported):
    for key in ("tflite", "tflite_int8", "tflite_text", "tokenizer"):
        assert os.path.getsize(exported.paths[key]) > 0, key
    assert os.path.getsize(exported.paths["tflite_int8"]) < 0.7 * os.path.getsize(exported.paths["tflite"])
    warmup = os.path.join(exported.paths["saved_model"], "assets.extra", "tf_serving_warmup_requests")
    from tensorflow_serving.apis import prediction_log_pb2

    records = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(warmup)]
    assert len(records) == 1
    request = records[0].predict_log.request
    assert request.model_spec.signature_name == "serving_default" and list(request.inputs) == ["text"]
    names = ["translator", "translator_ids", "translator_int8"]
    assert sorted(os.listdir(os.path.join(exported.out, "saved_model"))) == names
    assert exported.paths["saved_model"].endswith(os.path.join("translator", "1"))
    assert exported.paths["saved_model_ids"].endswith(os.path.join("translator_ids", "1"))
    assert exported.paths["saved_model_int8"].endswith(os.path.join("translator_int8", "1"))


def test_both_readmes_name_every_signature(trained):
    """README's Export section and export/README.md's table name each signature the SavedModel
    serves (a multilingual model's `translate_to` too)."""
    model, tokenizer, _ = load_model(trained.model_dir)
    names = set(TranslationModule(model, tokenizer).signatures()) | {"translate_to"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        export_section = f.read().split("\n## Export\n")[1].split("\n## ")[0]
    with open(os.path.join(root, "export", "README.md"), encoding="utf-8") as f:
        table = next(line for line in f if line.startswith("| `saved_model/translator/N/`"))
    assert len(names) >= 10
    assert [n for n in sorted(names) if f"`{n}`" not in export_section] == []
    assert [n for n in sorted(names) if f"`{n}`" not in table] == []


def test_each_saved_model_holds_every_weight_once(cli_export, translating):
    """The SavedModel's checkpoint holds the model's weights once (tracked through the Keras model
    as well, each was saved a second time: a base OPUS-MT model's SavedModel took 624 MB, not 296).
    On conftest's `cli_export` (no TFLite: the `exported` fixture's conversions are the slow tests')."""
    model = load_model(translating.model_dir)[0]
    count = lambda model: sum(int(np.prod(v.shape)) for v in model.variables)  # dropout's seeds too
    weights = {"saved_model": count(model), "saved_model_ids": count(model)}
    weights["saved_model_int8"] = count(model.with_int8())  # and the int8 weights' scales
    for key, size in weights.items():
        saved = tf.train.list_variables(os.path.join(cli_export.paths[key], "variables", "variables"))
        assert sum(int(np.prod(shape)) for _, shape in saved) == size + 1, key  # + the object graph


@pytest.mark.slow
def test_the_tflite_models_hold_the_embedding_once_and_the_int8_one_in_int8(exported):
    """The decoding steps' output projection reads E^T made once per search (a loop-invariant
    input: `search.search` captures `DecodingContext.shared`), which TFLite's converter folds into
    the FULLY_CONNECTED op's weights: no float32 copy of the [vocab, d_model] matrix, or of its transpose, beside them
    (carried in the loop's state it became a BATCH_MATMUL against one, in the int8 model too)."""
    config = exported.model.config
    shapes = {f"shape:[{config.vocab_size}, {config.d_model}]", f"shape:[{config.d_model}, {config.vocab_size}]"}
    for key, weights in ("tflite", "FLOAT32"), ("tflite_int8", "INT8"):
        with open(exported.paths[key], "rb") as f, contextlib.redirect_stdout(io.StringIO()) as report:
            tf.lite.experimental.Analyzer.analyze(model_content=f.read())
        constants = [
            line for line in report.getvalue().splitlines() if " RO " in line and any(s in line for s in shapes)
        ]
        assert constants and all(f"type:{weights} RO" in line for line in constants), (key, constants)
        assert len({line.split("buffer: ")[1].split(",")[0] for line in constants}) <= 2, (
            constants
        )  # E, and E's in the FC


@pytest.mark.slow
def test_tflite_metadata_describes_the_models(exported):
    with open(exported.paths["metadata"], encoding="utf-8") as f:
        metadata = json.load(f)
    config = exported.model.config
    assert {k: metadata[k] for k in ("max_length", "vocab_size", "pad_id", "start_id", "eos_id", "unk_id")} == {
        "max_length": config.max_length,
        "vocab_size": config.vocab_size,
        "pad_id": 0,
        "start_id": 1,
        "eos_id": 2,
        "unk_id": 3,
    }
    assert (metadata["beam_size"], metadata["alpha"], metadata["patience"]) == (4, 0.6, 1.0)
    assert metadata["tokenizer"] == "tokenizer.model"
    models = {"ids": "translator.tflite", "ids_int8": "translator_int8.tflite", "text": "translator_text.tflite"}
    assert metadata["models"] == models
    for name in (metadata["tokenizer"], *metadata["models"].values()):
        assert os.path.isfile(os.path.join(exported.out, name))


def test_warmup_records_equal_tensorflow_servings_own():
    """The hand-encoded PredictionLog parses, with tensorflow-serving-api, into the message it builds."""
    from tensorflow_serving.apis import model_pb2, predict_pb2, prediction_log_pb2

    inputs = {
        "text": np.array(["Jesus wept.", "🦜"], dtype=object),
        "source_ids": np.arange(300, dtype=np.int32).reshape(2, -1),
    }
    spec = model_pb2.ModelSpec(name="translator", signature_name="serving_default")
    request = predict_pb2.PredictRequest(model_spec=spec)
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    want = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
    assert prediction_log_pb2.PredictionLog.FromString(prediction_log("translator", "serving_default", inputs)) == want


def test_next_version_is_one_above_both_base_paths(tmp_path):
    assert next_version(str(tmp_path), "translator") == 1
    for path in ("translator/1", "translator/3", "translator_ids/4", "translator_ids/.5.partial", "other/9"):
        (tmp_path / "saved_model" / path).mkdir(parents=True)
    assert next_version(str(tmp_path), "translator") == 5
    (tmp_path / "saved_model" / "translator_int8" / "6").mkdir(parents=True)
    assert next_version(str(tmp_path), "translator") == 7


def documents(sentences: list[str]) -> list[str]:
    """Paragraphs of the sentences (`translate_document`), one of them longer than max_length."""
    return [" ".join(sentences[:3]) + "\n\n" + " ".join(sentences[3:] * 4), "", sentences[0]]


@probe
def signature_calls(exported):
    sentences = exported.sentences[:6]
    source_ids = exported.source_ids(sentences)
    text_calls = [
        ("serving_default", {"text": texts(sentences)}),
        ("translate_ids", {"source_ids": source_ids}),
        ("translate_nbest", {"text": texts(sentences)}),
        ("translate_document", {"text": texts(documents(sentences))}),
    ]
    ids_calls = [("serving_default", {"source_ids": source_ids})]
    return [("saved_model", "saved_model", text_calls), ("saved_model", "saved_model_ids", ids_calls)]


@pytest.mark.slow
def test_saved_model_signatures_equal_the_python_model(exported, probed):
    sentences = exported.sentences[:6]
    source_ids = exported.source_ids(sentences)
    reference = beam_search(exported.model, source_ids)
    outputs, ids_only = probed[signature_calls]
    translations = exported.translator.translate(sentences)
    assert decoded(outputs[0]["translation"]) == translations
    assert outputs[0]["score"].shape == (6,) and outputs[0]["score"].dtype == np.float32
    assert_same_beams(outputs[1]["ids"], reference.ids.numpy(), outputs[1]["scores"], reference.scores.numpy())
    assert outputs[2]["translations"].shape == (6, 4) and decoded(outputs[2]["translations"][:, 0]) == translations
    assert_same_beams(ids_only[0]["ids"], reference.ids.numpy(), ids_only[0]["scores"], reference.scores.numpy())
    assert decoded(outputs[3]["translation"]) == exported.translator.translate(documents(sentences), split=True)


UNKNOWN = ["🦜", "山田太郎", "👩\u200d💻"]  # absent from the fixture: its vocabulary cannot write them


@probe
def unknown_character_calls(exported):
    return [("saved_model", "saved_model", [("translate_markup", {"text": texts(unknown_sentences(exported))})])]


def unknown_sentences(exported) -> list[str]:
    return [f"{item} {sentence}" for item, sentence in zip(UNKNOWN, exported.sentences)]


@pytest.mark.slow
def test_the_saved_models_translate_markup_keeps_unknown_characters_as_python_does(exported, probed):
    """Issue 36 item 5: the SavedModel bakes the tokenizer's span rule (`markup.span_rule`)."""
    [[output]] = probed[unknown_character_calls]
    translations = decoded(output["translation"])
    assert translations == exported.translator.translate(unknown_sentences(exported), markup=True)
    assert [translation.count(item) for translation, item in zip(translations, UNKNOWN)] == [1, 1, 1]


def signatures_of(path: str) -> dict:
    """{signature: (its inputs and outputs, each name: (dtype, rank))} of a SavedModel, as TF Serving reads them."""
    from tensorflow.core.protobuf import saved_model_pb2

    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    tensors = lambda infos: {name: (info.dtype, len(info.tensor_shape.dim)) for name, info in infos.items()}
    signatures = proto.meta_graphs[0].signature_def
    return {
        name: (tensors(s.inputs), tensors(s.outputs)) for name, s in signatures.items() if not name.startswith("__")
    }


def matrix_bytes(path: str) -> dict[str, int]:
    """{dtype: bytes} of the weight matrices (2-D variables) in a SavedModel's checkpoint."""
    reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
    dtypes, totals = reader.get_variable_to_dtype_map(), {}
    for name, shape in reader.get_variable_to_shape_map().items():
        if len(shape) == 2:
            totals[dtypes[name].name] = totals.get(dtypes[name].name, 0) + int(np.prod(shape)) * dtypes[name].size
    return totals


@probe
def int8_calls(exported):
    sentences = exported.sentences[:6]
    calls = [
        ("serving_default", {"text": texts(sentences)}),
        ("translate_ids", {"source_ids": exported.source_ids(sentences)}),
    ]
    return [("session", "saved_model_int8", calls)]


@pytest.mark.slow
def test_the_int8_saved_model_serves_the_same_signatures_with_int8_weights(exported, probed):
    """saved_model/translator_int8/: the text SavedModel's signatures, its weight matrices int8 (a
    quarter of the float ones' bytes), served as TF Serving runs it (the tf.compat.v1 loader), with
    the beams of the Python model's int8 copy (`Transformer.with_int8`)."""
    int8, floats = exported.paths["saved_model_int8"], exported.paths["saved_model"]
    assert signatures_of(int8) == signatures_of(floats) and len(signatures_of(int8)) >= 9
    assert list(matrix_bytes(floats)) == ["float32"] and list(matrix_bytes(int8)) == ["int8"]
    assert matrix_bytes(int8)["int8"] * 4 == matrix_bytes(floats)["float32"]
    sentences = exported.sentences[:6]
    model = exported.model.with_int8()
    [outputs] = probed[int8_calls]
    assert decoded(outputs[0]["translation"]) == Translator(model, exported.tokenizer).translate(sentences)
    reference = beam_search(model, exported.source_ids(sentences))
    assert_same_beams(outputs[1]["ids"], reference.ids.numpy(), outputs[1]["scores"], reference.scores.numpy())


@probe
def session_calls(exported):
    sentences = exported.sentences[2:8]
    calls = [
        ("serving_default", {"text": texts(sentences)}),
        ("translate_ids", {"source_ids": exported.source_ids(sentences)}),
    ]
    return [("session", "saved_model", calls)]


@pytest.mark.slow
def test_session_run_as_the_model_server_does(exported, probed):
    sentences = exported.sentences[2:8]
    source_ids = exported.source_ids(sentences)
    [outputs] = probed[session_calls]
    assert decoded(outputs[0]["translation"]) == exported.translator.translate(sentences)
    reference = beam_search(exported.model, source_ids)
    assert_same_beams(outputs[1]["ids"], reference.ids.numpy(), outputs[1]["scores"], reference.scores.numpy())


@probe
def tflite_calls(exported):
    """Two batch sizes x two lengths, on held-out sentences."""
    by_length = sorted(exported.sentences, key=len)
    batches = [exported.source_ids(s) for s in (by_length[:1], by_length[-1:], by_length[:4], by_length[-4:])]
    assert len({b.shape for b in batches}) == 4
    calls = [("serving_default", {"source_ids": b}) for b in batches]
    return [("saved_model", "saved_model_ids", calls), ("litert", "tflite", calls), ("litert", "tflite_int8", calls)]


@pytest.mark.slow
def test_tflite_ids_equal_the_saved_model(probed):
    """Two batch sizes x two lengths, on held-out sentences; the int8 model runs with the same shapes
    (its translations: `test_int8_weights_keep_the_translations_of_a_model_that_translates`)."""
    expected, *lite = probed[tflite_calls]
    for kind, outputs in zip(("tflite", "tflite_int8"), lite):
        for want, got in zip(expected, outputs):
            assert got["ids"].shape == want["ids"].shape and got["ids"].dtype == np.int32
            if kind == "tflite":
                assert_same_beams(got["ids"], want["ids"], got["scores"], want["scores"])


@pytest.mark.slow
def test_int8_weights_keep_the_translations_of_a_model_that_translates(translating, tmp_path):
    """int8 weights round (dynamic-range quantization): on a model that translates its 32 pairs
    (conftest's `translating`), the best hypothesis of each int8 artifact (the TFLite model, the
    SavedModel) and of `Translator(int8=True)` is the float model's for at least 90% of them.
    Measured (2026-12-04): the float TFLite model gives 29 of the 32 references, the int8 TFLite
    model the float one's 32 of 32 (weights rounded to 4 bits before the int8 conversion: 25), the
    int8 SavedModel and `Translator(int8=True)` 31 of 32 each. The 30-step `trained` model this
    was measured on before says nothing to the test split (empty translations), so its int8 model
    agreed with the float one by default."""
    model, tokenizer, _ = load_model(translating.model_dir)
    paths = export_tensorflow(model, tokenizer, str(tmp_path / "export"), log=lambda message: None)
    source_ids = padded_source_ids(Translator(model, tokenizer), translating.sources)
    calls = [("serving_default", {"source_ids": source_ids})]
    [floats], [int8] = (run_artifact("litert", paths[key], calls) for key in ("tflite", "tflite_int8"))
    [served] = run_artifact("saved_model", paths["saved_model_int8"], [("translate_ids", {"source_ids": source_ids})])
    translations = tokenizer.detokenize(floats["ids"][:, 0]).numpy().tolist()
    references = sum(t.decode("utf-8") == r for t, r in zip(translations, translating.targets))
    assert references >= 0.8 * len(translations), f"the float model gives {references} references"
    for name, outputs in ("tflite_int8", int8), ("saved_model_int8", served):
        same = sum(np.array_equal(a, b) for a, b in zip(outputs["ids"][:, 0], floats["ids"][:, 0]))
        assert same >= 0.9 * len(translations), f"{same} of {len(translations)} {name} best hypotheses equal float's"
    python = Translator(model, tokenizer, int8=True).translate(translating.sources)
    same = sum(a == b.decode("utf-8") for a, b in zip(python, translations))
    assert same >= 0.9 * len(translations), f"{same} of {len(translations)} int8 translations equal float's"


@probe
def text_tflite_calls(exported):
    return [("litert_text", "tflite_text", [("serving_default", {"text": texts(exported.sentences[:5] + [""])})])]


@pytest.mark.slow
def test_text_tflite_ids_equal_the_saved_model(exported, probed):
    sentences = exported.sentences[:5] + [""]
    [outputs] = probed[text_tflite_calls]
    want = beam_search(exported.model, exported.source_ids(sentences[:5]))
    length = want.ids.shape[2]
    assert_same_beams(
        outputs[0]["ids"][:5, :, :length], want.ids.numpy(), outputs[0]["scores"][:5], want.scores.numpy()
    )
    assert not outputs[0]["ids"][5].any()  # no tokens: nothing generated
    assert (
        exported.tokenizer.detokenize(outputs[0]["ids"][:5, 0]).numpy().tolist()
        == texts(exported.translator.translate(sentences[:5])).tolist()
    )


HOSTILE = [
    "",
    "   ",
    "In the beginning " * 600,  # ~10,000 characters
    "\x00\x01\x02\x1b[31m\t\r\n\x7f",
    "🦜🔥 God ∑ Gott 神 الله Бог",
    b"\xff\xfe invalid \xc3\x28 utf-8",
]


@probe
def hostile_calls(exported):
    calls = [
        ("serving_default", {"text": texts(HOSTILE)}),
        ("serving_default", {"text": texts([])}),
        ("serving_default", {"text": texts(exported.sentences[:8] * 32)}),
    ]
    return [("saved_model", "saved_model", calls)]


@pytest.mark.slow
def test_hostile_input_through_serving_default(exported, probed):
    assert len(HOSTILE[2]) > 9000
    [outputs] = probed[hostile_calls]
    assert [len(o["translation"]) for o in outputs] == [len(HOSTILE), 0, 256]
    assert [len(o["score"]) for o in outputs] == [len(HOSTILE), 0, 256]
    hostile = outputs[0]
    assert hostile["translation"][0] == b"" and hostile["translation"][1] == b""
    config = exported.model.config
    pieces = sentencepiece.SentencePieceProcessor(model_proto=exported.tokenizer.model_proto)
    longest_piece = max(len(pieces.id_to_piece(i).encode("utf-8")) for i in range(config.vocab_size))
    for text, translation in zip(HOSTILE, hostile["translation"]):
        translation.decode("utf-8")  # valid UTF-8 out, whatever came in
        source_tokens = min(len(text), config.max_length - 1) + 1
        limit = int(decode_limits(np.ones((1, source_tokens), np.int32), config.max_length)[0])
        assert len(translation) <= limit * longest_piece
    assert np.all(np.isfinite(hostile["score"]))


def constrained_phrases():
    """The fixture's test sources, and for each its reference's phrases (test_constraints')."""
    from test_constraints import reference_phrases

    sources, references = read_pairs(str(FIXTURE), "test")
    return sources, reference_phrases(references)


@probe
def constrained_calls(exported):
    sources, phrases = constrained_phrases()
    grid = texts([p for row in phrases for p in row + [""] * (3 - len(row))]).reshape(len(phrases), 3)  # "": none
    hostile_grid = (
        texts(HOSTILE[1:] + HOSTILE[:1] + HOSTILE[2:] + HOSTILE[:2] + HOSTILE[3:] + HOSTILE[:3])
        .reshape(3, len(HOSTILE))
        .T
    )  # [6, 3]: every hostile value in every column
    calls = [
        ("translate_constrained", {"text": texts(sources), "constraints": grid}),
        ("translate_constrained", {"text": texts(HOSTILE), "constraints": hostile_grid}),
        ("translate_constrained", {"text": texts([]), "constraints": np.zeros((0, 2), object)}),
        ("translate_constrained", {"text": texts(HOSTILE[2:3]), "constraints": texts(HOSTILE[2:3])[None]}),
        ("translate_constrained", {"text": texts(sources * 32), "constraints": np.tile(grid, (32, 1))}),
    ]
    return [("saved_model", "saved_model", calls), ("session", "saved_model", calls[:1])]  # and as the server runs it


@pytest.mark.slow
def test_translate_constrained_holds_the_phrases_and_serves_hostile_input(exported, probed):
    """`translate_constrained` in a fresh process: every translation holds its reference phrases, as
    the Python translator's do; hostile text and phrases (empty, huge, invalid UTF-8) and batches of
    0, 1 and 256 give a batch of valid UTF-8 and finite scores."""
    sources, phrases = constrained_phrases()
    outputs, served = probed[constrained_calls]
    translations = decoded(outputs[0]["translation"])
    assert translations == exported.translator.translate(sources, constraints=phrases)
    assert all(p in text for text, row in zip(translations, phrases) for p in row)
    assert [len(o["translation"]) for o in outputs[1:]] == [len(HOSTILE), 0, 1, 32 * len(sources)]
    for output in outputs[1:]:
        decoded(output["translation"])  # valid UTF-8 out, whatever came in
        assert np.all(np.isfinite(output["score"]))
    assert decoded(outputs[4]["translation"]) == translations * 32
    assert decoded(served[0]["translation"]) == translations


def kit_module(name):
    """A client example of export/ as a module."""
    import importlib.util

    path = os.path.join(os.path.dirname(__file__), os.pardir, "export", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"export_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@probe
def client_calls(exported):
    """The REST body and the gRPC PredictRequest of export/'s clients, fed to the signature as the server would."""
    sentences = exported.sentences[:3]
    body = json.loads(json.dumps(kit_module("rest_client").request_body(sentences)))
    request = kit_module("grpc_client").predict_request(sentences)
    assert request.model_spec.signature_name == body["signature_name"] == "serving_default"
    calls = [
        (body["signature_name"], {"text": texts(body["instances"])}),
        (request.model_spec.signature_name, {k: tf.make_ndarray(v) for k, v in request.inputs.items()}),
    ]
    return [("session", "saved_model", calls)]


@pytest.mark.slow
def test_client_payloads_run_through_the_served_signature(exported, probed):
    """The REST body and the gRPC PredictRequest of export/'s clients (client_calls), as the server is fed them."""
    sentences = exported.sentences[:3]
    [outputs] = probed[client_calls]
    expected = exported.translator.translate(sentences)
    assert [decoded(o["translation"]) for o in outputs] == [expected, expected]


@pytest.mark.slow
def test_litert_client_translates_like_the_python_model(exported):
    client = kit_module("litert_client")
    sentences = exported.sentences[:4]
    got = client.translate(sentences, exported.out)  # max_length and the reserved ids from translator.json
    assert [t for t, _ in got] == exported.translator.translate(sentences)


@probe
def too_long_calls(exported):
    max_length = exported.model.config.max_length
    tokens = exported.tokenizer.tokenize(["In the beginning God created the heavens and the earth. " * 20]).numpy()[0]
    assert len(tokens) > max_length
    long = np.append(tokens[: max_length + 20], 2)[None].astype(np.int32)  # [1, max_length + 21]
    cut = np.append(tokens[: max_length - 1], 2)[None].astype(np.int32)  # [1, max_length]
    return [("litert", "tflite", [("serving_default", {"source_ids": long}), ("serving_default", {"source_ids": cut})])]


@pytest.mark.slow
def test_too_long_ids_are_truncated_in_the_tflite_model(probed):
    """More than max_length ids: cut to max_length - 1, then EOS (as text is), not a LiteRT resize error."""
    [outputs] = probed[too_long_calls]
    np.testing.assert_array_equal(outputs[0]["ids"], outputs[1]["ids"])
    np.testing.assert_array_equal(outputs[0]["scores"], outputs[1]["scores"])


BLOCK_SERVING_API = """
import sys
sys.modules["tensorflow_serving"] = None  # as on an install without the [export] extra: importing it fails
from keras_transformer.cli.main import main
from keras_transformer.special_tokens import PAD_ID
status = main(sys.argv[1:])
assert "tensorflow_serving" not in sys.modules or sys.modules["tensorflow_serving"] is None
sys.exit(status)
"""


@pytest.mark.slow
def test_export_again_in_bfloat16_without_the_serving_api_adds_a_bfloat16_version_2(exported, tmp_path):
    """One export for three properties: exporting into an existing OUT adds version 2, even where
    tensorflow-serving-api is missing; `--dtype bfloat16` serves the bf16 model; and `--no-tflite`
    writes no TFLite model (the SavedModels only, half the time) and removes the earlier export's."""
    from tensorflow_serving.apis import prediction_log_pb2

    out = str(tmp_path / "export")
    shutil.copytree(exported.out, out)
    args = ["export", "--model-dir", exported.model_dir, "--out", out, "--dtype", "bfloat16", "--no-tflite"]
    command = [sys.executable, "-c", BLOCK_SERVING_API, *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "ModuleNotFoundError" not in result.stderr
    for name in ("translator", "translator_ids"):
        assert sorted(os.listdir(os.path.join(out, "saved_model", name))) == ["1", "2"]
    assert f"saved_model\t{os.path.join(out, 'saved_model', 'translator', '2')}" in result.stdout.splitlines()
    assert "tflite" not in result.stdout and not [name for name in os.listdir(out) if name.endswith(".tflite")]
    with open(os.path.join(out, "translator.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["models"] == {} and metadata["saved_model_dtype"] == "bfloat16"

    def warmup(version):
        path = os.path.join(out, "saved_model", "translator", version, "assets.extra", "tf_serving_warmup_requests")
        return [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]

    assert warmup("2") == warmup("1") and len(warmup("2")) == 1

    sentences = exported.sentences[:4]
    (served,) = run_artifact(
        "saved_model",
        os.path.join(out, "saved_model", "translator", "2"),
        [("serving_default", {"text": texts(sentences)})],
    )
    bf16 = Translator(exported.model.with_dtype("bfloat16"), exported.tokenizer).translate_nbest(sentences, n=1)
    float32 = exported.translator.translate_nbest(sentences, n=1)
    assert decoded(served["translation"]) == [hypotheses[0][0] for hypotheses in bf16]
    np.testing.assert_allclose(served["score"], [hypotheses[0][1] for hypotheses in bf16], rtol=1e-5)
    assert not np.allclose(served["score"], [hypotheses[0][1] for hypotheses in float32], rtol=1e-5, atol=0)


# export --check: every artifact's translations of held-out pairs against the checkpoint's.


@pytest.mark.slow
def test_the_export_records_its_model_dir_and_passes_its_own_check(exported, capsys):
    """Also the serving contract check's verdict, with the default sample (100: all 8 test pairs), and
    the text SavedModels' `translate_markup` against `Translator.translate(..., markup=True)`."""
    model_dir, out = exported.model_dir, exported.out
    with open(os.path.join(out, "translator.json"), encoding="utf-8") as f:
        metadata = json.load(f)
    assert metadata["model_dirs"] == [os.path.abspath(model_dir)] and metadata["saved_model_dtype"] == "float32"
    capsys.readouterr()
    assert main(["export", "--check", out]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"{out}: every SavedModel meets the TF Serving contract"
    checked = {line.split(": ")[0]: line.split(": ")[1] for line in lines[1:]}
    assert len(checked) == 7, lines  # text, ids and int8 SavedModels, TFLite float and int8, 2 translate_markup
    assert [artifact for artifact in checked if artifact.endswith(" translate_markup")] == [
        f"{exported.paths['saved_model']} translate_markup",
        f"{exported.paths['saved_model_int8']} translate_markup",
    ]
    for artifact, verdict in checked.items():
        if "int8" not in artifact:  # float32 on our search: the checkpoint's outputs
            assert verdict.startswith("100% identical, BLEU"), (artifact, verdict)


@pytest.mark.slow
def test_the_int8_saved_model_is_held_to_the_bleu_bound_only(exported):
    """As the int8 TFLite model: its translations may differ from the checkpoint's (rounded weights),
    so the check bounds its BLEU drop, not its share of identical outputs; the float ones both."""
    with open(exported.paths["metadata"], encoding="utf-8") as f:
        metadata = json.load(f)
    held = {path: runner[1] for path, runner in _runners(exported.out, exported.translator, metadata).items()}
    assert held[exported.paths["saved_model_int8"]] is False and held[exported.paths["tflite_int8"]] is False
    assert held[exported.paths["saved_model"]] is True and held[exported.paths["saved_model_ids"]] is True


@pytest.mark.slow
def test_an_artifact_with_other_weights_fails_the_check_in_one_line(exported, tmp_path, capsys):
    """An export of one artifact, the ids SavedModel, with other weights: it meets the contract
    (servable), and the check fails in one line naming it. That every good artifact passes (the
    same 8 test pairs) is the test above's, which runs the whole check; its other artifacts here
    would only repeat that."""
    model_dir, out = exported.model_dir, exported.out
    damaged = str(tmp_path / "export")
    os.makedirs(os.path.join(damaged, "saved_model", "translator_ids"))
    shutil.copy(os.path.join(out, "translator.json"), damaged)  # the model dir to check against
    [version] = os.listdir(os.path.join(out, "saved_model", "translator_ids"))
    path = os.path.join(damaged, "saved_model", "translator_ids", version)
    untrained = Transformer(ModelDir(model_dir).read()["model"])  # servable, same shapes, wrong weights
    untrained.build()
    TranslationModule(untrained).save(path)
    capsys.readouterr()
    assert main(["export", "--check", damaged, "--sample", "20"]) == 1
    problems = capsys.readouterr().err.splitlines()
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"keras-transformer: quality: {path}: ")
    assert "of its translations equal the checkpoint's (at least 90% expected)" in problems[0]


@pytest.mark.slow
def test_every_architecture_option_exports_to_the_saved_model_and_tflite(tokenizer, tmp_path):
    """A model with every architecture option (a 3-layer encoder, a 1-layer decoder, swish, Marian's
    sinusoids, an output bias, the zero start embedding): the ids-only SavedModel, reloaded, and
    its TFLite model (builtin ops only) give the Python beam search's beams."""
    config = TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, max_length=24, **ARCHITECTURE_OPTIONS)
    model = Transformer(config)
    model.build()
    scramble(model)  # large random weights: choices that vary from step to step
    sources = sorted(read_pairs(str(FIXTURE), "test")[0], key=len)[:4]  # none cut to max_length
    rows = Translator(model, tokenizer).source_ids(sources)
    source_ids = np.zeros((len(rows), max(map(len, rows))), np.int32)
    for i, row in enumerate(rows):
        source_ids[i, : len(row)] = row
    want = beam_search(model, source_ids)
    module = TranslationModule(model)
    module.save(str(tmp_path / "saved_model"))
    served = tf.saved_model.load(str(tmp_path / "saved_model")).signatures["serving_default"]
    got = served(source_ids=tf.constant(source_ids))
    assert_same_beams(got["ids"].numpy(), want.ids.numpy(), got["scores"].numpy(), want.scores.numpy())
    (flatbuffer,) = tflite_models(module.translate_ids, IDS_SPEC)
    runner = Interpreter(model_content=flatbuffer).get_signature_runner("serving_default")
    lite = runner(source_ids=source_ids)
    assert_same_beams(lite["ids"], want.ids.numpy(), lite["scores"], want.scores.numpy())
    assert len(np.unique(want.ids.numpy())) > 5  # not one token repeated


def test_the_quality_tolerances():
    exact = ArtifactQuality("a", identical=0.8, bleu=10.0, bleu_drop=0.1, exact=True)
    assert exact.problem(0.9, 1.0) and exact.problem(0.8, 1.0) is None
    reduced = ArtifactQuality("b", identical=0.1, bleu=8.0, bleu_drop=1.5, exact=False)
    assert reduced.problem(0.9, 2.0) is None and "1.50 below the checkpoint's (at most 1.0)" in reduced.problem(
        0.9, 1.0
    )
    assert ArtifactQuality("c", None, None, None, False, "LiteRT is not installed").problem(0.9, 1.0) is None
