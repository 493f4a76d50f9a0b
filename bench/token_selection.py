"""What a beam step's choice of tokens costs (§6.1's beam search, `log_probs.best_tokens`): the
log-probabilities and the best 2K + 2 tokens of N rows of V logits, the plain way
(`tf.nn.log_softmax`, then `tf.math.top_k`) against the search's (`log_probs.LogProbs.of`: one
softmax; then `log_probs.best_tokens`: the blocked top-k on the logits, and the normalizer from
the best token's probability), and their pieces: log_softmax, softmax, top_k over whole rows,
and the blocked top-k at several block widths (`log_probs.top_k_block` picks the default).
Every figure is microseconds per call inside a `tf.while_loop`, as the search runs them, less
the loop's own cost; prints one JSON line:

    python bench/token_selection.py --rows 128 32 --vocab 8000 32000 --threads 1
"""

from __future__ import annotations

import argparse
import time

import tensorflow as tf
from common import emit, load_average, record

from keras_transformer.inference.log_probs import LogProbs, best_tokens, top_k_block, top_k_rows

BANNED = (0, 1)  # pad and start, as the search bans them


def microseconds(function, logits, iterations: int, repeats: int) -> float:
    """The best of `repeats` timings of `function(logits)` per iteration of a `tf.while_loop`.
    Each iteration's input differs (+ 0 x the counter), so nothing is hoisted out of the loop."""

    @tf.function(autograph=False)
    def loop(logits):
        def body(i, total):
            output = tf.nest.flatten(function(logits + tf.cast(i, tf.float32) * 0.0))[0]
            return i + 1, total + tf.cast(tf.reshape(output, [-1])[0], tf.float32)

        return tf.while_loop(lambda i, total: i < iterations, body, (0, 0.0))[1]

    loop(logits).numpy()  # trace
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        loop(logits).numpy()
        best = min(best, time.perf_counter() - start)
    return best / iterations * 1e6


def selection_costs(rows: int, vocab_size: int, count: int, args) -> dict:
    logits = tf.random.stateless_normal([rows, vocab_size], seed=(rows, vocab_size)) * 4.0
    floor = microseconds(lambda x: x, logits, args.iterations, args.repeats)

    def cost(function):
        return round(microseconds(function, logits, args.iterations, args.repeats) - floor, 1)

    width = count + len(BANNED)
    plain = cost(lambda x: tf.math.top_k(tf.nn.log_softmax(x), k=width))
    search = cost(lambda x: best_tokens(LogProbs.of(x), count, BANNED))
    blocks = sorted({top_k_block(vocab_size), *(b for b in args.blocks if b * width < vocab_size)})
    return {
        "rows": rows,
        "vocab_size": vocab_size,
        "tokens_per_row": width,
        "plain_us": plain,
        "search_us": search,
        "plain_over_search": round(plain / search, 2),
        "log_softmax_us": cost(tf.nn.log_softmax),
        "normalized_us": cost(lambda x: LogProbs.of(x).normalized().log_z),  # a search that rules tokens out
        "softmax_us": cost(tf.nn.softmax),
        "top_k_us": cost(lambda x: tf.math.top_k(x, k=width)),
        "default_block": top_k_block(vocab_size),
        "blocked_top_k_us": {block: cost(lambda x, b=block: top_k_rows(x, width, block=b)) for block in blocks},
    }


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", nargs="+", type=int, default=[128, 32], help="hypotheses per step (batch x beam)")
    parser.add_argument("--vocab", nargs="+", type=int, default=[8000, 32000])
    parser.add_argument("--beam-size", type=int, default=4, help="2K best tokens per row (+ pad and start)")
    parser.add_argument("--blocks", nargs="+", type=int, default=[32, 64, 128])
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow's intra- and inter-op threads (0: default)")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    load_before = load_average()
    rows = [
        selection_costs(rows, vocab_size, 2 * args.beam_size, args) for vocab_size in args.vocab for rows in args.rows
    ]
    emit(
        record(
            benchmark="token_selection",
            threads=args.threads or "default",
            costs=rows,
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
