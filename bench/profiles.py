"""Where the time goes, one subcommand per question; each prints one JSON line.

`step`: where a training step's time goes: a TensorFlow profiler trace of `--steps` `model.fit` steps
(after warm-up), summarised per op type by self time. Writes the trace for TensorBoard's profile
plugin under `--logdir` and prints one JSON line with the top op types:

    python bench/profiles.py step --workload medium --steps 3 --logdir /tmp/kt-profile

`decode`: where beam search's time goes: a TensorFlow profiler trace of `beam_search` (the `tf.function`
that `Translator`, the SavedModel and TFLite run) on random weights with a forced output length,
one decoding step split by what its ops do, against the FLOPs the step needs. Prints one JSON line:

    python bench/profiles.py decode --models small base --batches 1 32 --logdir /tmp/kt-decode-profile

For every model and batch (beam 4: batch x 4 hypotheses per step), the ops of the search's loop
body (scope `while/`) are split by host self time per step into
- `matmul`: the weight matrices (every `*MatMul*` op: the projections, the feed-forward layers,
  the output projection);
- `attention`: every other op under an attention layer (Q K^T and weights x V einsums, softmax,
  masks, the key/value cache writes, head reshapes);
- `search`: the top-k and the beam bookkeeping (ops of the loop outside the decoder: log-softmax,
  `TopKV2`, gathers of the cache and the beams, the finished set);
- `other_model`: the rest of the decoder (layer norms, residual adds, ReLU, embedding);
and `unattributed`: the wall time of the profiled step minus all its ops' self time (the
executor between ops, the loop's control flow; negative where ops ran concurrently on the
inter-op pool). The per-op overhead is estimated independently: `ops_per_step` (op executions
in the trace's loop body / steps) times the cost of an op that does next to nothing, the
executor's dispatch (`per_op_cost_us`, measured here: a `tf.while_loop` whose body is a chain of
scalar `SquaredDifference` ops, (seconds with k ops - seconds with none) / (k x iterations)) plus the median
op execution's self time in the loop (`median_op_self_us`: most of a step's ops are small
reshapes, slices and bookkeeping), as `per_op_overhead_ms_per_step`. `flops_per_step`
(`flops.decode_step_flops` at the mean position) over the unprofiled step time gives
`achieved_gflops`, against the fp32 matmul rate measured here (`flops.matmul_rate`).
Encoder and setup ops (outside the loop, once per call) are `outside_loop_ms`.

`small` is the `small` preset (vocabulary 8000), `base` the paper's base (32000). Capped at AVX2 on
an AVX-512 CPU (as `decoding.py forced --isa avx2` caps its workers):
`ONEDNN_MAX_CPU_ISA=AVX2 python bench/profiles.py decode`; the line's `isa_caps` names the caps set.

`int8-matmul`: what a decoding step's weight matrices cost in each precision on one thread: our
`Linear` in float32, our `Linear` with int8 weights (`quantize("int8")`: the int8 kernel cast to
float before a float matmul) and Keras' `Dense` with int8 weights (its `quantize("int8")`: the
activations rounded to int8 per row, an int8 x int8 matmul into int32). The int8 layers hold the
float32 layer's weights, so `max_relative_error` is each one's arithmetic against float32's. Each
shape runs in as many distinct copies as a decoding step has of it (at least 2), one after
another, so the weights come from the caches or from memory as in a real step: per decoder layer 6
d x d (self-attention Q K V O, cross-attention Q O) and the feed-forward's two, then the output
projection once. `step_us` adds them up:

    python bench/profiles.py int8-matmul --models small base --rows 4 128
"""

from __future__ import annotations

import collections
import glob
import json
import os
import time

import keras
import numpy as np
import tensorflow as tf
from common import (
    FIRST_TOKEN,
    WORKLOADS,
    command_line,
    emit,
    fit_steps,
    load_average,
    record,
    repeated,
    synthetic_batch,
)
from decode_runners import forbid_eos
from flops import decode_step_flops, matmul_rate
from training import build_ours

from keras_transformer import Transformer, TransformerConfig, beam_search
from keras_transformer.layers.linear import Linear


def op_rows(logdir: str) -> list[tuple[str, str, float, float]]:
    """(op type, op name, executions, self time in microseconds) of every TF op on the host, from
    the trace's framework op stats."""
    from tensorflow.python.profiler.internal import _pywrap_profiler_plugin as plugin

    paths = sorted(glob.glob(f"{logdir}/plugins/profile/*/*.xplane.pb"))[-1:]
    data, ok = plugin.xspace_to_tools_data(paths, "framework_op_stats", {})
    if not ok:
        raise SystemExit(f"cannot read the trace in {logdir}")
    table = json.loads(data if isinstance(data, str) else data.decode())[0]  # Google Charts DataTable
    columns = [c["id"] for c in table["cols"]]
    rows = []
    for row in table["rows"]:
        values = dict(zip(columns, (cell["v"] if cell else None for cell in row["c"])))
        if values.get("host_or_device") == "Host" and values.get("type") not in ("IDLE", None):
            executions, self_us = float(values["occurrences"]), float(values["total_self_time"])
            rows.append((values["type"], values["operation"], executions, self_us))
    return rows


def op_type_self_times(logdir: str) -> dict[str, float]:
    """Self time (microseconds) per TF op type on the host."""
    totals: dict[str, float] = collections.defaultdict(float)
    for op_type, _, _, self_us in op_rows(logdir):
        totals[op_type] += self_us
    return totals


def profiled(run, logdir: str, top: int):
    """Run `run()` under the TensorFlow profiler: the `top` op types by host self time, as
    [(type, microseconds)] largest first, and the self time of all of them."""
    import tensorflow as tf

    tf.profiler.experimental.start(logdir)
    run()
    tf.profiler.experimental.stop()
    totals = op_type_self_times(logdir)
    return sorted(totals.items(), key=lambda item: -item[1])[:top], sum(totals.values())


def step_arguments(parser) -> None:
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--jit-compile", action="store_true")
    parser.add_argument("--logdir", default="/tmp/kt-profile")
    parser.add_argument("--top", type=int, default=15)


def step(args) -> None:
    workload = WORKLOADS[args.workload]
    load_before = load_average()
    model = build_ours(workload, args.jit_compile)
    dataset = repeated(synthetic_batch(workload))
    fit_steps(model, dataset, args.warmup)
    top, everything = profiled(lambda: fit_steps(model, dataset, args.steps), args.logdir, args.top)
    emit(
        record(
            benchmark="profile_step",
            workload=args.workload,
            jit_compile=args.jit_compile,
            steps=args.steps,
            op_self_time_ms_per_step={name: round(us / 1e3 / args.steps, 1) for name, us in top},
            op_self_time_share={name: round(us / everything, 3) for name, us in top},
            logdir=args.logdir,
            load_before=load_before,
        )
    )


MODELS = {
    "small": TransformerConfig.small(vocab_size=8000),
    "base": TransformerConfig.base(vocab_size=32000),
    "tiny": TransformerConfig.tiny(vocab_size=500),  # smoke test
}
PARTS = ("matmul", "attention", "search", "other_model")
ISA_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "XLA_FLAGS")


def part(op_type: str, name: str) -> str:
    """Which part of a decoding step an op of the loop body is (see the module docstring)."""
    if "MatMul" in op_type:
        return "matmul"
    if "attention" in name:
        return "attention"
    if "decoder" in name or "embedding" in name:
        return "other_model"
    return "search"


def weighted_median(pairs: list[tuple[float, float]]) -> float:
    """The median of values given as (value, weight) pairs."""
    pairs, half, seen = sorted(pairs), sum(weight for _, weight in pairs) / 2, 0.0
    for value, weight in pairs:
        seen += weight
        if seen >= half:
            return value
    return 0.0


def per_op_cost_us(ops: int = 200, iterations: int = 50, repeats: int = 5) -> float:
    """The graph executor's cost of one trivial op inside a `tf.while_loop`, in microseconds."""

    def loop(k):
        @tf.function
        def run(x):
            def body(i, x):
                y = tf.cast(i, tf.float32)  # [] changes every iteration: nothing to fold
                for _ in range(k):
                    x = tf.math.squared_difference(x, y)  # a chain of binary ops: nothing to fuse
                return i + 1, x

            return tf.while_loop(lambda i, x: i < iterations, body, (0, x))[1]

        x = tf.constant(0.5)
        run(x).numpy()  # trace
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            run(x).numpy()
            best = min(best, time.perf_counter() - start)
        return best

    return (loop(ops) - loop(0)) / (ops * iterations) * 1e6


def profile(name: str, batch: int, args, logdir: str, per_op_us: float, ceiling_gflops: float) -> dict:
    config = MODELS[name]
    model = Transformer(config)
    model.build()
    forbid_eos(model)
    settings = dict(
        beam_size=args.beam_size, alpha=0.6, length_a=0.0, length_b=args.generate
    )  # the default search, forced length
    rng = np.random.default_rng(0)
    source = rng.integers(FIRST_TOKEN, config.vocab_size, (batch, args.source_length), dtype=np.int32)
    run = lambda: beam_search(model, source, **settings).ids.numpy()  # noqa: E731
    run()  # trace
    start = time.perf_counter()
    run()
    seconds = time.perf_counter() - start
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    run()
    profiled_seconds = time.perf_counter() - start
    tf.profiler.experimental.stop()
    steps = args.generate
    parts, ops, outside_us, per_execution = collections.defaultdict(float), 0.0, 0.0, []
    for op_type, op_name, executions, self_us in op_rows(logdir):
        if op_name.startswith("while/"):
            parts[part(op_type, op_name)] += self_us / steps
            ops += executions / steps
            per_execution.append((self_us / executions, executions))
        else:
            outside_us += self_us
    typical_us = weighted_median(per_execution)
    overhead_ms = ops * (per_op_us + typical_us) / 1e3
    step_ms = (profiled_seconds * 1e6 - outside_us) / steps / 1e3
    parts_ms = {part_name: round(parts[part_name] / 1e3, 3) for part_name in PARTS}
    flops = decode_step_flops(config, batch * args.beam_size, args.source_length, (steps + 1) / 2)
    achieved = flops / (seconds / steps) / 1e9
    return {
        "model": name,
        "batch": batch,
        "hypotheses_per_step": batch * args.beam_size,
        "ms_per_step": round(seconds * 1e3 / steps, 3),
        "target_tokens_per_s": round(batch * steps / seconds, 1),
        "profiled_ms_per_step": round(step_ms, 3),
        "parts_ms_per_step": parts_ms,
        "parts_share": {part_name: round(ms / step_ms, 3) for part_name, ms in parts_ms.items()},
        "unattributed_ms_per_step": round(step_ms - sum(parts.values()) / 1e3, 3),
        "ops_per_step": round(ops, 1),
        "median_op_self_us": round(typical_us, 2),
        "per_op_overhead_ms_per_step": round(overhead_ms, 3),
        "per_op_overhead_share": round(overhead_ms / step_ms, 3),
        "outside_loop_ms": round(outside_us / 1e3, 3),
        "flops_per_step": flops,
        "achieved_gflops": round(achieved, 2),
        "achieved_over_matmul_rate": round(achieved / ceiling_gflops, 4),
    }


def decode_arguments(parser) -> None:
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["small", "base"])
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 32], help="sentences (x beam hypotheses)")
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--generate", type=int, default=64, help="target tokens per hypothesis (forced)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--logdir", default="/tmp/kt-decode-profile")
    parser.add_argument("--ceiling-size", type=int, default=2048, help="n of the n x n matmul rate")


def decode(args) -> None:
    load_before = load_average()
    per_op_us = per_op_cost_us()
    ceiling = matmul_rate(args.ceiling_size) / 1e9
    rows = [
        profile(name, batch, args, os.path.join(args.logdir, f"{name}-{batch}"), per_op_us, ceiling)
        for name in args.models
        for batch in args.batches
    ]
    emit(
        record(
            benchmark="profile_decode",
            source_length=args.source_length,
            generate=args.generate,
            beam_size=args.beam_size,
            per_op_cost_us=round(per_op_us, 3),
            matmul_rate_gflops=round(ceiling, 2),
            flops_formula=decode_step_flops.__doc__.split("\n\n")[0].replace("\n    ", " "),
            steps=rows,
            logdir=args.logdir,
            load_before=load_before,
            isa_caps={name: os.environ[name] for name in ISA_CAP_VARIABLES if name in os.environ},
        )
    )


PRECISIONS = ("float32", "int8_weights", "keras_int8")


def int8_matmul_arguments(parser) -> None:
    parser.add_argument("--models", nargs="+", choices=sorted(MODELS), default=["small", "base"])
    parser.add_argument(
        "--rows", nargs="+", type=int, default=[4, 128], help="rows of x: a step's hypotheses (beam 4 x 1, x 32)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per shape; the fastest counts")


def step_matrices(config: TransformerConfig) -> dict[str, tuple[tuple[int, int], int]]:
    """A decoding step's weight matrices: name -> ((d_in, units), times per step)."""
    d, layers = config.d_model, config.decoder_depth
    return {
        "attention": ((d, d), 6 * layers),
        "ffn_in": ((d, config.d_ff), layers),
        "ffn_out": ((config.d_ff, d), layers),
        "output": ((d, config.vocab_size), 1),
    }


def precision_layers(d_in: int, units: int, copies: int) -> dict[str, list]:
    """`copies` float32 `Linear` layers, and each one's weights in the other precisions."""
    made = {name: [] for name in PRECISIONS}
    for _ in range(copies):
        ours = Linear(units)
        ours.build((None, d_in))
        made["float32"].append(ours)
        for name, layer in (("int8_weights", Linear(units)), ("keras_int8", keras.layers.Dense(units))):
            layer.build((None, d_in))
            layer.set_weights(ours.get_weights())
            layer.quantize("int8")
            made[name].append(layer)
    return made


def seconds_per_call(layers: list, x: tf.Tensor, repeats: int) -> tuple[float, tf.Tensor]:
    """The fastest of `repeats` runs of every layer on `x`, over the layers; the first's output."""

    @tf.function
    def run(x):
        outputs = [layer(x) for layer in layers]
        return outputs[0], tf.stack([y[0, 0] for y in outputs[1:]] or [0.0])  # all of them run

    run(x)  # trace
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        first, _ = run(x)
        first.numpy()
        best = min(best, time.perf_counter() - start)
    return best / len(layers), run(x)[0]


def one_thread() -> int:
    """One thread per op where TensorFlow has not started yet; the threads per op it runs with."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    except RuntimeError:  # TensorFlow ran before (a test's process): its pools stay
        pass
    return tf.config.threading.get_intra_op_parallelism_threads()


def int8_matmul(args) -> None:
    threads, load_before, models = one_thread(), load_average(), {}
    for name in args.models:
        config, rows = MODELS[name], {}
        for m in args.rows:
            matrices, step = {}, dict.fromkeys(PRECISIONS, 0.0)
            for matrix, ((d_in, units), times) in step_matrices(config).items():
                layers = precision_layers(d_in, units, max(2, times))
                x = tf.random.stateless_normal((m, d_in), seed=(m, d_in))
                timed = {precision: seconds_per_call(layers[precision], x, args.repeats) for precision in PRECISIONS}
                reference = timed["float32"][1]
                matrices[matrix] = {
                    "shape": [m, d_in, units],
                    "copies": len(layers["float32"]),
                    "us": {precision: round(s * 1e6, 1) for precision, (s, _) in timed.items()},
                    "over_float32": {p: round(s / timed["float32"][0], 2) for p, (s, _) in timed.items()},
                    "max_relative_error": {
                        p: round(float(tf.reduce_max(tf.abs(y - reference)) / tf.reduce_max(tf.abs(reference))), 4)
                        for p, (_, y) in timed.items()
                        if p != "float32"
                    },
                }
                for precision, (s, _) in timed.items():
                    step[precision] += s * times
            rows[str(m)] = {
                "matrices": matrices,
                "step_us": {p: round(s * 1e6, 1) for p, s in step.items()},
                "step_over_float32": {p: round(s / step["float32"], 2) for p, s in step.items()},
            }
        models[name] = rows
    emit(
        record(
            benchmark="int8_matmul",
            intra_op_threads=threads,
            models=models,
            load_before=load_before,
            load_after=load_average(),
            isa_caps={name: os.environ[name] for name in ISA_CAP_VARIABLES if name in os.environ},
        )
    )


COMMANDS = {
    "step": (step_arguments, step, "a profiler trace of training steps, summarised by op type"),
    "decode": (decode_arguments, decode, "where a decoding step's time goes, against the FLOPs it needs"),
    "int8-matmul": (int8_matmul_arguments, int8_matmul, "a step's weight matrices: float32, int8 weights, Keras int8"),
}
main = command_line(__doc__, COMMANDS)

if __name__ == "__main__":
    main()
