"""The serving contract of an exported SavedModel, checked the way TF Serving will use it.

For every SavedModel under `OUT/saved_model/<name>/<version>/`: a `serve` meta graph; every
signature's method is `tensorflow/serving/predict`; every input and output has a batch
dimension (rank >= 1, first dimension unknown) and no resource or variant dtype; no PyFunc
(Python callbacks cannot run in the model server); every op is registered by TensorFlow or
tensorflow-text (the ops TF Serving links). Imports only tensorflow and tensorflow_text.
"""

from __future__ import annotations

import glob
import os

import tensorflow_text  # noqa: F401  registers the tensorflow-text ops that the model server links
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

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


def check_export(out: str) -> list[str]:
    """The contract violations of every SavedModel that `export` wrote to `out`."""
    paths = saved_models(out)
    if not paths:
        return [f"{out}: no SavedModel under saved_model/<name>/<version>/"]
    return [problem for path in paths for problem in check_saved_model(path)]
