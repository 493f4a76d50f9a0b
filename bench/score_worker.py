"""One scoring system in a process of its own, driven by `quality.py score-compare` (never run by hand).

    python bench/score_worker.py '{"system": "ours" | "ctranslate2", "pairs": PAIRS.json, ...}'

It scores the pairs (`[sources, targets, max_length]` in the job's `pairs` file) once untimed on
two pairs, then `rounds` times, and prints {"seconds": [...], "log_probs": [...]} (the last round's
summed log-probability of each pair). CTranslate2's system imports ctranslate2 and sentencepiece
only: no TensorFlow in its process, and CTranslate2 at its default threading.
"""

from __future__ import annotations

import json
import os
import sys
import time

WARMUP_PAIRS = 2


def timed(score, sources, targets, rounds: int) -> tuple[list[float], list[float]]:
    score(sources[:WARMUP_PAIRS], targets[:WARMUP_PAIRS])
    seconds = []
    for _ in range(rounds):
        start = time.perf_counter()
        log_probs = score(sources, targets)
        seconds.append(time.perf_counter() - start)
    return seconds, log_probs


def run_ours(job: dict, sources, targets, max_length: int) -> dict:
    from keras_transformer.translation.translator import Translator

    translator = Translator.from_model_dir(job["model_dir"], batch_size=job["batch_size"])
    seconds, log_probs = timed(
        lambda s, t: [result.log_prob for result in translator.score(s, t)], sources, targets, job["rounds"]
    )
    return {"seconds": seconds, "log_probs": log_probs}


def run_ctranslate2(job: dict, sources, targets, max_length: int) -> dict:
    import ctranslate2
    import sentencepiece

    model_file = os.path.join(job["ctranslate2"], "tokenizer.model")
    processor = sentencepiece.SentencePieceProcessor(model_file=model_file)
    translator = ctranslate2.Translator(job["ctranslate2"])  # its default threading

    def score(sources, targets):
        keep = max_length - 1  # as `Translator` cuts them (CTranslate2 adds EOS, and start to targets)
        source_tokens = [tokens[:keep] for tokens in processor.encode(sources, out_type=str)]
        target_tokens = [tokens[:keep] for tokens in processor.encode(targets, out_type=str)]
        results = translator.score_batch(source_tokens, target_tokens, max_batch_size=job["batch_size"])
        return [sum(result.log_probs) for result in results]

    seconds, log_probs = timed(score, sources, targets, job["rounds"])
    return {"seconds": seconds, "log_probs": log_probs}


def main() -> None:
    job = json.loads(sys.argv[1])
    with open(job["pairs"], encoding="utf-8") as f:
        sources, targets, max_length = json.load(f)
    run = run_ours if job["system"] == "ours" else run_ctranslate2
    print(json.dumps(run(job, sources, targets, max_length)))


if __name__ == "__main__":
    main()
