"""Where a jitted JAX training step's device time goes, without TensorBoard or its profile plugin
(for `gpu_check_jax.py`; JAX and the standard library only, no TensorFlow).

Two records of the same compiled step are joined:

- the kernels' times, from a `jax.profiler.trace` of a few steps: its `*.xplane.pb`, read by
  `jax.profiler.ProfileData` (jaxlib's own reader of the XSpace protobuf). On a GPU each kernel
  is an event of a "/device:GPU:N" plane, named after the kernel and carrying the HLO
  instruction it runs (stat `hlo_op`, or `hlo_op=` inside a kernel annotation); on a CPU (the
  dry run) XLA's thunks are host events carrying `hlo_op` alike;
- what each HLO instruction computes, from XLA's own dump of the optimised module
  (`dump_flags`: `--xla_dump_to`, the `*after_optimizations.txt` HLO text): every instruction
  and every instruction fused into it carries `metadata={op_name=...}`, JAX's name stack of the
  op, where Keras puts each layer's name (`jax.named_scope` in the JAX backend's `name_scope`),
  forward and backward alike ("transpose(jvp(transformer))/decoder/layer_0/self_attention/...").

`summarise` adds the kernels' times by part of the model (`PARTS`); a kernel (a fusion of several
ops) counts toward one part: when it computes a matmul, the matmul's; otherwise the first part of
`FUSED_PRIORITY` that any of its ops belongs to. Kernels that overlap on several streams are
added, so the parts may sum to more than a step's wall time; the gap between the device's busy
time and the step's wall time is time the device waited (host work, launches).
"""

from __future__ import annotations

import collections
import glob
import os
import re

PARTS = {
    "matmuls": "the weight matrices of attention (W^Q, W^K|W^V, W^O) and the feed-forward network (W_1, W_2): "
    "their dots, bias adds and ReLU, forward and backward",
    "attention": "Q K^T, the mask and weights x V of every attention layer (Eq. 1), the softmax aside",
    "softmax": "the attention weights' softmax (Eq. 1)",
    "layer_norm": "LayerNorm (with what XLA fused into it: residual adds)",
    "output_layer": "the output projection x E^T (§3.4), the V-wide logits and the label-smoothed loss over them",
    "dropout": "dropout's masks (random bits) and products",
    "optimizer": "Adam's update of every weight",
    "other": "the rest: embedding lookup and its gradient, positional encoding, casts, copies, unnamed kernels",
}
DOT_PRIORITY = ("output_layer", "attention", "matmuls")
FUSED_PRIORITY = ("softmax", "layer_norm", "output_layer", "dropout", "optimizer", "attention", "matmuls")
LINEAR_LAYERS = ("query", "key_value", "output", "inner", "outer")  # keras_transformer.layers' Linear sublayers
DOT_OPCODES = ("dot", "convolution")
SOFTMAX_PRIMITIVES = ("reduce_max", "max", "exp", "reduce_sum", "sub", "div", "neg")
LOGITS_PRIMITIVES = ("dot_general", "convert_element_type", "add", "add_any", "transpose")
GEMM_TARGET = re.compile(r"gemm|matmul|cublas|triton", re.IGNORECASE)


def dump_flags(folder: str) -> str:
    """XLA_FLAGS that dump the HLO text of the training step's module (Keras' jitted
    `one_train_step`) to `folder`; set before JAX initialises its backend."""
    return f"--xla_dump_to={folder} --xla_dump_hlo_as_text --xla_dump_hlo_module_re=.*train.*"


def _key(name: str) -> str:
    """An instruction's name as kernel names spell it ("loop_add_fusion.3" -> "loop_add_fusion_3")."""
    return re.sub(r"[.\-]", "_", name.lstrip("%"))


_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([^\s(=]+)\s*(?:\(.*\)\s*->.*)?\{\s*$")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?([^\s=]+)\s*=\s*(.*)$")
_OPCODE = re.compile(r"\s([a-z][a-z0-9\-]*)\(")
_OP_NAME = re.compile(r'op_name="([^"]*)"')
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_TARGET = re.compile(r'custom_call_target="([^"]*)"')


def parse_hlo(text: str) -> dict[str, dict]:
    """{instruction name: {"opcode", "op_names": [op_name of it and of every op fused into it],
    "dot": whether it runs a matmul}} of one module's HLO text; also keyed by `_key(name)`."""
    computations: dict[str, list[tuple[str, str, str, list[str], str]]] = {}
    current = None
    for line in text.splitlines():
        if line.startswith("HloModule"):
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            name, rest = instruction.groups()
            opcode = _OPCODE.search(" " + rest)
            op_name = _OP_NAME.search(rest)
            target = _TARGET.search(rest)
            computations[current].append(
                (
                    name,
                    opcode.group(1) if opcode else "",
                    op_name.group(1) if op_name else "",
                    _CALLS.findall(rest),
                    target.group(1) if target else "",
                )
            )
            continue
        header = _COMPUTATION.match(line)
        if header:
            current = header.group(1)
            computations[current] = []

    def contents(computation: str, seen: set) -> tuple[list[str], bool]:
        op_names, dot = [], False
        if computation in seen:
            return op_names, dot
        seen.add(computation)
        for _, opcode, op_name, calls, target in computations.get(computation, []):
            op_names += [op_name] if op_name else []
            dot |= opcode in DOT_OPCODES or bool(opcode == "custom-call" and GEMM_TARGET.search(target))
            for called in calls:
                inner, inner_dot = contents(called, seen)
                op_names, dot = op_names + inner, dot or inner_dot
        return op_names, dot

    instructions = {}
    for body in computations.values():
        for name, opcode, op_name, calls, target in body:
            op_names, dot = [op_name] if op_name else [], opcode in DOT_OPCODES
            dot |= bool(opcode == "custom-call" and GEMM_TARGET.search(target))
            dot |= bool(GEMM_TARGET.search(name)) and opcode == "fusion"  # a Triton or cuBLAS gemm fusion
            for called in calls:
                inner, inner_dot = contents(called, set())
                op_names, dot = op_names + inner, dot or inner_dot
            info = {"opcode": opcode, "op_names": op_names, "dot": dot}
            instructions[name] = info
            instructions.setdefault(_key(name), info)
    return instructions


def dumped_modules(folder: str) -> list[dict[str, dict]]:
    """`parse_hlo` of every optimised module XLA dumped into `folder` (`dump_flags`)."""
    paths = sorted(glob.glob(os.path.join(folder, "*after_optimizations.txt")))
    return [parse_hlo(open(path, encoding="utf-8").read()) for path in paths]


def scopes(op_name: str) -> list[str]:
    """The name scopes of an op_name, JAX's transformations peeled off, the primitive dropped:
    "jit(step)/transpose(jvp(transformer))/decoder/layer_0/query/dot_general" ->
    ["step", "transformer", "decoder", "layer_0", "query"]."""
    names = [re.sub(r"^(?:[\w\-]+\()+([^()]*)\)+$", r"\1", part) for part in op_name.split("/")]
    return names[:-1]


def part_of_op(op_name: str, model_name: str) -> str:
    """The part (`PARTS`) that one op of the training step belongs to, from its name scopes and its
    primitive. Inside an attention layer but outside its Linear sublayers, the softmax's primitives
    (max, exp, sum, subtract, divide: forward and backward) are the softmax, the rest (the einsums,
    the mask) attention. The model's own ops (its scope: its name, or "" as Keras 3.15's JAX
    trainer names it) that compute the logits are the output layer; its masks (ids != pad) are not."""
    names, primitive = scopes(op_name), op_name.rsplit("/", 1)[-1]
    if any("cross_entropy" in name for name in names):
        return "output_layer"
    if any(name.startswith("adam") or "optimizer" in name for name in names):
        return "optimizer"
    for rule in ("softmax", "layer_norm", "dropout"):
        if any(rule in name for name in names):
            return rule
    if any(name in LINEAR_LAYERS for name in names):
        return "matmuls"
    if any(name.endswith("attention") for name in names):
        return "softmax" if primitive in SOFTMAX_PRIMITIVES else "attention"
    if len(names) > 1 and names[-1] in (model_name, "") and primitive in LOGITS_PRIMITIVES:
        return "output_layer"  # x E^T (dot_general), the logits' cast and bias, their gradients
    return "other"


def part_of_kernel(info: dict | None, model_name: str) -> str:
    """A kernel's part: a matmul's by `DOT_PRIORITY`, else by `FUSED_PRIORITY`, else "other"."""
    if info is None:
        return "other"
    parts = {part_of_op(op_name, model_name) for op_name in info["op_names"]}
    for part in DOT_PRIORITY if info["dot"] else FUSED_PRIORITY:
        if part in parts:
            return part
    return "matmuls" if info["dot"] else "other"


def _stats(event) -> dict:
    stats = event.stats
    return dict(stats.items() if hasattr(stats, "items") else stats)


def _hlo_op(event) -> str | None:
    """The HLO instruction an event ran: its `hlo_op` stat, or `hlo_op=` in an annotation stat."""
    stats = _stats(event)
    if "hlo_op" in stats:
        return str(stats["hlo_op"])
    for value in stats.values():
        found = re.search(r"hlo_op=([^,#\s]+)", str(value))
        if found:
            return found.group(1)
    return None


SKIPPED_LINES = ("XLA Modules", "XLA Ops", "Steps", "Framework", "TensorFlow", "Source", "XLA TraceMe")


def kernel_times(xplane_path: str) -> tuple[dict[str, float], str]:
    """({HLO instruction or kernel name: seconds in all}, where: "device" or "host") of a trace.
    Device planes when they hold kernels (a GPU); else host events that carry an `hlo_op` (XLA's
    CPU thunks)."""
    from jax.profiler import ProfileData

    data = ProfileData.from_file(xplane_path)
    planes = list(data.planes)
    times: dict[str, float] = collections.defaultdict(float)
    for plane in planes:
        if plane.name.startswith("/device:") and "CPU" not in plane.name:
            for line in plane.lines:
                if line.name.startswith(SKIPPED_LINES):
                    continue
                for event in line.events:
                    times[_hlo_op(event) or event.name] += event.duration_ns / 1e9
    if times:
        return dict(times), "device"
    for plane in planes:
        if plane.name.startswith("/host:"):
            for line in plane.lines:
                for event in line.events:
                    op = _hlo_op(event)
                    if op is not None:
                        times[op] += event.duration_ns / 1e9
    return dict(times), "host"


def summarise(xplane_path: str, dump_folder: str, steps: int, model_name: str, top: int = 12) -> dict:
    """Milliseconds per step by part (`PARTS`), their shares of the busy time, and the `top`
    kernels, for `steps` profiled steps of one compiled step (the dumped module that names the
    most of the traced kernels)."""
    times, where = kernel_times(xplane_path)
    modules = dumped_modules(dump_folder) or [{}]
    module = max(modules, key=lambda instructions: sum(t for op, t in times.items() if _key(op) in instructions))
    parts = dict.fromkeys(PARTS, 0.0)
    kernels = []
    for op, seconds in times.items():
        info = module.get(op) or module.get(_key(op))
        part = part_of_kernel(info, model_name)
        parts[part] += seconds
        kernels.append((seconds, op, part, info))
    busy = sum(parts.values())
    named = sum(seconds for seconds, _, _, info in kernels if info is not None)
    kernels.sort(key=lambda kernel: kernel[0], reverse=True)
    return {
        "events_from": where,
        "profiled_steps": steps,
        "busy_ms_per_step": round(1000 * busy / steps, 3),
        "parts_ms_per_step": {part: round(1000 * seconds / steps, 3) for part, seconds in parts.items()},
        "parts_share": {part: round(seconds / busy, 3) if busy else 0.0 for part, seconds in parts.items()},
        "share_of_time_in_named_kernels": round(named / busy, 3) if busy else 0.0,
        "top_kernels": [
            {
                "hlo_op": op,
                "part": part,
                "ms_per_step": round(1000 * seconds / steps, 3),
                "op_name": (info["op_names"] or [""])[0][-160:] if info else None,
            }
            for seconds, op, part, info in kernels[:top]
        ],
        "parts": PARTS,
    }
