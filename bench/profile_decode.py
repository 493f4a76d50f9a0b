"""Where beam search's time goes: a TensorFlow profiler trace of `beam_search` (the
`tf.function` that `Translator`, the SavedModel and TFLite run) on random weights with a
forced output length, summarised per op type by self time, plus the wall time per decoding
step. Prints one JSON line:

    python bench/profile_decode.py --model small --batch 32 --logdir /tmp/kt-decode-profile

`--model small` is the `small` preset (vocabulary 8000), `base` the paper's base (32000).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from common import FIRST_TOKEN, emit, load_average, record
from decode_runners import forbid_eos
from profile_step import profiled

from keras_transformer import Transformer, TransformerConfig, beam_search

MODELS = {
    "small": TransformerConfig.small(vocab_size=8000),
    "base": TransformerConfig.base(vocab_size=32000),
    "tiny": TransformerConfig.tiny(vocab_size=500),  # smoke test
}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", choices=sorted(MODELS), default="small")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--generate", type=int, default=64, help="target tokens per hypothesis (forced)")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--logdir", default="/tmp/kt-decode-profile")
    parser.add_argument("--top", type=int, default=15)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    config = MODELS[args.model]
    model = Transformer(config)
    model.build()
    forbid_eos(model)
    settings = dict(beam_size=args.beam_size, alpha=0.6, a=0.0, b=args.generate)  # the default search, forced length
    rng = np.random.default_rng(0)
    source = rng.integers(FIRST_TOKEN, config.vocab_size, (args.batch, args.source_length), dtype=np.int32)
    load_before = load_average()
    beam_search(model, source, **settings)  # trace
    start = time.perf_counter()
    beam_search(model, source, **settings).ids.numpy()
    seconds = time.perf_counter() - start
    top, everything = profiled(lambda: beam_search(model, source, **settings).ids.numpy(), args.logdir, args.top)
    emit(
        record(
            benchmark="profile_decode",
            model=args.model,
            batch=args.batch,
            source_length=args.source_length,
            generate=args.generate,
            beam_size=args.beam_size,
            ms_per_step=round(seconds * 1e3 / args.generate, 2),
            target_tokens_per_s=round(args.batch * args.generate / seconds, 1),
            op_self_time_ms_per_step={name: round(us / 1e3 / args.generate, 3) for name, us in top},
            op_self_time_share={name: round(us / everything, 3) for name, us in top},
            logdir=args.logdir,
            load_before=load_before,
        )
    )


if __name__ == "__main__":
    main()
