"""A pretrained model's road in, at OPUS-MT's size: the import of a Marian directory (seconds), the
served SavedModel's size on disk, and its batch-1 latency beside CTranslate2's on the same weights.
Prints one JSON line:

    python bench/pretrained.py [--size base] [--rounds 5] [--repeats 5]

The model: tests/marian_maker.py's seeded random Marian model, `--size base` opus-mt-en-de's
sizes (6 + 6 post-LN layers, d_model 512, 8 heads, d_ff 2048, swish, tied embeddings, 58,101
pieces; a SentencePiece model of the test fixture, the other pieces made up), `--size tiny` the
tests' (2 + 2 layers, d_model 32: tests/test_bench.py runs it so that the script cannot rot).
Timed in this process: `import_marian` (Marian's own positions and epsilon, as `keras-transformer
import` does), `export --no-tflite` (the SavedModels), and CTranslate2's own conversion of the same
directory (`ctranslate2.converters.OpusMTConverter`, its default settings: float32 weights).

Latency: one source sentence of the fixture (the first of the length nearest `--source-tokens`
pieces), beam 4, alpha 0, up to our length limit (|source| + 50), through our SavedModel's
`translate_ids` and through CTranslate2's `translate_batch` on its conversion, fp32 and int8
(`compute_type` at load). For the two engines to compute the same function, the latency runs on a
second import as CTranslate2's converter computes the model (`sinusoid_layout="halves"`, LayerNorm
epsilon 1e-5: tests/test_import_marian.py's parity settings), exported the same way;
`same_output` and `generated_tokens` say whether the engines' tokens agree (at the base size a
random model rarely ends before the limit; the tiny one ends at once). Each engine runs in a
process of its own (this script with `--worker`), one intra-op thread and one batch at a time
(TensorFlow's intra- and inter-op pools of 1; CTranslate2's `intra_threads=1, inter_threads=1`),
OpenMP's default wait policy (`OMP_WAIT_POLICY` removed from the workers' environment); workers
warm up first, then rounds alternate between them (only one process computes at a time), each
round the median of `--repeats` calls. Seconds are the median over rounds. The record carries the
CPU's ISA flags and the load average before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

import workers

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # marian_maker: the seeded Marian model of the import's tests

SYSTEMS = {"savedmodel": None, "ctranslate2": "float32", "ctranslate2_int8": "int8"}  # system: CT2's compute type
CTRANSLATE2_PARITY = dict(sinusoid_layout="halves", layer_norm_epsilon=1e-5)  # as OpusMTConverter computes
BEAM_SIZE = 4


def disk_bytes(path) -> int:
    return sum(f.stat().st_size for f in pathlib.Path(path).rglob("*") if f.is_file())


def timed(function, *args, **kwargs) -> float:
    start = time.perf_counter()
    function(*args, **kwargs)
    return time.perf_counter() - start


# --- the workers: one engine each, in a process of its own ---------------------------------------


def savedmodel_runner(job: dict):
    """run() -> the best hypothesis' token ids (EOS included) of `translate_ids` on the source."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  the SavedModels hold tensorflow-text ops

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    signature = tf.saved_model.load(job["saved_model"]).signatures["translate_ids"]
    source = tf.constant([job["source_ids"]], tf.int32)  # [1, S]

    def run():
        ids = signature(source_ids=source)["ids"].numpy()[0, 0]  # [L], the best of the beam
        return [int(i) for i in ids if i != job["pad_id"]]

    return run


def ctranslate2_runner(job: dict):
    """run() -> the best hypothesis' token ids (EOS included) by CTranslate2's `translate_batch`, as
    our search: beam 4, alpha 0, no <unk>, no minimum length, our length limit."""
    import ctranslate2

    translator = ctranslate2.Translator(
        job["ctranslate2_dir"], compute_type=SYSTEMS[job["system"]], intra_threads=1, inter_threads=1
    )
    ids = {piece: i for i, piece in enumerate(job["pieces"])}

    def run():
        (result,) = translator.translate_batch(
            [job["source_tokens"]], beam_size=BEAM_SIZE, length_penalty=0.0, max_decoding_length=job["limit"],
            min_decoding_length=0, disable_unk=True, return_end_token=True,
        )  # fmt: skip
        return [ids[token] for token in result.hypotheses[0]]

    return run


def worker(path: str) -> None:
    """`--worker JOB.json`: warm up, answer {"ready"}, then a round per "round" line, the output on "finish"."""
    with open(path, encoding="utf-8") as f:
        job = json.load(f)
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")  # the protocol's channel
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # whatever the libraries print goes to stderr
    run = savedmodel_runner(job) if job["system"] == "savedmodel" else ctranslate2_runner(job)
    output = run()  # warm-up: tracing, allocation
    answers.write(json.dumps({"ready": True}) + "\n")
    answers.flush()
    for line in sys.stdin:
        if line.strip() == "finish":
            answers.write(json.dumps({"ids": output}) + "\n")
            answers.flush()
            return
        seconds = []
        for _ in range(job["repeats"]):
            start = time.perf_counter()
            output = run()
            seconds.append(time.perf_counter() - start)
        answers.write(json.dumps({"seconds": statistics.median(seconds)}) + "\n")
        answers.flush()


class Worker(workers.Worker):
    """A system's process: this script with `--worker`."""

    command = (sys.executable, __file__, "--worker")


def latencies(jobs: list[dict], rounds: int) -> tuple[dict, dict]:
    """({system: [seconds per round]}, {system: output ids}): every worker warmed up, then rounds A B C."""
    with tempfile.TemporaryDirectory() as folder:
        env = workers.without_wait_policy(dict(os.environ))
        started = [Worker(job, folder, env) for job in jobs]
        try:
            for w in started:
                w.read()  # ready
            seconds = {w.name: [] for w in started}
            for _ in range(rounds):
                for w in started:
                    seconds[w.name].append(w.ask("round")["seconds"])
            outputs = {w.name: w.ask("finish")["ids"] for w in started}
        finally:
            for w in started:
                w.close()
    return seconds, outputs


# --- the benchmark ---------------------------------------------------------------------------------


def export_saved_model(model_dir: str, out: str) -> str:
    """`export --no-tflite --alpha 0` (the latency's search: beam 4, alpha 0); the served SavedModel's path."""
    from keras_transformer.cli.main import main as cli
    from keras_transformer.exporters.tensorflow import saved_model_dir

    with contextlib.redirect_stdout(sys.stderr):  # its artifact lines: this script's stdout is its JSON line
        status = cli(["export", "--model-dir", model_dir, "--out", out, "--no-tflite", "--alpha", "0"])
    if status != 0:
        raise SystemExit(f"export of {model_dir} failed")
    return saved_model_dir(out, "translator")


def source_sentence(model_dir: str, tokens: int) -> tuple[list[int], int]:
    """(the ids of the fixture's first source of the length nearest `tokens` pieces, EOS included; our
    length limit)."""
    import numpy as np
    from marian_maker import fixture_lines

    from keras_transformer.model_dir import load_model
    from keras_transformer.search.search import decode_limits
    from keras_transformer.translation.translator import Translator

    model, tokenizer, _ = load_model(model_dir)
    translator = Translator(model, tokenizer)
    rows = translator.source_ids(fixture_lines()[0][:200])
    row = min(rows, key=lambda row: abs(len(row) - tokens))
    limit = int(decode_limits(np.asarray([row], np.int32), model.config.max_length).numpy()[0])
    return [int(i) for i in row], limit


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", choices=("base", "tiny"), default="base", help="opus-mt-en-de's, or the tests'")
    parser.add_argument("--rounds", type=int, default=5, help="rounds alternating between the engines")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per round (median)")
    parser.add_argument("--source-tokens", type=int, default=24, help="the source's length (pieces, EOS included)")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return worker(args.worker)

    import ctranslate2
    from common import cpu_flags, emit, load_average, median, record
    from marian_maker import BASE, TINY, fixture_spm, marian_pieces, write_marian

    from keras_transformer.importers.marian import import_marian
    from keras_transformer.model_dir import load_model

    size = {"base": BASE, "tiny": TINY}[args.size]
    flags, load_before = cpu_flags(), load_average()
    with tempfile.TemporaryDirectory() as folder:
        out = pathlib.Path(folder)
        spm = fixture_spm()
        marian = write_marian(out / "marian", spm, size=size)
        import_s = timed(import_marian, str(marian), str(out / "model"), warn=lambda line: None)
        export_s = timed(export_saved_model, str(out / "model"), str(out / "export"))
        converter = ctranslate2.converters.OpusMTConverter(str(marian))
        convert_s = timed(converter.convert, str(out / "ctranslate2"))
        import_marian(str(marian), str(out / "parity"), warn=lambda line: None, **CTRANSLATE2_PARITY)
        parity_saved_model = export_saved_model(str(out / "parity"), str(out / "parity-export"))
        source_ids, limit = source_sentence(str(out / "parity"), args.source_tokens)
        tokenizer = load_model(str(out / "parity"))[1]
        pieces = [tokenizer.piece(i) for i in range(tokenizer.vocab_size)]
        job = dict(
            saved_model=parity_saved_model, ctranslate2_dir=str(out / "ctranslate2"), source_ids=source_ids,
            source_tokens=[pieces[i] for i in source_ids[:-1]], pieces=pieces, limit=limit, pad_id=0,
            repeats=args.repeats,
        )  # fmt: skip
        seconds, outputs = latencies([{**job, "system": name} for name in SYSTEMS], args.rounds)
        sizes = {
            "saved_model_bytes": disk_bytes(out / "export" / "saved_model" / "translator"),
            "saved_model_ids_bytes": disk_bytes(out / "export" / "saved_model" / "translator_ids"),
            "marian_npz_bytes": (marian / "model.npz").stat().st_size,
            "ctranslate2_bytes": (out / "ctranslate2" / "model.bin").stat().st_size,
        }
        parameters = sum(int(w.numpy().size) for w in load_model(str(out / "model"))[0].weights)
    systems = {
        name: {
            "batch1_latency_s": round(median(seconds[name]), 6),
            "batch1_latency_s_per_round": [round(s, 6) for s in seconds[name]],
            "generated_tokens": len(outputs[name]),
        }
        for name in SYSTEMS
    }
    reference = systems["ctranslate2"]["batch1_latency_s"]
    emit(
        record(
            benchmark="pretrained",
            size=args.size,
            model={
                **dataclasses.asdict(size),
                "vocab_size": len(marian_pieces(spm, size.vocab_size)),
                "our_vocab_size": len(pieces),
                "parameters": parameters,
                "activation": "swish",
                "tied_embeddings": True,
            },  # fmt: skip
            import_s=round(import_s, 3),
            export_savedmodels_s=round(export_s, 3),
            ctranslate2_convert_s=round(convert_s, 3),
            **sizes,
            source_tokens=len(source_ids),
            length_limit=limit,
            beam_size=BEAM_SIZE,
            alpha=0.0,
            systems=systems,
            latency_over_ctranslate2={n: round(s["batch1_latency_s"] / reference, 3) for n, s in systems.items()},
            same_output={n: outputs[n] == outputs["ctranslate2"] for n in SYSTEMS},
            threads="1 intra-op thread, 1 batch at a time, every engine",
            process_per_system=True,
            omp_wait_policy="unset in every worker (OpenMP's default)",
            ctranslate2=f"ctranslate2=={importlib.metadata.version('ctranslate2')}",
            cpu_flags=flags,
            load_before=load_before,
            load_after=load_average(),
            rounds=args.rounds,
            repeats_per_round=args.repeats,
        )
    )


if __name__ == "__main__":
    main()
