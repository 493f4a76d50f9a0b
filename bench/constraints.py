"""Lexically constrained decoding (`inference/constraints.py`, dynamic beam allocation) on a
trained model's held-out verses (the `test` split of its training data, as `keras-transformer
evaluate` reads it), as Post & Vilar (2018) evaluate it: each verse gets 1-3 phrases (seeded)
from its reference, words or two words in a row that the unconstrained output lacks. One JSON
line: the share of phrases found in the outputs (goal 1.0), sacreBLEU BLEU and chrF without and
with the phrases, and the seconds per verse with 0, 1, 2 and 3 phrases, on the verses that have
three (the slowdown per phrase):

    python bench/constraints.py --model-dir runs/small [--limit 200] [--beam-size 4] [--seed 0]

Timing runs after one warm-up call of each search (the tracing), in this process, each count of
phrases once; measure on a quiet machine (bench/README.md).
"""

from __future__ import annotations

import argparse
import random
import re
import time

from common import emit, held_out_pairs, record

from keras_transformer.config import SearchSettings
from keras_transformer.inference.constraints import phrase_rows
from keras_transformer.inference.evaluation import corpus_scores
from keras_transformer.inference.translator import Translator

MOST_PHRASES = 3


def candidate_phrases(tokenizer, reference: str, output: str, max_length: int) -> list[str]:
    """The words and two-word spans of `reference` (letters only) that `output` lacks and that the
    tokenizer writes without the unknown token, in reference order, without repeats."""
    words = re.findall(r"[^\W\d_]+", reference)
    spans = dict.fromkeys([*words, *(" ".join(pair) for pair in zip(words, words[1:]))])
    usable = []
    for phrase in spans:
        if phrase in output:
            continue
        try:
            phrase_rows(tokenizer, [phrase], 1, max_length)
        except ValueError:
            continue
        usable.append(phrase)
    return usable


def timed(translator, texts, constraints=None) -> tuple[list[str], float]:
    start = time.perf_counter()
    translations = translator.translate(texts, constraints=constraints)
    return translations, time.perf_counter() - start


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--checkpoint", default="latest")
    p.add_argument("--limit", type=int, help="only the first N verses")
    p.add_argument("--beam-size", type=int, default=SearchSettings.beam_size)
    p.add_argument("--seed", type=int, default=0, help="draws the phrases")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    sources, references = held_out_pairs(args.model_dir, args.limit)[:2]
    translator = Translator.from_model_dir(args.model_dir, args.checkpoint, beam_size=args.beam_size)
    max_length = translator.model.config.max_length
    timed(translator, sources[:2])  # the tracing, before any timing
    timed(translator, sources[:2], [["a"], ["a"]])
    plain, _ = timed(translator, sources)
    rng = random.Random(args.seed)
    candidates = [
        candidate_phrases(translator.tokenizer, reference, output, max_length)
        for reference, output in zip(references, plain)
    ]
    drawn = [rng.sample(c, min(len(c), rng.randint(1, MOST_PHRASES))) for c in candidates]
    constrained, _ = timed(translator, sources, drawn)
    found = [phrase in output for output, phrases in zip(constrained, drawn) for phrase in phrases]

    # The slowdown per phrase: the same verses (those with three usable phrases) with 0-3 of them.
    full = [i for i, c in enumerate(candidates) if len(c) >= MOST_PHRASES]
    texts = [sources[i] for i in full]
    seconds = {}
    for count in range(MOST_PHRASES + 1):
        phrases = [rng.sample(candidates[i], MOST_PHRASES)[:count] for i in full] if count else None
        _, elapsed = timed(translator, texts, phrases) if texts else ([], 0.0)
        seconds[str(count)] = round(elapsed / len(texts), 5) if texts else None
    base = seconds["0"]
    emit(
        record(
            benchmark="constraints",
            model_dir=args.model_dir,
            checkpoint=args.checkpoint,
            beam_size=args.beam_size,
            seed=args.seed,
            verses=len(sources),
            phrases=len(found),
            phrases_per_verse={str(n): sum(len(d) == n for d in drawn) for n in range(MOST_PHRASES + 1)},
            inclusion_share=round(sum(found) / len(found), 4) if found else None,
            unconstrained=corpus_scores(plain, references),
            constrained=corpus_scores(constrained, references),
            timed_verses=len(texts),
            seconds_per_verse_by_phrases=seconds,
            slowdown_by_phrases={k: round(v / base, 3) if base and v else None for k, v in seconds.items()},
        )
    )


if __name__ == "__main__":
    main()
