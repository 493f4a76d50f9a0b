"""The seed paper's central claim, measured (Vaswani et al., 2017, §1, §4, Table 1): self-attention
connects all positions with O(1) sequential operations, a recurrent layer needs O(n), so a
Transformer processes a training sequence's positions at once where an RNN goes one by one.

Training step time against sequence length n for our Transformer and an LSTM encoder-decoder
(`keras.layers.LSTM`, Sutskever et al., 2014: the encoder's final states start the decoder) of
similar size, on batches of the same number of tokens (`--tokens` per side = batch x n), both
through `model.fit`, interleaved per length. Prints a table to stderr, writes a PNG plot and
prints one JSON line:

    python bench/seed_parallelism.py --lengths 32 64 128 256 512 --steps 3 --plot bench/seed_parallelism.png
"""

from __future__ import annotations

import argparse
import sys

from common import WORKLOADS, Workload, emit, fit_steps, load_average, median, record, repeated, synthetic_batch

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


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="medium", help="model sizes (not batch shape)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 64, 128, 256, 512])
    parser.add_argument("--tokens", type=int, default=2048, help="tokens per side in every batch")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model per length")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--lstm-units", type=int, default=LSTM_UNITS)
    parser.add_argument("--plot", default="bench/seed_parallelism.png", help="PNG path ('' for none)")
    return parser.parse_args(argv)


def main(argv=None):
    import dataclasses

    from train_throughput import build_ours

    args = parse_args(argv)
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


if __name__ == "__main__":
    main()
