"""Training speed, one subcommand per question; each prints one JSON line.

`throughput`: Training throughput of full steps through the real `model.fit` path, on this machine's CPU or
on every visible GPU.

The model is compiled by `keras_transformer.training.optimization.compile_model` (Adam on the Eq. 3
schedule, label-smoothed cross-entropy, masked accuracy) and fed one fixed synthetic batch
repeated, so the figure is the training step alone. After `--warmup` steps (tracing, XLA
compilation; their seconds are `warmup_s`) it times `--steps` steps and prints one JSON line:

    python bench/training.py throughput --workload medium --steps 20 [--jit-compile] [--mixed-precision]
    python bench/training.py throughput --workload base --batch 256 --length 64 --steps 50 --jit-compile \
        --mixed-precision --strategy mirrored --ceiling-size 8192     # a GPU machine (gpu_check.sh)

`--strategy mirrored` trains under `MirroredStrategy` on every visible GPU (`--batch` sequences per
replica); `--mixed-precision` takes the package's policy for the devices (`mixed_float16` with loss
scaling on GPUs, `mixed_bfloat16` on CPUs: no AMX here, slower). `mfu` is model FLOPs per second
(`model_flops_per_step`, formula in the line) over the matmul rate of one device in the compute
dtype (`flops.matmul_rate`, measured in this process before and after the timed steps, the larger)
times the replicas.

`compare`: Ours against keras-hub's `TransformerEncoder`/`TransformerDecoder`, same shapes, same process,
interleaved A B A B.

Both models train through `model.fit` on the same fixed synthetic batch. After warm-up, each
round runs `--steps` steps of ours, then `--steps` of keras-hub; a load change on this shared
machine hits both alike, so the ratio of medians (and the median of per-round ratios) is robust
where absolute figures are not. Prints one JSON line:

    python bench/training.py compare --workload medium --rounds 5 --steps 4 [--jit-compile]

`backends`: Training throughput per Keras backend (issue 38): target tokens/s of `model.fit` steps on
TensorFlow, JAX and PyTorch, for our model (`compile_model`, as `train` compiles it) and for
keras-hub's `TransformerEncoder`/`TransformerDecoder` of the same shapes on the same backend (the
peer of `compare`), on the same synthetic batch fed by `tf.data` (as `train` feeds every backend).
Each backend runs in a process of its own (`train_worker.py`: KERAS_BACKEND is read once, when
Keras is imported), started once the previous one has warmed up (two base models per process: the
warm-ups one at a time, not three on two cores at once with their peak memory added up); then each
round runs `--steps` steps of ours on each backend in turn, then of keras-hub's: one process computes
at a time, and each process's peak memory after its warm-up is in the line. JAX jits its step (always),
TensorFlow with `--jit-compile`, PyTorch runs eagerly. Prints one JSON line: the table, each
backend's tokens/s over the first backend's, ours over keras-hub's per backend:

    python bench/training.py backends --workload small|base [--rounds 3] [--steps 4] [--jit-compile]

`seed-parallelism`: The seed paper's central claim, measured (Vaswani et al., 2017, §1, §4, Table 1): self-attention
connects all positions with O(1) sequential operations, a recurrent layer needs O(n), so a
Transformer processes a training sequence's positions at once where an RNN goes one by one.

Training step time against sequence length n for our Transformer and an LSTM encoder-decoder
(`keras.layers.LSTM`, Sutskever et al., 2014: the encoder's final states start the decoder) of
similar size, on batches of the same number of tokens (`--tokens` per side = batch x n), both
through `model.fit`, interleaved per length. Prints a table to stderr, writes a PNG plot and
prints one JSON line:

    python bench/training.py seed-parallelism --lengths 32 64 128 256 512 --steps 3 --plot bench/seed_parallelism.png

`input-pipeline`: Input pipeline throughput: training batches of the base preset's shape (max_length 256, 4096
padded tokens per side, bucketed) read, tokenized and batched from a TSV by `make_batches`, in
target tokens (non-pad) per second, with `--threads` cores for tf.data.

Can it feed a GPU? The paper's base model costs about 6 x 63M FLOPs per target token (with its
source token); an H200 at 40% MFU of its ~989 dense bf16 TFLOP/s then trains ~1.0M target
tokens/s. The line gives the cores that this pipeline would need for that rate.

    python bench/training.py input-pipeline --data /tmp/big.tsv [--threads 2] [--batches 300] [--tokenizer-model M]
"""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
import time

from common import (
    WORKLOADS,
    Workload,
    command_line,
    emit,
    fit_steps,
    load_average,
    median,
    record,
    repeated,
    synthetic_batch,
)
from decoding import Worker
from flops import FLOPS_FORMULA, matmul_rate, model_flops_per_step
from peers import build_keras_hub


def build_ours(workload, jit_compile: bool, mixed_precision: bool = False, strategy=None):
    """Our Transformer, compiled exactly as `keras-transformer train` does it (`training.trainer._build`:
    under `strategy`'s scope, in its mixed-precision policy; `compile_model` builds the model and
    its optimizer before the first step)."""
    import tensorflow as tf

    from keras_transformer import TrainingConfig, Transformer
    from keras_transformer.training.distribute import mixed_precision_policy
    from keras_transformer.training.optimization import compile_model

    strategy = strategy or tf.distribute.get_strategy()
    training = TrainingConfig(mixed_precision=mixed_precision, jit_compile=jit_compile)
    with strategy.scope():
        dtype = mixed_precision_policy(strategy) if mixed_precision else None
        model = compile_model(Transformer(workload.config, dtype=dtype), training)
        model.jit_compile = jit_compile
    return model


def throughput_arguments(parser) -> None:
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium")
    parser.add_argument("--batch", type=int, help="sequences per replica (default: the workload's)")
    parser.add_argument("--length", type=int, help="tokens per side (default: the workload's)")
    parser.add_argument("--steps", type=int, default=20, help="timed steps")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (tracing, compilation)")
    parser.add_argument(
        "--ceiling-size", type=int, default=2048, help="n of the n x n matmul that measures the ceiling"
    )
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile the training step")
    parser.add_argument("--mixed-precision", action="store_true", help="mixed_float16 on GPUs, mixed_bfloat16 on CPUs")
    parser.add_argument(
        "--strategy", choices=["default", "mirrored"], default="default", help="mirrored: every visible GPU"
    )


def throughput(args) -> None:
    import tensorflow as tf

    from keras_transformer.training.distribute import mixed_precision_policy, resolve_strategy

    strategy = resolve_strategy("mirrored") if args.strategy == "mirrored" else tf.distribute.get_strategy()
    replicas = strategy.num_replicas_in_sync
    workload = WORKLOADS[args.workload]
    workload = dataclasses.replace(workload, batch=(args.batch or workload.batch) * replicas)  # the global batch
    if args.length:
        config = dataclasses.replace(workload.config, max_length=max(workload.config.max_length, args.length))
        workload = dataclasses.replace(workload, config=config, source_length=args.length, target_length=args.length)
    policy = mixed_precision_policy(strategy) if args.mixed_precision else "float32"
    dtype = {"mixed_float16": "float16", "mixed_bfloat16": "bfloat16"}.get(policy, "float32")
    gpus = tf.config.list_logical_devices("GPU")
    load_before = load_average()
    ceiling = matmul_rate(args.ceiling_size, dtype)
    model = build_ours(workload, args.jit_compile, args.mixed_precision, strategy)
    dataset = repeated(synthetic_batch(workload))
    start = time.perf_counter()
    fit_steps(model, dataset, args.warmup)
    warmup_s = time.perf_counter() - start
    times = fit_steps(model, dataset, args.steps)
    ceiling = max(ceiling, matmul_rate(args.ceiling_size, dtype))
    step_s = median(times)
    flops = model_flops_per_step(workload.config, workload.batch, workload.source_length, workload.target_length)
    achieved = flops / step_s / 1e9
    emit(
        record(
            benchmark="train_throughput",
            workload=args.workload,
            model="keras_transformer",
            batch=[workload.batch, workload.source_length, workload.target_length],
            devices=[device.name for device in gpus] or ["CPU"],
            replicas=replicas,
            policy=policy,
            jit_compile=args.jit_compile,
            mixed_precision=args.mixed_precision,
            steps=args.steps,
            warmup=args.warmup,
            warmup_s=round(warmup_s, 1),
            tgt_tokens_per_s=round(workload.batch * workload.target_length / step_s, 1),
            step_s_median=round(step_s, 4),
            step_s_min=round(min(times), 4),
            step_s_max=round(max(times), 4),
            model_flops_per_step=flops,
            flops_formula=FLOPS_FORMULA,
            achieved_gflops=round(achieved, 2),
            matmul_ceiling_gflops=round(ceiling / 1e9, 2),
            matmul_ceiling_dtype=dtype,
            matmul_ceiling_size=args.ceiling_size,
            mfu=round(achieved / (ceiling / 1e9 * replicas), 4),
            load_before=load_before,
        )
    )


def compare_arguments(parser) -> None:
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium")
    parser.add_argument("--rounds", type=int, default=5, help="A B rounds")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per model per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument(
        "--ceiling-size", type=int, default=2048, help="n of the n x n matmul that measures the ceiling"
    )
    parser.add_argument("--jit-compile", action="store_true", help="XLA-compile both training steps")


def compare(args) -> None:
    import keras_hub

    workload = WORKLOADS[args.workload]
    load_before = load_average()
    ceiling = matmul_rate(args.ceiling_size) / 1e9
    dataset = repeated(synthetic_batch(workload))
    models = {
        "ours": build_ours(workload, args.jit_compile),
        "keras_hub": build_keras_hub(workload.config, args.jit_compile),
    }
    for model in models.values():
        fit_steps(model, dataset, args.warmup)
    times = {name: [] for name in models}
    round_ratios = []
    for _ in range(args.rounds):
        for name, model in models.items():
            times[name].append(median(fit_steps(model, dataset, args.steps)))
        round_ratios.append(times["keras_hub"][-1] / times["ours"][-1])
    ceiling = max(ceiling, matmul_rate(args.ceiling_size) / 1e9)
    flops = model_flops_per_step(workload.config, workload.batch, workload.source_length, workload.target_length)
    tokens = workload.batch * workload.target_length
    systems = {}
    for name, model in models.items():
        step_s = median(times[name])
        systems[name] = {
            "step_s_median": round(step_s, 4),
            "step_s_per_round": [round(t, 4) for t in times[name]],
            "tgt_tokens_per_s": round(tokens / step_s, 1),
            "mfu": round(flops / step_s / 1e9 / ceiling, 4),
            "params": model.count_params(),
        }
    emit(
        record(
            benchmark="compare_train",
            workload=args.workload,
            batch=[workload.batch, workload.source_length, workload.target_length],
            jit_compile=args.jit_compile,
            rounds=args.rounds,
            steps_per_round=args.steps,
            speedup_ours_over_keras_hub=round(
                systems["keras_hub"]["step_s_median"] / systems["ours"]["step_s_median"], 3
            ),
            speedup_median_of_rounds=round(median(round_ratios), 3),
            systems=systems,
            model_flops_per_step=flops,
            matmul_ceiling_gflops=round(ceiling, 2),
            matmul_ceiling_size=args.ceiling_size,
            keras_hub_version=keras_hub.__version__,
            load_before=load_before,
        )
    )


LSTM_UNITS = 352  # 3 + 3 layers of 352 units: ~5.7M weights in the recurrent stacks, like the
# Transformer's ~5.5M in its encoder and decoder layers (medium workload, 3 + 3 layers)


def build_lstm(config, units: int = LSTM_UNITS):
    """An LSTM encoder-decoder with the Transformer's depth, embedding width and vocabulary."""
    import keras

    source = keras.Input((None,), dtype="int32", name="source_ids")
    target_in = keras.Input((None,), dtype="int32", name="target_in_ids")
    embedding = keras.layers.Embedding(config.vocab_size, config.d_model, name="shared_embedding")
    x, states = embedding(source), []
    for i in range(config.num_layers):
        x, h, c = keras.layers.LSTM(units, return_sequences=True, return_state=True, name=f"encoder_{i}")(x)
        states.append([h, c])  # [B, units] each
    y = embedding(target_in)
    for i in range(config.num_layers):
        y = keras.layers.LSTM(units, return_sequences=True, name=f"decoder_{i}")(
            y, initial_state=states[i]
        )  # [B, T, units]
    logits = keras.layers.Dense(config.vocab_size, name="logits")(y)  # [B, T, V]
    model = keras.Model([source, target_in], logits, name="lstm_seq2seq")
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    return model


def recurrent_weights(model) -> int:
    return sum(
        int(w.numpy().size)
        for layer in model.layers
        if layer.name.startswith(("encoder_", "decoder_"))
        for w in layer.weights
    )


def transformer_layer_weights(model) -> int:
    return sum(int(w.numpy().size) for w in model.encoder.weights + model.decoder.weights)


def plot(rows, path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    lengths = [r["length"] for r in rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.plot(lengths, [r["transformer_step_s"] for r in rows], "o-", label="Transformer (ours)")
    ax.plot(lengths, [r["lstm_step_s"] for r in rows], "s-", label="LSTM encoder-decoder")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(lengths, [str(n) for n in lengths])
    ax.set_xlabel(f"sequence length n (batch x n = {rows[0]['batch'] * rows[0]['length']} tokens per side)")
    ax.set_ylabel("training step time (s, median)")
    ax.set_title("Training step time vs sequence length, same tokens per batch")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def seed_parallelism_arguments(parser) -> None:
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium", help="model sizes (not batch shape)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per side in every batch")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model per length")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--lstm-units", type=int, default=LSTM_UNITS)
    parser.add_argument("--plot", default="bench/seed_parallelism.png", help="PNG path ('' for none)")


def seed_parallelism(args) -> None:
    load_before = load_average()
    config = dataclasses.replace(WORKLOADS[args.workload].config, max_length=max(args.lengths))
    transformer = build_ours(Workload(config, 1, 1, 1), jit_compile=False)
    lstm = build_lstm(config, args.lstm_units)
    rows = []
    for length in args.lengths:
        workload = Workload(config, max(1, args.tokens // length), length, length)
        dataset = repeated(synthetic_batch(workload))
        row = {"length": length, "batch": workload.batch}
        for name, model in (("transformer", transformer), ("lstm", lstm)):
            fit_steps(model, dataset, args.warmup)  # a new shape: trace it first
            row[f"{name}_step_s"] = round(median(fit_steps(model, dataset, args.steps)), 4)
        row["lstm_over_transformer"] = round(row["lstm_step_s"] / row["transformer_step_s"], 2)
        row["load_1min"] = load_average()[0]
        rows.append(row)
        print(
            f"n={length:4d} batch={workload.batch:3d}  transformer {row['transformer_step_s']:.3f} s  "
            f"lstm {row['lstm_step_s']:.3f} s  lstm/transformer {row['lstm_over_transformer']}",
            file=sys.stderr,
            flush=True,
        )
    if args.plot:
        plot(rows, args.plot)
    emit(
        record(
            benchmark="seed_parallelism",
            workload=args.workload,
            tokens_per_side=args.tokens,
            steps=args.steps,
            transformer_params=transformer.count_params(),
            transformer_layer_weights=transformer_layer_weights(transformer),
            lstm_params=lstm.count_params(),
            lstm_recurrent_weights=recurrent_weights(lstm),
            lstm_units=args.lstm_units,
            rows=rows,
            plot=args.plot or None,
            load_before=load_before,
        )
    )


BACKENDS = ("tensorflow", "jax", "torch")
SYSTEMS = ("ours", "keras_hub")


def backends_arguments(parser) -> None:
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="small")
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every backend and model in turn")
    parser.add_argument("--steps", type=int, default=4, help="timed steps per model per backend per round")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per model first")
    parser.add_argument("--jit-compile", action="store_true", help="XLA on TensorFlow (JAX always jits, torch never)")


class BackendWorker(Worker):
    """A backend's process (`train_worker.py`)."""

    command = (sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_worker.py"))


def backends(args) -> None:
    """Every backend's `model.fit` steps, ours and keras-hub's, each backend in a process of its own
    (KERAS_BACKEND is read once, at Keras' import), rounds alternating the processes and models
    (only one computes at a time); ratios of medians: each backend over TensorFlow, ours over keras-hub."""
    workload = WORKLOADS[args.workload]
    load_before = load_average()
    job = {"workload": args.workload, "steps": args.steps, "warmup": args.warmup, "jit_compile": args.jit_compile}
    with tempfile.TemporaryDirectory() as folder:
        workers, ready = [], {}
        try:
            for backend in args.backends:  # one warm-up at a time: base's would share 2 cores and fill the RAM
                workers.append(BackendWorker({**job, "system": backend}, folder, dict(os.environ)))
                ready[backend] = workers[-1].read()
            times = {worker.name: {system: [] for system in SYSTEMS} for worker in workers}
            for _ in range(args.rounds):
                for system in SYSTEMS:
                    for worker in workers:
                        times[worker.name][system].append(worker.ask(system)["step_s"])
            for worker in workers:
                worker.ask("finish")
        finally:
            for worker in workers:
                worker.close()
    tokens = workload.batch * workload.target_length
    speed = {
        backend: {system: tokens / median(steps) for system, steps in systems.items()}
        for backend, systems in times.items()
    }
    table = {
        backend: {
            system: {
                "step_s_median": round(median(steps), 4),
                "step_s_per_round": [round(t, 4) for t in steps],
                "tgt_tokens_per_s": round(speed[backend][system], 1),
                "jit_compile": ready[backend]["jit_compile"][system],
                "params": ready[backend]["params"][system],
                "warmup_s": ready[backend]["warmup_s"][system],
            }
            for system, steps in systems.items()
        }
        for backend, systems in times.items()
    }
    reference = args.backends[0]
    emit(
        record(
            benchmark="train_backends",
            workload=args.workload,
            batch=[workload.batch, workload.source_length, workload.target_length],
            rounds=args.rounds,
            steps_per_round=args.steps,
            backends=table,
            versions_of_backends={backend: ready[backend]["backend_version"] for backend in table},
            max_rss_gib_after_warmup={backend: ready[backend]["max_rss_gib"] for backend in table},
            tgt_tokens_per_s_over_reference={
                system: {backend: round(speed[backend][system] / speed[reference][system], 3) for backend in table}
                for system in SYSTEMS
            },
            reference_backend=reference,
            speedup_ours_over_keras_hub={
                backend: round(systems["ours"] / systems["keras_hub"], 3) for backend, systems in speed.items()
            },
            load_before=load_before,
            load_after=load_average(),
        )
    )


GPU_TARGET_TOKENS_PER_S = 1.0e6  # the base model on an H200 at 40% MFU (module docstring)


def input_pipeline_arguments(parser) -> None:
    parser.add_argument("--data", default="bible-en-de", help="a data source (a TSV file, a glob, bible-en-de, ...)")
    parser.add_argument("--batches", type=int, default=300, help="timed batches")
    parser.add_argument("--warmup", type=int, default=20, help="untimed batches first (tracing, shuffle buffer)")
    parser.add_argument("--threads", type=int, default=0, help="tf.data's thread pool (0: all cores)")
    parser.add_argument("--tokenizer-model", help="a SentencePiece model (default: learn one of the preset's size)")
    parser.add_argument("--tokenizer-sample", type=int, default=50_000, help="pairs sampled to learn it")


def input_pipeline(args) -> None:
    import os

    import tensorflow as tf

    from keras_transformer import TrainingConfig, TransformerConfig
    from keras_transformer.data.batching import make_batches
    from keras_transformer.data.files import has_own_splits
    from keras_transformer.data.sources import pairs_dataset, sentences
    from keras_transformer.data.splits import WHOLE
    from keras_transformer.data.tokenizer import SubwordTokenizer

    config, training = TransformerConfig.base(), TrainingConfig.preset("base")
    split = "train" if has_own_splits(args.data) else WHOLE
    if args.tokenizer_model:
        tokenizer = SubwordTokenizer.load(args.tokenizer_model)
    else:
        texts = sentences(pairs_dataset(args.data, split))
        tokenizer = SubwordTokenizer.train(texts, config.vocab_size, 2 * args.tokenizer_sample)
    batches = make_batches(
        pairs_dataset(args.data, split, shuffle_seed=0),
        tokenizer,
        max_length=config.max_length,
        batch_tokens=training.batch_tokens,
        training=True,
        shuffle_buffer=training.shuffle_buffer,
        max_length_ratio=9.0,
    )
    if args.threads:
        options = tf.data.Options()
        options.threading.private_threadpool_size = args.threads
        batches = batches.with_options(options)
    iterator = iter(batches)
    for _ in range(args.warmup):
        next(iterator)
    tokens = 0
    load_before = load_average()
    start = time.perf_counter()
    for _ in range(args.batches):
        _, target_out = next(iterator)
        tokens += int(tf.math.count_nonzero(target_out))
    seconds = time.perf_counter() - start
    rate = tokens / seconds
    cores = args.threads or os.cpu_count()
    emit(
        record(
            benchmark="input_pipeline",
            data=args.data,
            max_length=config.max_length,
            batch_tokens=training.batch_tokens,
            vocab_size=tokenizer.vocab_size,
            batches=args.batches,
            tgt_tokens_per_s=round(rate),
            batches_per_s=round(args.batches / seconds, 1),
            tf_data_cores=cores,
            tgt_tokens_per_s_per_core=round(rate / cores),
            cores_for_1m_tgt_tokens_per_s=round(GPU_TARGET_TOKENS_PER_S / (rate / cores), 1),
            load_before=load_before,
            load_after=load_average(),
        )
    )


COMMANDS = {
    "throughput": (throughput_arguments, throughput, "full model.fit training steps: tokens/s, FLOPs, MFU"),
    "compare": (compare_arguments, compare, "ours against keras-hub's layers of the same shapes, interleaved"),
    "backends": (backends_arguments, backends, "model.fit on TensorFlow, JAX and PyTorch, ours and keras-hub's"),
    "seed-parallelism": (
        seed_parallelism_arguments,
        seed_parallelism,
        "step time by sequence length, ours vs an LSTM",
    ),
    "input-pipeline": (input_pipeline_arguments, input_pipeline, "input pipeline throughput: can it feed a GPU?"),
}
main = command_line(__doc__, COMMANDS)

if __name__ == "__main__":
    main()
