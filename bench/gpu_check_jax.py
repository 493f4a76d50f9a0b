"""GPU check on JAX: the package's own training, `kt.Transformer` through `compile_model`, on real
tokenized batches, on a GPU machine without TensorFlow (issue 38 item 4).

The measurement is split in two, because the GPU machine lent to this project (one H200, JAX and
PyTorch, no TensorFlow, nothing from outside but 64 MiB per call) cannot run `tf.data`:

`prepare` (here, with TensorFlow) runs the training input pipeline of `keras-transformer train`
(`training.trainer._batches`: the vocabulary learned by `preparation.prepare_model_dir`, then
`make_batches`' shuffled, length-bucketed, token-based batches of the preset: the base preset's
`batch_tokens` padded tokens per side, `max_length` 256) on the embedded Bible EN-DE and writes the
first `--batches` batches' token ids to one compressed .npz (uint16 ids, [3, B, L] per batch:
source, target in, target out) with the model config and the training settings. Every distinct
batch shape costs one XLA compilation of the step (~27 s for base on an H200, bench/RESULTS.md,
"GPU"), so `--max-shapes K` keeps the batches of the K shapes that hold the most target tokens
(the others are dropped, the stream's order kept; the line says what share of the tokens they held).

`run` (on the GPU machine, `KERAS_BACKEND=jax`, no TensorFlow imported) builds `kt.Transformer`
from that config in mixed_bfloat16 and compiles it with `compile_model` (Adam on Eq. 3, §5.3;
the label-smoothed loss over non-pad tokens, §5.4; the masked accuracy; the step jitted by XLA),
then trains with `model.fit` on the batches in the stream's order, cycling:

1. one step of each distinct shape (the XLA compilations: `compile_s`);
2. `--steps` timed steps: target tokens/s (non-pad target tokens, as `train` counts them, and
   padded ones), step time, model FLOPs (`flops.model_flops_per_step` of each batch's padded
   shape) over the device's bf16 matmul rate measured in this process (`flops.matmul_rate`): MFU;
3. `--profile-steps` steps of the shape that holds the most target tokens under
   `jax.profiler.trace`, summarised by `xla_profile.summarise` into matmuls, attention, softmax,
   LayerNorm, the output layer (with the loss), dropout, the optimizer and the rest: XLA dumps the
   optimised HLO of the step (`xla_profile.dump_flags`, set before JAX starts), whose ops carry
   Keras' layer names; the trace's kernels name their HLO instruction (see `xla_profile`).

It prints a human line and one JSON line. `--time-limit-s` dumps every thread's traceback and
exits when reached. On a CPU it runs too, as a dry run (the smoke test: a tiny preset).

The base preset's vocabulary is 8000 pieces (the Bible's size); `--vocab-size 32000` asks for the
paper's size of output layer (the Bible yields 29,304 pieces). Its first 200 batches of 4096 tokens
fall in 6 shapes, 4 of which hold 93% of the target tokens:

    python bench/gpu_check_jax.py prepare --out runs/gpu_batches.npz --vocab-size 32000 --max-shapes 4
    KERAS_BACKEND=jax python bench/gpu_check_jax.py run --batches runs/gpu_batches.npz

(`prepare`: about a minute and a half on two cores, 1.8 MiB.)
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import glob
import json
import os
import sys
import tempfile
import time

import numpy as np

BENCH = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [BENCH, os.path.dirname(BENCH)]  # flops, xla_profile; the package itself, uninstalled (a GPU machine)


def prepare_arguments(parser) -> None:
    parser.add_argument("--out", required=True, help="the .npz to write")
    parser.add_argument("--preset", default="base", help="the model and training preset")
    parser.add_argument("--data", default="bible-en-de", help="a data source, as `train --data`")
    parser.add_argument("--batches", type=int, default=200, help="batches to keep")
    parser.add_argument("--batch-tokens", type=int, help="padded tokens per side (default: the preset's)")
    parser.add_argument("--vocab-size", type=int, help="(default: the preset's)")
    parser.add_argument("--max-shapes", type=int, default=0, help="keep the K shapes with most tokens (0: all)")


def prepare(args) -> None:
    """Write the pipeline's first batches (see the module docstring)."""
    from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
    from keras_transformer.model_dir import ModelDir
    from keras_transformer.training.preparation import prepare_model_dir
    from keras_transformer.training.trainer import _batches

    overrides = {"vocab_size": args.vocab_size} if args.vocab_size else {}
    config = TransformerConfig.preset(args.preset, **overrides)
    training = TrainingConfig.preset(args.preset, mixed_precision=True)
    if args.batch_tokens:
        training = dataclasses.replace(training, batch_tokens=args.batch_tokens)
    data = DataConfig(data=args.data)
    with tempfile.TemporaryDirectory() as folder:
        log = lambda message: print(message, file=sys.stderr)  # noqa: E731
        config, tokenizer = prepare_model_dir(ModelDir(folder), config, training, data, log)
        stream, _, _ = _batches(data, tokenizer, config, training, replicas=1, step=0)
        batches = [np.stack([s.numpy(), ti.numpy(), to.numpy()]) for (s, ti), to in stream.take(args.batches)]
        kept_shapes = shapes_to_keep(batches, args.max_shapes)
        if kept_shapes is not None:  # read on until `--batches` batches of those shapes
            tokens = collections.Counter()
            for batch in batches:
                tokens[batch.shape[1:] in kept_shapes] += int(np.count_nonzero(batch[2]))
            share = tokens[True] / sum(tokens.values())
            batches = []
            for (s, ti), to in stream:
                if tuple(to.shape) in kept_shapes:
                    batches.append(np.stack([s.numpy(), ti.numpy(), to.numpy()]))
                    if len(batches) == args.batches:
                        break
    assert config.vocab_size <= np.iinfo(np.uint16).max
    meta = {
        "preset": args.preset,
        "data": args.data,
        "config": config.to_dict(),
        "training": dataclasses.asdict(training),
        "max_shapes": args.max_shapes,
        "token_share_of_kept_shapes": round(share, 3) if kept_shapes is not None else 1.0,
    }
    np.savez_compressed(
        args.out,
        ids=np.concatenate([batch.reshape(-1) for batch in batches]).astype(np.uint16),
        shapes=np.array([batch.shape[1:] for batch in batches], np.int32),  # [N, 2]: B, L
        meta=np.array(json.dumps(meta)),
    )
    shapes = collections.Counter(tuple(batch.shape[1:]) for batch in batches)
    print(
        f"{args.out}: {len(batches)} batches, {len(shapes)} shapes {dict(shapes)}, vocab {config.vocab_size}, "
        f"{os.path.getsize(args.out) / 2**20:.1f} MiB"
    )


def shapes_to_keep(batches: list[np.ndarray], max_shapes: int) -> set[tuple[int, int]] | None:
    """The `max_shapes` (B, L) shapes holding the most target tokens in `batches` ([3, B, L] each),
    or None for all."""
    tokens = collections.Counter()
    for batch in batches:
        tokens[batch.shape[1:]] += int(np.count_nonzero(batch[2]))
    if not max_shapes or len(tokens) <= max_shapes:
        return None
    return {shape for shape, _ in tokens.most_common(max_shapes)}


def load_batches(path: str) -> tuple[list[tuple], dict]:
    """([((source, target_in), target_out) int32 [B, L] each], meta) of a `prepare` file."""
    with np.load(path) as saved:
        ids, shapes, meta = saved["ids"].astype(np.int32), saved["shapes"], json.loads(str(saved["meta"]))
    batches, offset = [], 0
    for rows, length in shapes:
        size = 3 * rows * length
        source, target_in, target_out = ids[offset : offset + size].reshape(3, rows, length)
        batches.append(((source, target_in), target_out))
        offset += size
    return batches, meta


def run_arguments(parser) -> None:
    parser.add_argument("--batches", required=True, help="the .npz that `prepare` wrote")
    parser.add_argument("--steps", type=int, default=200, help="timed steps")
    parser.add_argument("--profile-steps", type=int, default=5, help="profiled steps (0: no profile)")
    parser.add_argument("--ceiling-size", type=int, help="n of the n x n bf16 matmul (default: 8192 GPU, 1024 CPU)")
    parser.add_argument("--time-limit-s", type=float, default=540, help="then dump the tracebacks and exit")


def run(args) -> None:
    """Train on the prepared batches on JAX and print the measurement (see the module docstring)."""
    import faulthandler

    faulthandler.dump_traceback_later(args.time_limit_s, exit=True)
    os.environ["KERAS_BACKEND"] = "jax"  # before keras is imported
    dump = tempfile.mkdtemp(prefix="xla_dump_")
    from xla_profile import dump_flags

    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {dump_flags(dump)}".strip()  # before JAX starts

    import jax
    import keras
    from flops import matmul_rate, model_flops_per_step

    from keras_transformer.config import TrainingConfig, TransformerConfig
    from keras_transformer.model import Transformer
    from keras_transformer.special_tokens import PAD_ID
    from keras_transformer.training.optimization import compile_model

    batches, meta = load_batches(args.batches)
    config = TransformerConfig.from_dict(meta["config"])
    training = TrainingConfig(**meta["training"])
    devices = jax.devices()
    on_gpu = devices[0].platform != "cpu"
    print(f"devices: {len(devices)} x {devices[0].device_kind} ({devices[0].platform}{'' if on_gpu else ': dry run'})")
    ceiling_size = args.ceiling_size or (8192 if on_gpu else 1024)
    peak = matmul_rate(ceiling_size, "bfloat16")
    model = compile_model(Transformer(config, dtype="mixed_bfloat16"), training)

    def fit(stream: list, steps: int) -> dict:
        """`steps` steps of `model.fit` on `stream`'s batches, cycling; returns when the device is done."""

        def cycle():
            while True:
                yield from stream

        history = model.fit(cycle(), steps_per_epoch=steps, epochs=1, verbose=0, shuffle=False)
        jax.block_until_ready([variable.value for variable in model.trainable_variables])
        return history.history

    first_of_shape = {}
    for batch in batches:
        first_of_shape.setdefault(batch[1].shape, batch)
    start = time.perf_counter()
    fit(list(first_of_shape.values()), len(first_of_shape))  # trace and XLA-compile every shape
    compile_s = time.perf_counter() - start

    timed = [batches[i % len(batches)] for i in range(args.steps)]
    start = time.perf_counter()
    history = fit(timed, args.steps)
    elapsed = time.perf_counter() - start
    target_tokens = sum(int(np.count_nonzero(target != PAD_ID)) for _, target in timed)
    padded_tokens = sum(target.size for _, target in timed)
    flops = sum(model_flops_per_step(config, *target.shape, target.shape[1]) for _, target in timed)
    peak = max(peak, matmul_rate(ceiling_size, "bfloat16"))
    result = {
        "benchmark": "gpu_check_jax",
        "model": "kt.Transformer via compile_model",
        "preset": meta["preset"],
        "data": meta["data"],
        "vocab_size": config.vocab_size,
        "batch_tokens": training.batch_tokens,
        "max_length": config.max_length,
        "batches_in_file": len(batches),
        "shapes": sorted([list(shape) for shape in first_of_shape]),
        "token_share_of_kept_shapes": meta["token_share_of_kept_shapes"],
        "replicas": 1,
        "policy": "mixed_bfloat16",
        "steps": args.steps,
        "target_tokens_per_s": round(target_tokens / elapsed),
        "padded_target_tokens_per_s": round(padded_tokens / elapsed),
        "pad_share": round(1 - target_tokens / padded_tokens, 3),
        "step_time_ms": round(1000 * elapsed / args.steps, 2),
        "compile_s": round(compile_s, 1),
        "model_tflops_per_s": round(flops / elapsed / 1e12, 3),
        "measured_bf16_matmul_tflops": round(peak / 1e12, 3),
        "matmul_size": ceiling_size,
        "mfu": round(flops / elapsed / peak, 3),
        "final_loss": round(float(history["loss"][-1]), 3),
    }
    print(
        f"target tokens/s: {result['target_tokens_per_s']}  step time: {result['step_time_ms']} ms  "
        f"MFU: {result['mfu']:.1%} (of {result['measured_bf16_matmul_tflops']} TFLOP/s bf16 matmul)",
        flush=True,  # before the profile, which may fail or run out of time
    )
    if args.profile_steps:
        result["profile"] = profile(fit, batches, args.profile_steps, dump, model.name)
    result.update(
        backend="jax",
        jax=jax.__version__,
        keras=keras.__version__,
        device=devices[0].device_kind,
        tensorflow_imported="tensorflow" in sys.modules,
    )
    faulthandler.cancel_dump_traceback_later()
    print(json.dumps(result), flush=True)


def profile(fit, batches: list, steps: int, dump: str, model_name: str) -> dict:
    """`xla_profile.summarise` of `steps` steps of the batch shape that holds the most target tokens
    (compiled already), or {"error": ...} if the profiler fails (a GPU without CUPTI)."""
    import jax
    from xla_profile import summarise

    tokens = collections.Counter()
    for _, target in batches:
        tokens[target.shape] += int(np.count_nonzero(target))
    shape = tokens.most_common(1)[0][0]
    of_shape = [batch for batch in batches if batch[1].shape == shape]
    trace = tempfile.mkdtemp(prefix="jax_trace_")
    try:
        start = time.perf_counter()
        with jax.profiler.trace(trace):
            fit([of_shape[i % len(of_shape)] for i in range(steps)], steps)
        wall_s = time.perf_counter() - start
        xplane = glob.glob(os.path.join(trace, "**", "*.xplane.pb"), recursive=True)[0]
        summary = summarise(xplane, dump, steps, model_name)
    except Exception as error:  # the throughput above stands without it
        return {"error": f"{type(error).__name__}: {error}"}
    return {"batch": list(shape), "wall_ms_per_step_while_profiled": round(1000 * wall_s / steps, 3), **summary}


COMMANDS = {
    "prepare": (prepare_arguments, prepare, "write the pipeline's batches to an .npz (needs TensorFlow)"),
    "run": (run_arguments, run, "train kt.Transformer on them on JAX and profile the step (no TensorFlow)"),
}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    subcommands = parser.add_subparsers(dest="subcommand", required=True)
    for name, (arguments, _, help) in COMMANDS.items():
        arguments(subcommands.add_parser(name, help=help, description=help))
    args = parser.parse_args(argv)
    COMMANDS[args.subcommand][1](args)


if __name__ == "__main__":
    main()
