"""One decoding system in a process of its own, driven by `decoding.py forced` and `verses` (never
run by hand).

    python bench/decode_worker.py JOB.json

The job names the system and its work. The worker loads its model, warms up (tracing, XLA
compilation, allocation: never timed), checks the work and answers {"ready": ...}; then for every
"round" line on stdin it runs the work once and answers its seconds; "finish" answers the last
round's output and ends. Answers are JSON lines on stdout, whatever the libraries print goes to
stderr. CTranslate2's systems import ctranslate2 and sentencepiece only: no TensorFlow in their
process, and CTranslate2's threading as its users get it (its default thread count, OpenMP's
default wait policy), unless the job sets `intra_threads` (threads per batch: CTranslate2's
`intra_threads`, TensorFlow's intra-op pool, LiteRT's `num_threads`) or `inter_threads` (batches
at once: CTranslate2's `inter_threads`, with as many batches in flight; TensorFlow's inter-op pool
and our `Translator`'s `concurrent_batches`).
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# system: compute type at load; `*_vmap` (verses only): `use_vmap`, the export's vmap.txt of the model dir's shortlist
CTRANSLATE2 = {
    "ctranslate2": "float32",
    "ctranslate2_int8": "int8",
    "ctranslate2_vmap": "float32",
    "ctranslate2_int8_vmap": "int8",
}
WARMUP_VERSES = 2


def time_calls(run, ids, repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(run(ids))  # materialise the result: the search has finished
        times.append(time.perf_counter() - start)
    return times


def threads(job: dict) -> dict:
    """Set the system's threads before it computes anything, from `job["intra_threads"]` (threads
    per batch) and `job["inter_threads"]` (batches at once), 0 leaving the engine's default:
    CTranslate2's `intra_threads` and `inter_threads` (default 1: one batch at a time), or
    TensorFlow's intra-op pool and its inter-op pool (which runs a search's ops, so it holds the
    batches searched at once; default: one thread per core, as many batches at once as
    `Translator.concurrent_batches()`); the `cli` system's intra-op pool is the command line's
    (`use_op_threads`: one thread by default). Returns the counts it runs with (intra 0:
    CTranslate2's own default)."""
    if job["system"] in CTRANSLATE2:
        return {"intra_threads": job["intra_threads"], "inter_threads": job["inter_threads"] or 1}
    import tensorflow as tf

    if job["system"] == "cli":  # as `keras-transformer translate` sets TensorFlow up
        from keras_transformer.cli.common import use_op_threads

        use_op_threads(job["intra_threads"] or None)
    elif job["intra_threads"]:
        tf.config.threading.set_intra_op_parallelism_threads(job["intra_threads"])
    if job["inter_threads"]:
        tf.config.threading.set_inter_op_parallelism_threads(job["inter_threads"])
    return {
        "intra_threads": tf.config.threading.get_intra_op_parallelism_threads(),
        "inter_threads": tf.config.threading.get_inter_op_parallelism_threads(),
    }


def ctranslate2_translator(job: dict):
    import ctranslate2

    return ctranslate2.Translator(
        job["ctranslate2_dir"],
        compute_type=CTRANSLATE2[job["system"]],
        intra_threads=job["intra_threads"],
        inter_threads=job["inter_threads"] or 1,
    )


def ctranslate2_forced(job: dict):
    """run(source_ids [B, S]) -> ids [B, 1, L] by CTranslate2's `translate_batch` on the exported
    random-weight model: its beam search with `length_penalty=alpha` (|y|^alpha, not GNMT's: no
    matter here, every hypothesis has the same length), the best hypothesis."""
    translator = ctranslate2_translator(job)
    with open(os.path.join(job["ctranslate2_dir"], "shared_vocabulary.json"), encoding="utf-8") as f:
        tokens = json.load(f)
    ids = {token: i for i, token in enumerate(tokens)}
    settings, pad_id = job["settings"], job["pad_id"]

    def run(source_ids):
        sources = [[tokens[i] for i in row if i != pad_id] for row in source_ids]
        results = translator.translate_batch(
            sources,
            beam_size=settings["beam_size"],
            length_penalty=settings["alpha"],
            max_decoding_length=settings["length_b"],
        )
        hypotheses = [[ids[token] for token in result.hypotheses[0]] for result in results]
        out = np.full((len(hypotheses), 1, max(map(len, hypotheses))), pad_id, np.int32)  # [B, 1, L]
        for row, hypothesis in zip(out, hypotheses):
            row[0, : len(hypothesis)] = hypothesis
        return out

    return run


def ctranslate2_verses(job: dict):
    """translate(texts) -> (translations, target tokens) as a CTranslate2 user translates with our
    `export --format ctranslate2` directory: its SentencePiece model (sources truncated as our
    `Translator` truncates them; CTranslate2 appends the EOS), `translate_batch` on our batches of
    `batch_size` length-sorted sources (the longest batches first, `inter_threads` of them in
    flight from threads of their own) with the length limit of each batch's longest source
    (`job["limits"]`: ours per sentence, CTranslate2's per call), `sp.decode` without "<unk>"
    (our detokenizer drops it); `*_vmap` systems over the export's vocabulary map of the model dir's
    shortlist (`use_vmap`). Target tokens count the best hypotheses' tokens, EOS included."""
    import sentencepiece

    translator = ctranslate2_translator(job)
    sp = sentencepiece.SentencePieceProcessor(model_file=os.path.join(job["ctranslate2_dir"], "tokenizer.model"))
    keep, limits, batch_size = job["max_length"] - 1, job["limits"], job["batch_size"]
    pool = ThreadPoolExecutor(job["inter_threads"] or 1)  # as many batches in flight as the translator runs

    def translate(texts):
        pieces = [row[:keep] for row in sp.encode(list(texts), out_type=str)]
        order = sorted(range(len(pieces)), key=lambda k: len(pieces[k]))

        def search(chunk):
            return translator.translate_batch(
                [pieces[k] for k in chunk],
                beam_size=job["beam_size"],
                length_penalty=job["alpha"],
                max_decoding_length=max(limits[k] for k in chunk),
                return_end_token=True,
                use_vmap=job["system"].endswith("_vmap"),
            )

        chunks = [order[start : start + batch_size] for start in range(0, len(order), batch_size)][::-1]
        hypotheses = [[] for _ in pieces]
        for chunk, results in zip(chunks, pool.map(search, chunks)):  # the longest first, as our Translator
            for k, result in zip(chunk, results):
                hypotheses[k] = result.hypotheses[0]
        unknown = sp.unk_id()
        translations = [sp.decode([i for i in sp.piece_to_id(h) if i != unknown]) for h in hypotheses]
        return translations, sum(map(len, hypotheses))

    return translate


class Forced:
    """`decode_runners`' fixed work: a round times `repeats` calls of the batch and of its first
    sentence alone."""

    def __init__(self, job: dict):
        counts = threads(job)
        if job["system"] in CTRANSLATE2:
            self.run = ctranslate2_forced(job)
        else:
            from decode_runners import forced_runner

            self.run = forced_runner(job)
        self.batch, self.repeats = np.asarray(job["batch"], np.int32), job["repeats"]
        ids = np.asarray(self.run(self.batch))  # [B, beam, L]: warm-up, and the work checked
        generated = (ids != job["pad_id"]).sum(axis=-1)  # [B, beam]
        want = job["settings"]["length_b"]
        if not (generated == want).all() or (ids == job["eos_id"]).any():
            raise SystemExit(
                f"{job['system']}: the work is not fixed: generated lengths {sorted(set(generated.ravel()))}, "
                f"want {want}"
            )
        self.run(self.batch[:1])
        self.ready = {"generated_tokens": int(generated.max()), **counts}

    def round(self) -> dict:
        batch = statistics.median(time_calls(self.run, self.batch, self.repeats))
        latency = statistics.median(time_calls(self.run, self.batch[:1], self.repeats))
        return {"batch_s": batch, "batch1_latency_s": latency}

    def finish(self) -> dict:
        return {}


class Verses:
    """A trained model's held-out verses, text to text: a round translates them all."""

    def __init__(self, job: dict):
        counts = threads(job)
        if job["system"] in CTRANSLATE2:
            self.translate = ctranslate2_verses(job)
        else:
            from decode_runners import verses_translator

            self.translate = verses_translator(job)
            counts["batches_at_once"] = self.translate.concurrent_batches
        self.sources = job["sources"]
        self.translate(self.sources[:WARMUP_VERSES])  # tracing, allocation
        self.ready = {"batches_at_once": counts["inter_threads"], **counts}

    def round(self) -> dict:
        start = time.perf_counter()
        self.output = self.translate(self.sources)  # the same every round
        return {"seconds": time.perf_counter() - start}

    def finish(self) -> dict:
        translations, target_tokens = self.output
        return {"translations": translations, "target_tokens": target_tokens}


def main():
    with open(sys.argv[1], encoding="utf-8") as f:
        job = json.load(f)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the protocol's channel
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # anything else printed goes to stderr

    def answer(message: dict) -> None:
        answers.write(json.dumps(message) + "\n")
        answers.flush()

    work = {"forced": Forced, "verses": Verses}[job["mode"]](job)
    answer({"ready": True, **work.ready})
    for line in sys.stdin:
        command = line.strip()
        if command == "round":
            answer(work.round())
        elif command == "finish":
            answer(work.finish())
            return
        else:
            raise SystemExit(f"decode_worker: unknown command {command!r}; send 'round' or 'finish'")


if __name__ == "__main__":
    main()
