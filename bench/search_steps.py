"""How much work each stopping rule of beam search does on a trained model's held-out verses
(the `test` split of its training data, as `keras-transformer evaluate` reads it), through
`Translator` (length-sorted batches, one translation per verse): decoder steps (calls of
`decode_step`) and hypothesis-steps (the rows those calls computed: the batch shrinks as
sentences stop). Deterministic counts, not timings; one JSON line:

    python bench/search_steps.py --model-dir runs/demo1080

Rules: `patience_1` (`beam_search`'s default: a sentence stops once K of its hypotheses have
ended, as in CTranslate2 and fairseq) and `exact` (`patience=None`: once no alive hypothesis can
beat the kept ones).
"""

from __future__ import annotations

import argparse

import tensorflow as tf
from common import emit, held_out_pairs, record

from keras_transformer.inference.translator import Translator
from keras_transformer.model_dir import load_model

RULES = {"patience_1": 1.0, "exact": None}


class CountingModel:
    """The decoding interface of `model` (`config`, `start_decoding`, `decode_step`), counting
    the decoder's calls and the hypotheses each call computes."""

    def __init__(self, model):
        self.model, self.config = model, model.config
        self.steps = tf.Variable(0, dtype=tf.int64)
        self.hypothesis_steps = tf.Variable(0, dtype=tf.int64)

    def start_decoding(self, source_ids, hypotheses, max_length=None):
        return self.model.start_decoding(source_ids, hypotheses, max_length)

    def decode_step(self, token_ids, position, cache, context):
        self.steps.assign_add(1)
        self.hypothesis_steps.assign_add(tf.cast(tf.shape(token_ids)[0], tf.int64))  # [B'] rows
        return self.model.decode_step(token_ids, position, cache, context)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--checkpoint", default="latest")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--limit", type=int, help="only the first N verses")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    model, tokenizer, _ = load_model(args.model_dir, args.checkpoint)
    sources = held_out_pairs(args.model_dir, args.limit).sources
    rules = {}
    for name, patience in RULES.items():
        counting = CountingModel(model)
        settings = dict(batch_size=args.batch_size, beam_size=args.beam_size, alpha=args.alpha, patience=patience)
        Translator(counting, tokenizer, **settings).translate(sources)
        rules[name] = {"decoder_steps": int(counting.steps), "hypothesis_steps": int(counting.hypothesis_steps)}
    emit(
        record(
            benchmark="search_steps",
            model_dir=args.model_dir,
            sentences=len(sources),
            beam_size=args.beam_size,
            alpha=args.alpha,
            batch_size=args.batch_size,
            rules=rules,
            exact_over_patience_1={
                count: round(rules["exact"][count] / rules["patience_1"][count], 3)
                for count in ("decoder_steps", "hypothesis_steps")
            },
        )
    )


if __name__ == "__main__":
    main()
