"""Input pipeline throughput: training batches of the base preset's shape (max_length 256, 4096
padded tokens per side, bucketed) read, tokenized and batched from a TSV by `make_batches`, in
target tokens (non-pad) per second, with `--threads` cores for tf.data.

Can it feed a GPU? The paper's base model costs about 6 x 63M FLOPs per target token (with its
source token); an H200 at 40% MFU of its ~989 dense bf16 TFLOP/s then trains ~1.0M target
tokens/s. The line gives the cores that this pipeline would need for that rate.

    python bench/input_pipeline.py --data /tmp/big.tsv [--threads 2] [--batches 300] [--tokenizer-model M]
"""

from __future__ import annotations

import argparse
import time

from common import emit, load_average, record

GPU_TARGET_TOKENS_PER_S = 1.0e6  # the base model on an H200 at 40% MFU (module docstring)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default="bible-en-de", help="a data source (a TSV file, a glob, bible-en-de, ...)")
    parser.add_argument("--batches", type=int, default=300, help="timed batches")
    parser.add_argument("--warmup", type=int, default=20, help="untimed batches first (tracing, shuffle buffer)")
    parser.add_argument("--threads", type=int, default=0, help="tf.data's thread pool (0: all cores)")
    parser.add_argument("--tokenizer-model", help="a SentencePiece model (default: learn one of the preset's size)")
    parser.add_argument("--tokenizer-sample", type=int, default=50_000, help="pairs sampled to learn it")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
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


if __name__ == "__main__":
    main()
