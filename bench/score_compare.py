"""Scoring given translations: ours (`Translator.score`, `keras-transformer score`) against
CTranslate2's `score_batch` on the same weights (our `export --format ctranslate2`), each system
in a process of its own (CTranslate2 at its default threading). Prints one JSON line:

    python bench/score_compare.py --model-dir runs/demo [--limit N] [--rounds 3] [--batch-size 32]

The pairs: the held-out verses of the model's training data (its `test` split) with their
reference translations, text in: each system tokenizes (ours in TensorFlow, CTranslate2's user with
the SentencePiece library; both cut sources and targets to max_length - 1 tokens), then scores in
length-sorted batches of `--batch-size` pairs. Seconds
are the median over rounds after an untimed warm-up on two pairs; pairs/s over those seconds.
`max_abs_log_prob_difference`: the largest difference of a pair's summed log-probability between
the systems (CTranslate2 renormalises its softmax without pad and start:
`exporters.ctranslate2.never_generated_bias`; tests/test_ctranslate2.py checks each token to 1e-4).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

WARMUP_PAIRS = 2


def _timed(score, sources, targets, rounds: int) -> tuple[list[float], list[float]]:
    score(sources[:WARMUP_PAIRS], targets[:WARMUP_PAIRS])
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        log_probs = score(sources, targets)
        seconds.append(time.perf_counter() - start)
    return seconds, log_probs


def run_ours(args, sources, targets, max_length: int) -> dict:
    from keras_transformer.inference.translator import Translator

    translator = Translator.from_model_dir(args.model_dir, batch_size=args.batch_size)
    seconds, log_probs = _timed(
        lambda s, t: [result.log_prob for result in translator.score(s, t)], sources, targets, args.rounds
    )
    return {"seconds": seconds, "log_probs": log_probs}


def run_ctranslate2(args, sources, targets, max_length: int) -> dict:
    import ctranslate2
    import sentencepiece

    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(args.ctranslate2, "tokenizer.model"))
    translator = ctranslate2.Translator(args.ctranslate2)  # its default threading

    def score(sources, targets):
        keep = max_length - 1  # as `Translator` cuts them (CTranslate2 adds EOS, and start to targets)
        source_tokens = [tokens[:keep] for tokens in processor.encode(sources, out_type=str)]
        target_tokens = [tokens[:keep] for tokens in processor.encode(targets, out_type=str)]
        results = translator.score_batch(source_tokens, target_tokens, max_batch_size=args.batch_size)
        return [sum(result.log_probs) for result in results]

    seconds, log_probs = _timed(score, sources, targets, args.rounds)
    return {"seconds": seconds, "log_probs": log_probs}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True)
    p.add_argument("--limit", type=int, help="only the first N held-out pairs")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--system", choices=("ours", "ctranslate2"), help=argparse.SUPPRESS)  # a child process
    p.add_argument("--pairs", help=argparse.SUPPRESS)
    p.add_argument("--ctranslate2", help=argparse.SUPPRESS)
    return p


def child(args) -> None:
    with open(args.pairs, encoding="utf-8") as f:
        sources, targets, max_length = json.load(f)
    run = run_ours if args.system == "ours" else run_ctranslate2
    print(json.dumps(run(args, sources, targets, max_length)))


def main(argv=None) -> None:
    args = parser().parse_args(argv)
    if args.system:
        return child(args)
    from common import emit, held_out_pairs, median, record

    from keras_transformer.exporters.ctranslate2 import export_ctranslate2
    from keras_transformer.model_dir import load_model

    sources, targets = held_out_pairs(args.model_dir, args.limit)[:2]
    model, tokenizer, _ = load_model(args.model_dir)
    systems = {}
    with tempfile.TemporaryDirectory() as out:
        export_ctranslate2(model, tokenizer, os.path.join(out, "ctranslate2"))
        pairs = os.path.join(out, "pairs.json")
        with open(pairs, "w", encoding="utf-8") as f:
            json.dump([sources, targets, model.config.max_length], f)
        for system in ("ours", "ctranslate2"):
            command = [sys.executable, os.path.abspath(__file__), "--model-dir", args.model_dir, "--system", system]
            command += ["--pairs", pairs, "--ctranslate2", os.path.join(out, "ctranslate2")]
            command += ["--rounds", str(args.rounds), "--batch-size", str(args.batch_size)]
            env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
            result = subprocess.run(command, capture_output=True, text=True, env=env)
            if result.returncode != 0:
                raise RuntimeError(f"{system} failed:\n{result.stderr[-3000:]}")
            systems[system] = json.loads(result.stdout.strip().splitlines()[-1])
    difference = max(abs(a - b) for a, b in zip(systems["ours"]["log_probs"], systems["ctranslate2"]["log_probs"]))
    line = {"pairs": len(sources), "batch_size": args.batch_size, "rounds": args.rounds, "systems": {}}
    for name, system in systems.items():
        seconds = median(system["seconds"])
        line["systems"][name] = {"seconds": round(seconds, 4), "pairs_per_s": round(len(sources) / seconds, 1)}
    ours, theirs = (line["systems"][name]["pairs_per_s"] for name in ("ours", "ctranslate2"))
    line["ours_relative_to_ctranslate2"] = round(ours / theirs, 3)
    line["max_abs_log_prob_difference"] = round(difference, 6)
    emit(record(**line))


if __name__ == "__main__":
    main()
