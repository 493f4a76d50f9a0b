"""Our decoding against CTranslate2 on the same weights, in one process, interleaved A B A B.
Prints one JSON line:

    python bench/ctranslate2_compare.py verses --model-dir runs/demo [--savedmodel] [--xla] [--exact] [--bfloat16]
        [--rounds 3]
    python bench/ctranslate2_compare.py forced [decode_compare.py's options]

`verses`: a trained model's held-out verses (the `test` split of the data it was trained on, as
`keras-transformer evaluate` reads them), beam 4, alpha 0.6, length-sorted batches of 32,
text to text: our tokenizer, the search, our detokenizer. Systems:

- `ours`: `Translator`, what `keras-transformer translate` runs;
- `ours_savedmodel` (with `--savedmodel`): the same `Translator` whose search is the package's
  ids-only SavedModel export (`serving.TranslationModule`, the signature TF Serving runs as
  `translate_ids`), loaded in this process;
- `ours_xla`, `ours_savedmodel_xla` (with `--xla`): the same two with the search compiled by XLA
  (`beam_search(jit_compile=True)`, `export --jit-compile`); their first round includes one
  compilation per bucket shape;
- `ours_exact`, `ours_savedmodel_exact` (with `--exact`): the same two with the exact stopping
  rule (`patience=None`: a sentence stops when no alive hypothesis can beat the kept ones); the
  others stop a sentence once K of its hypotheses have ended (`patience=1`, our default), as
  CTranslate2 does;
- `ours_bfloat16`, `ours_savedmodel_bfloat16` (with `--bfloat16`): `ours` and `ours_savedmodel` on
  the model in bf16 (`Transformer.with_dtype`, `--dtype bfloat16`);
- `ctranslate2`, `ctranslate2_int8`: CTranslate2 on our export (`peers.ctranslate2_translator`),
  float32 and int8, fed the same source tokens in the same length-sorted batches.

Each round runs every system once over all the verses; seconds are the median over rounds
(after an untimed warm-up on two verses), target tokens/s counts the best hypotheses' tokens
(EOS included) over those seconds, and sacreBLEU and chrF score the hypotheses.
`relative_to_ctranslate2` is each system's target tokens/s over CTranslate2 fp32's.
Differences CTranslate2 keeps: its length penalty divides by |y|^alpha where ours is GNMT's
((5 + |y|) / 6)^alpha, and its length limit is per batch (`decode_limits` of the batch's longest
source), ours per sentence.

`forced`: the fixed work of `decode_compare.py` (base dimensions, random weights, 16 sentences x
32 source tokens, 64 forced target tokens, beam 4, and batch-1 latency for 64 tokens) with the
`ctranslate2` and `ctranslate2_int8` runners next to ours; the same as `python
bench/decode_compare.py` with `FORCED_DEFAULTS` before the options given here (which override them).
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import tempfile
import time

import decode_compare
import numpy as np
import tensorflow as tf
from common import emit, load_average, median, record
from peers import ctranslate2_translator

from keras_transformer import beam_search
from keras_transformer.config import DecodingConfig
from keras_transformer.data.sources import read_pairs
from keras_transformer.exporters.ctranslate2 import vocabulary
from keras_transformer.exporters.signatures import TranslationModule
from keras_transformer.exporters.tensorflow import ids_saved_model_dir
from keras_transformer.inference.decoding import decode_limits
from keras_transformer.inference.evaluation import corpus_scores
from keras_transformer.inference.translator import Translator
from keras_transformer.model_dir import load_model
from keras_transformer.special_tokens import PAD_ID

FORCED_RUNNERS = [
    "savedmodel",
    "python",
    "xla",
    "python_bfloat16",
    "savedmodel_bfloat16",
    "ctranslate2",
    "ctranslate2_int8",
]
FORCED_DEFAULTS = ["--workload", "base", "--search", "beam", "--runners", *FORCED_RUNNERS]
WARMUP_VERSES = 2


class CountingTranslator(Translator):
    """Our `Translator` with its search given as `search(source_ids [B, S], n) -> (ids [B, n', L],
    scores [B, n'])` (n' >= n: the SavedModel's `translate_ids` returns every beam), counting the
    tokens of the best hypotheses (EOS included)."""

    def __init__(self, model, tokenizer, search, **kwargs):
        super().__init__(model, tokenizer, **kwargs)
        self.search = search
        self.target_tokens = 0

    def decode(self, source_ids, n=None):
        ids, scores = self.search(source_ids, n)
        self.target_tokens += int(tf.math.count_nonzero(ids[:, 0] != PAD_ID))
        return ids[:, :n], scores[:, :n]  # [B, n, L], [B, n]


def ours(model, tokenizer, args, savedmodel: bool = False, jit_compile: bool = False, patience=DecodingConfig.patience):
    """translate(texts) -> (translations, target tokens) by our search, in Python or through the
    SavedModel, in the TensorFlow graph or compiled by XLA, with the exact stopping rule or `patience`."""
    settings = dict(beam_size=args.beam_size, alpha=args.alpha, patience=patience)
    decode = functools.partial(beam_search, **settings, jit_compile=jit_compile)
    if savedmodel:
        with tempfile.TemporaryDirectory() as out:
            path = ids_saved_model_dir(out, "translator")
            TranslationModule(model, decode=decode).save(path)
            signature = tf.saved_model.load(path).signatures["serving_default"]  # variables are read in now

        def search(source_ids, n):
            result = signature(source_ids=tf.constant(source_ids))  # every beam
            return result["ids"], result["scores"]
    else:

        def search(source_ids, n):
            result = decode(model, source_ids, nbest=n)
            return result.ids, result.scores

    def translate(texts):
        translator = CountingTranslator(model, tokenizer, search, batch_size=args.batch_size, **settings)
        return translator.translate(texts), translator.target_tokens

    return translate


def padded(rows, pad_id: int) -> np.ndarray:
    """[N, longest] int32 from rows of ids."""
    batch = np.full((len(rows), max([1, *map(len, rows)])), pad_id, np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


def ctranslate2_system(model, tokenizer, args, compute_type: str):
    """translate(texts) -> (translations, target tokens) by CTranslate2 on our weights: our source ids
    (truncated as `Translator` truncates them; CTranslate2 appends the EOS), the same length-sorted
    batches, our detokenizer."""
    config = model.config
    tokens = vocabulary(tokenizer, config)
    ids = {token: i for i, token in enumerate(tokens)}
    translator = ctranslate2_translator(model, tokens, compute_type)
    tokenize = Translator(model, tokenizer)

    def translate(texts):
        rows = tokenize.source_ids(texts)  # each ends with EOS
        order = sorted(range(len(rows)), key=lambda k: len(rows[k]))
        hypotheses = [[] for _ in rows]
        for start in range(0, len(order), args.batch_size):
            chunk = order[start : start + args.batch_size]
            sources = padded([rows[k] for k in chunk], PAD_ID)  # [B, S]
            limit = int(np.max(decode_limits(sources, config.max_length)))  # the longest source's
            results = translator.translate_batch(
                [[tokens[i] for i in rows[k][:-1]] for k in chunk],
                beam_size=args.beam_size,
                length_penalty=args.alpha,
                max_decoding_length=limit,
                return_end_token=True,
            )
            for k, result in zip(chunk, results):
                hypotheses[k] = [ids[token] for token in result.hypotheses[0]]
        translations = tokenizer.detokenize(padded(hypotheses, PAD_ID)).numpy()
        return [text.decode("utf-8") for text in translations], sum(map(len, hypotheses))

    return translate


def verses(args):
    load_before = load_average()
    model, tokenizer, values = load_model(args.model_dir, args.checkpoint)
    sources, references = read_pairs(values["data_config"].data, "test", limit=args.limit)
    systems = {"ours": ours(model, tokenizer, args)}
    if args.savedmodel:
        systems["ours_savedmodel"] = ours(model, tokenizer, args, savedmodel=True)
    if args.xla:  # the first round includes the XLA compilations (one per bucket shape): read the median
        systems["ours_xla"] = ours(model, tokenizer, args, jit_compile=True)
        if args.savedmodel:
            systems["ours_savedmodel_xla"] = ours(model, tokenizer, args, savedmodel=True, jit_compile=True)
    if args.bfloat16:
        bf16 = model.with_dtype("bfloat16")
        systems["ours_bfloat16"] = ours(bf16, tokenizer, args)
        if args.savedmodel:
            systems["ours_savedmodel_bfloat16"] = ours(bf16, tokenizer, args, savedmodel=True)
    if args.exact:
        systems["ours_exact"] = ours(model, tokenizer, args, patience=None)
        if args.savedmodel:
            systems["ours_savedmodel_exact"] = ours(model, tokenizer, args, savedmodel=True, patience=None)
    systems["ctranslate2"] = ctranslate2_system(model, tokenizer, args, "float32")
    systems["ctranslate2_int8"] = ctranslate2_system(model, tokenizer, args, "int8")
    for translate in systems.values():
        translate(sources[:WARMUP_VERSES])  # tracing, allocation
    seconds = {name: [] for name in systems}
    outputs = {}
    for _ in range(args.rounds):
        for name, translate in systems.items():
            start = time.perf_counter()
            outputs[name] = translate(sources)  # the same every round
            seconds[name].append(time.perf_counter() - start)
    results = {}
    for name, (translations, target_tokens) in outputs.items():
        scores = corpus_scores(translations, references)
        bleu_signature = scores["bleu_signature"]  # the same for every system
        results[name] = {
            "seconds_median": round(median(seconds[name]), 3),
            "seconds_per_round": [round(s, 3) for s in seconds[name]],
            "target_tokens": target_tokens,
            "tgt_tokens_per_s": round(target_tokens / median(seconds[name]), 1),
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
        }
    emit(
        record(
            benchmark="ctranslate2_compare",
            mode="verses",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            data=values["data_config"].data,
            split="test",
            sentences=len(sources),
            beam_size=args.beam_size,
            alpha=args.alpha,
            batch_size=args.batch_size,
            rounds=args.rounds,
            systems=results,
            relative_to_ctranslate2={
                name: round(result["tgt_tokens_per_s"] / results["ctranslate2"]["tgt_tokens_per_s"], 3)
                for name, result in results.items()
            },
            bleu_signature=bleu_signature,
            ctranslate2=importlib.metadata.version("ctranslate2"),
            load_before=load_before,
        )
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    modes = parser.add_subparsers(dest="mode", required=True)
    p = modes.add_parser("verses", help="a trained model on its held-out verses")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--checkpoint", default="latest", help="latest (default), averaged, best, or a checkpoint path")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--alpha", type=float, default=0.6, help="length penalty (ours GNMT's, CTranslate2's |y|^alpha)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3, help="A B rounds")
    p.add_argument("--limit", type=int, help="only the first N verses")
    p.add_argument("--savedmodel", action="store_true", help="also our search through the exported SavedModel")
    p.add_argument("--bfloat16", action="store_true", help="also ours on the model in bf16 (--dtype bfloat16)")
    p.add_argument("--exact", action="store_true", help="also ours with the exact stopping rule (patience=None)")
    p.add_argument("--xla", action="store_true", help="also our search compiled by XLA (beam_search(jit_compile=True))")
    modes.add_parser("forced", help="decode_compare.py's fixed work with the CTranslate2 runners; its options follow")
    args, options = parser.parse_known_args(argv)
    if args.mode == "verses" and options:
        parser.error(f"unrecognized arguments: {' '.join(options)}")
    return args, options


def main(argv=None):
    args, options = parse_args(argv)
    if args.mode == "forced":
        decode_compare.main(FORCED_DEFAULTS + options)
    else:
        verses(args)


if __name__ == "__main__":
    main()
