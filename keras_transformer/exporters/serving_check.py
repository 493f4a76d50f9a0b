"""The serving contract of an exported SavedModel, checked the way TF Serving will use it.

For every SavedModel under `OUT/saved_model/<name>/<version>/`: a `serve` meta graph; every
signature's method is `tensorflow/serving/predict`; every input and output has a batch
dimension (rank >= 1, first dimension unknown) and no resource or variant dtype; no PyFunc
(Python callbacks cannot run in the model server); every op is registered by TensorFlow or
tensorflow-text (the ops TF Serving links). Then every signature serves hostile inputs (`HOSTILE`:
empty strings, a huge string, control characters, invalid UTF-8; batches of 0, 1 and 64; a
[B, C] string input, such as `translate_constrained`'s phrases, three of them per row; a
multilingual model's `translate_to` also gets known and unknown target languages, in batches of
0, 1 and 256; `translate_document`, whose huge string is many sentences, batches of 0, 1 and 8) the way
the model server runs it (the tf.compat.v1 loader and `Session.run` with the signature's tensor
names): no error, every output's first dimension the batch's, strings valid UTF-8, no NaN.
Imports only tensorflow, tensorflow_text and NumPy (and the package's reserved ids).
"""

from __future__ import annotations

import glob
import itertools
import os

import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tensorflow-text ops that the model server links
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

from keras_transformer.special_tokens import EOS_ID, PAD_ID

PREDICT_METHOD = "tensorflow/serving/predict"
PY_FUNC_OPS = frozenset({"PyFunc", "PyFuncStateless", "EagerPyFunc"})
OPAQUE_DTYPES = frozenset({types_pb2.DT_RESOURCE, types_pb2.DT_VARIANT})


def _ops(graph_def) -> set[str]:
    ops = {node.op for node in graph_def.node}
    for function in graph_def.library.function:
        ops.update(node.op for node in function.node_def)
    return ops - {function.signature.name for function in graph_def.library.function}


def _tensor_problems(where: str, info) -> list[str]:
    problems = []
    if info.dtype in OPAQUE_DTYPES:
        problems.append(f"{where} has dtype {types_pb2.DataType.Name(info.dtype)}")
    shape = info.tensor_shape
    if shape.unknown_rank or not shape.dim:
        problems.append(f"{where} has no batch dimension (shape {'unknown' if shape.unknown_rank else 'scalar'})")
    elif shape.dim[0].size != -1:
        problems.append(f"{where} has a fixed first dimension {shape.dim[0].size}, not a batch dimension")
    return problems


HOSTILE = (
    "",
    "   ",
    "In the beginning " * 600,  # ~10,000 characters, far past any max_length
    "\x00\x01\x02\x1b[31m\t\r\n\x7f",
    "🦜🔥 God ∑ Gott 神 الله Бог",
    b"\xff\xfe invalid \xc3\x28 utf-8",
)
HOSTILE_IDS = ([EOS_ID], [4, 5, 6, EOS_ID], [], [4] * 1000 + [EOS_ID])  # empty, short, all pad, too long
# A target language per sentence: common known ones, unknown ones, empty, a token, junk, invalid UTF-8.
HOSTILE_LANGS = ("de", "fr", "xx", "", "<2de>", "de " * 3000, "\x00fr", b"\xff\xfe fr")
# Per-text settings (translate_with_options): in range, at their edges and far out of them.
HOSTILE_NUMBERS = {
    tf.int32: (4, 1, 0, -1, 2**31 - 1, 64, 65),
    tf.float32: (0.6, 0.0, -1.0, float("nan"), float("inf"), 1e30, 1.0),
}
BATCHES = (0, 1, 64)
SIGNATURE_BATCHES = {
    "translate_to": (0, 1, 256),  # one request mixing every language and failure
    "translate_document": (0, 1, 8),  # the huge string is ~15 sentences at max_length 128: 8 documents, not 64
}


def hostile_input(info, size: int, shift: int, key: str = "") -> np.ndarray:
    """A batch of `size` hostile values for a signature input `key` (string [B], int32 ids [B, S],
    or a number per text [B]), the list's order rotated by `shift`, so that two inputs of a signature pair different
    values; a batch of one is the huge string (the longest ids; for a target language, "fr"). A
    string input of rank 2 ([B, C]: phrases per text) gets three values per row, each row's
    rotated by one more."""
    dtype = tf.dtypes.as_dtype(info.dtype)
    if dtype != tf.string and len(info.tensor_shape.dim) == 1:  # [B] numbers: a setting per text
        numbers = HOSTILE_NUMBERS[dtype]
        return np.array(list(itertools.islice(itertools.cycle(numbers[shift % len(numbers) :] + numbers), size)),
                        dtype.as_numpy_dtype)  # fmt: skip
    values = (HOSTILE[2:3], HOSTILE_IDS[3:]) if size == 1 else (HOSTILE, HOSTILE_IDS)
    values = values[0] if info.dtype == types_pb2.DT_STRING else values[1]
    if key == "target_lang":
        values = HOSTILE_LANGS[1:2] if size == 1 else HOSTILE_LANGS
    rows = list(itertools.islice(itertools.cycle(values[shift % len(values) :] + values), size))
    if info.dtype == types_pb2.DT_STRING:
        strings = np.array([row.encode("utf-8") if isinstance(row, str) else row for row in rows], dtype=object)
        if len(info.tensor_shape.dim) == 2:  # [B, C]
            return np.stack([np.roll(strings, -column) for column in range(3)], axis=1)  # [B, 3]
        return strings
    batch = np.full((size, max([0, *map(len, rows)])), PAD_ID, tf.dtypes.as_dtype(info.dtype).as_numpy_dtype)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


def _output_problems(where: str, size: int, outputs: dict) -> list[str]:
    problems = []
    for key, value in sorted(outputs.items()):
        if value.shape[:1] != (size,):
            problems.append(f"{where}: output {key!r} has shape {value.shape}, not a batch of {size}")
        elif value.dtype == object:
            try:
                [text.decode("utf-8") for text in value.ravel()]
            except UnicodeDecodeError:
                problems.append(f"{where}: output {key!r} is not valid UTF-8")
        elif np.issubdtype(value.dtype, np.floating) and np.isnan(value).any():
            problems.append(f"{where}: output {key!r} has NaN")
    return problems


def _first_cause(message: str) -> str:
    """The informative line of a TensorFlow error message (not its "Graph execution error:" header)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()]
    return next((line for line in lines if not line.endswith("execution error:")), message.strip())


def serve_saved_model(path: str) -> list[str]:
    """The problems of every signature of the SavedModel at `path` on hostile inputs, run as the
    model server runs them (an empty list: each served every batch)."""
    problems = []
    with tf.compat.v1.Session(graph=tf.Graph()) as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
        for name, signature in sorted(meta_graph.signature_def.items()):
            if name.startswith("__"):
                continue
            fetch = {key: info.name for key, info in signature.outputs.items()}
            for size in SIGNATURE_BATCHES.get(name, BATCHES):
                where = f"{path}: signature {name} on a batch of {size} hostile inputs"
                inputs = sorted(signature.inputs.items())
                feed = {info.name: hostile_input(info, size, shift, key) for shift, (key, info) in enumerate(inputs)}
                try:
                    outputs = session.run(fetch, feed_dict=feed)
                except tf.errors.OpError as error:
                    problems.append(f"{where} failed: {_first_cause(error.message)}")
                    continue
                problems += _output_problems(where, size, outputs)
    return problems


def check_saved_model(path: str) -> list[str]:
    """The contract violations of the SavedModel at `path` (an empty list: servable)."""
    proto = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        proto.ParseFromString(f.read())
    serve = [m for m in proto.meta_graphs if "serve" in m.meta_info_def.tags]
    if not serve:
        return [f"{path}: no meta graph tagged 'serve'"]
    meta_graph = serve[0]
    problems = []
    if "serving_default" not in meta_graph.signature_def:
        problems.append(f"{path}: no serving_default signature")
    for name, signature in sorted(meta_graph.signature_def.items()):
        if name.startswith("__"):  # TF's internal `__saved_model_init_op`
            continue
        if signature.method_name != PREDICT_METHOD:
            problems.append(f"{path}: signature {name} has method {signature.method_name!r}, not {PREDICT_METHOD!r}")
        for kind, tensors in (("input", signature.inputs), ("output", signature.outputs)):
            for key, info in sorted(tensors.items()):
                problems += _tensor_problems(f"{path}: signature {name} {kind} {key!r}", info)
    ops = _ops(meta_graph.graph_def)
    for op in sorted(ops & PY_FUNC_OPS):
        problems.append(f"{path}: op {op} calls back into Python, which the model server cannot")
    for op in sorted(ops - PY_FUNC_OPS):
        if op_def_registry.get(op) is None:
            problems.append(f"{path}: op {op} is registered by neither TensorFlow nor tensorflow-text")
    return problems


def saved_models(out: str) -> list[str]:
    """Every `OUT/saved_model/<name>/<version>/` directory."""
    return sorted(os.path.dirname(p) for p in glob.glob(os.path.join(out, "saved_model", "*", "*", "saved_model.pb")))


def check_export(out: str, serve: bool = True) -> list[str]:
    """The contract violations of every SavedModel that `export` wrote to `out`; with `serve`,
    also the failures of its signatures on hostile inputs (`serve_saved_model`), for a
    SavedModel that meets the static contract."""
    paths = saved_models(out)
    if not paths:
        return [f"{out}: no SavedModel under saved_model/<name>/<version>/"]
    problems = []
    for path in paths:
        static = check_saved_model(path)
        problems += static or (serve_saved_model(path) if serve else [])
    return problems
