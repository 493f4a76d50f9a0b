"""Where a training step's time goes: a TensorFlow profiler trace of `--steps` `model.fit` steps
(after warm-up), summarised per op type by self time. Writes the trace for TensorBoard's profile
plugin under `--logdir` and prints one JSON line with the top op types:

    python bench/profile_step.py --workload medium --steps 3 --logdir /tmp/kt-profile
"""

from __future__ import annotations

import argparse
import collections
import glob
import json

from common import WORKLOADS, emit, fit_steps, load_average, record, repeated, synthetic_batch
from train_throughput import build_ours


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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--jit-compile", action="store_true")
    parser.add_argument("--logdir", default="/tmp/kt-profile")
    parser.add_argument("--top", type=int, default=15)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
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


if __name__ == "__main__":
    main()
