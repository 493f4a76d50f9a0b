"""The README's quality table: train a preset on the embedded Bible EN-DE for a
wall-clock budget, then sacreBLEU BLEU and chrF on the held-out books (the whole test split,
detokenized, cased) with greedy decoding and with beam 4 (alpha 0.6). Prints one JSON line:

    python bench/quality.py --time-budget 30m [--preset small] [--model-dir runs/quality-30m]

The flags of `keras-transformer train` override the preset's `TransformerConfig` and
`TrainingConfig` fields (how the recipe was chosen: bench/RESULTS.md, "Quality on a CPU
budget"), e.g. `--no-norm-first --learning-rate-scale 2`.

Training goes through `keras_transformer.training.trainer.train`, exactly as `keras-transformer train
--preset small --time-budget 30m` does. Epochs and target tokens/s are estimated: the real
(non-pad) target tokens per batch are averaged over `--sample-batches` batches of the same
pipeline, times the steps trained, over the training split's target tokens.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import emit, load_average, record

import keras_transformer as kt
from keras_transformer import TrainingConfig, TransformerConfig
from keras_transformer.cli.flags import add_train_flags, configs
from keras_transformer.data.batching import make_batches
from keras_transformer.data.sources import pairs_dataset, read_pairs
from keras_transformer.inference.translator import Translator
from keras_transformer.model_dir import ModelDir
from keras_transformer.special_tokens import PAD_ID
from keras_transformer.training.schedules import trained_steps
from keras_transformer.training.trainer import train

DATA = "bible-en-de"


def target_tokens_per_batch(
    tokenizer, config: TransformerConfig, training: TrainingConfig, batches: int
) -> tuple[float, int]:
    """(mean real target tokens per training batch, target tokens in the training split), EOS included."""
    pipeline = make_batches(
        pairs_dataset(DATA, "train"),
        tokenizer,
        max_length=config.max_length,
        batch_tokens=training.batch_tokens,
        training=True,
        seed=training.seed,
    )
    counts = [int(np.count_nonzero(target.numpy() != PAD_ID)) for _, target in pipeline.take(batches)]
    _, targets = read_pairs(DATA, "train")
    split_tokens = int(tokenizer.tokenize(targets).flat_values.shape[0]) + len(targets)
    return float(np.mean(counts)), split_tokens


def evaluate(model, tokenizer, beam_size: int, alpha: float, limit: int | None) -> dict:
    pairs = read_pairs(DATA, "test", limit=limit)
    start = time.perf_counter()
    scores = kt.evaluate(Translator(model, tokenizer, batch_size=64, beam_size=beam_size, alpha=alpha), pairs)
    seconds = time.perf_counter() - start
    return {
        "bleu": scores["bleu"],
        "chrf": scores["chrf"],
        "seconds": round(seconds, 1),
        "sentences": scores["sentences"],
        "example": scores["translations"][0],
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument(
        "--model-dir", help="default: runs/quality-BUDGET (must not exist: the run starts from scratch)"
    )
    parser.add_argument(
        "--sample-batches", type=int, default=300, help="batches averaged for the tokens-per-batch estimate"
    )
    parser.add_argument("--limit", type=int, help="score only the first N test verses (default: all 793)")
    parser.add_argument("--searches", nargs="+", choices=["greedy", "beam4"], default=["greedy", "beam4"])
    add_train_flags(parser)
    parser.set_defaults(time_budget_s="30m")  # the table's budget
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    model_dir = args.model_dir or f"runs/quality-{args.time_budget_s}"
    if ModelDir(model_dir).exists():
        raise SystemExit(f"{model_dir} exists: the table's runs start from scratch; remove it or pass --model-dir")
    config, training = configs(args, args.preset)
    load_before = load_average()
    start = time.perf_counter()
    model = train(model_dir, config, training, DATA, verbose=0, log=lambda message: None)
    train_s = time.perf_counter() - start
    steps = trained_steps(model)
    tokenizer = ModelDir(model_dir).tokenizer()
    per_batch, split_tokens = target_tokens_per_batch(tokenizer, model.config, training, args.sample_batches)
    searches = {"greedy": (1, 0.0), "beam4": (4, 0.6)}
    emit(
        record(
            benchmark="quality",
            data=DATA,
            preset=args.preset,
            budget=args.time_budget_s,
            model_dir=model_dir,
            steps=steps,
            train_s=round(train_s, 1),
            epochs=round(steps * per_batch / split_tokens, 2),
            tgt_tokens_per_s=round(steps * per_batch / train_s, 1),
            **{name: evaluate(model, tokenizer, *searches[name], args.limit) for name in args.searches},
            config=model.config.to_dict(),
            training={k: v for k, v in vars(training).items() if v is not None},
            load_before=load_before,
            load_after=load_average(),
        )
    )


if __name__ == "__main__":
    main()
