"""Decoding systems against each other, each in a process of its own, rounds interleaved A B A B
(only one process computes at a time). Prints one JSON line:

    python bench/decode_compare.py forced [--workload base] [--search beam] [--runners python xla ...]
        [--rounds 3] [--isa native|avx2] [--intra-threads N] [--inter-threads M]
    python bench/decode_compare.py verses --model-dir runs/demo [--systems python xla ...] [--limit N]
        [--rounds 3] [--isa native|avx2] [--intra-threads N] [--inter-threads M]

Every system runs in a worker (`decode_worker.py`) started once: it loads its model, warms up
(tracing, XLA compilation), then times one round per request, so two engines never share a
process (CTranslate2's OpenMP threads and TensorFlow's pools slow each other whichever way
OpenMP's wait policy is set) and CTranslate2 runs as its users run it: its default threading,
OpenMP's default wait policy (`OMP_WAIT_POLICY` is removed from every worker's environment: a
passive policy makes CTranslate2 ~3x slower on a quiet 2-core machine). Seconds are the median
over rounds; a load change on this shared machine hits all systems alike, so the ratios are
robust where absolute figures are not. The record carries the CPU's ISA flags and the load average
before and after. `--intra-threads N` gives every system N threads per batch instead of its
default (CTranslate2's `intra_threads`, TensorFlow's intra-op pool, LiteRT's `num_threads`), and
`--inter-threads M` M batches at once (CTranslate2's `inter_threads`, with M batches in flight;
TensorFlow's inter-op pool and our `Translator`'s `concurrent_batches`). Their defaults, 0, leave
each engine's own: CTranslate2 one batch at a time on up to 4 threads; our `Translator` one batch
per core at once, TensorFlow's pools one thread per core. So `--intra-threads 1 --inter-threads 1`
runs every system on one thread, and `--intra-threads 1 --inter-threads 2` each engine's throughput
setting on two cores (CTranslate2's documentation suggests it for throughput; `keras-transformer
translate` runs ours so).

`forced`: the fixed work of `decode_runners.py` (base dimensions, seeded random weights, 16
sentences x 32 source tokens, exactly 64 target tokens per hypothesis, beam 4; and the batch-1
latency of its first sentence) for `--runners`: ours (`decode_runners.FORCED_RUNNERS`) and
CTranslate2 fp32 and int8 (`ctranslate2`, `ctranslate2_int8`: `translate_batch` on the same
weights exported by `peers.write_ctranslate2`, quantized to int8 at load). Each round times
`--repeats` calls of each shape (median). Greedy: `--search greedy`.

`verses`: a trained model's held-out verses (the `test` split of the data it was trained on, as
`keras-transformer evaluate` reads them), beam 4, alpha 0.6, length-sorted batches of 32, text to
text, through our `Translator` (`decode_runners.VERSES_SYSTEMS`) and through CTranslate2's
`translate_batch` on the model's `export --format ctranslate2` directory, fp32 and int8, with its
SentencePiece model (`decode_worker.ctranslate2_verses`). Each round translates every verse;
target tokens/s counts the best hypotheses' tokens (EOS included), sacreBLEU and chrF score the
last round's translations. The first round of an XLA system includes one compilation per bucket
shape: read the median. Differences CTranslate2 keeps: its length penalty divides by |y|^alpha
where ours is GNMT's ((5 + |y|) / 6)^alpha, and its length limit is per batch (the longest
source's), ours per sentence.

`--isa avx2` caps every worker at AVX2 on an AVX-512 machine: `ONEDNN_MAX_CPU_ISA=AVX2` (oneDNN,
TensorFlow's matmuls), `XLA_FLAGS=--xla_cpu_max_isa=AVX2` (XLA's generated code) and
`CT2_FORCE_CPU_ISA=AVX2` (CTranslate2's documented override of its own kernels), and
`MKL_ENABLE_INSTRUCTIONS=AVX2` (Intel MKL's dispatch: CTranslate2's matmuls on an Intel CPU, where
it picks MKL as its GEMM backend; without it the caps left CTranslate2's matmuls at AVX-512 there,
`bench/RESULTS.md` "2026-12-02 (evening)"). Its figures are labelled "AVX2
emulated by ISA caps on an AVX-512 CPU": an AVX2-only CPU also differs in cores, caches and clocks.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import subprocess
import sys
import tempfile

from common import WORKLOADS, cpu_flags, emit, held_out_pairs, load_average, median, record

from keras_transformer.special_tokens import EOS_ID, PAD_ID

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decode_worker.py")
CTRANSLATE2 = ("ctranslate2", "ctranslate2_int8")
FORCED_TF = [
    "python",
    "xla",
    "savedmodel",
    "python_bfloat16",
    "savedmodel_bfloat16",
    "tflite",
    "tflite_int8",
    "keras_hub",
    "keras_hub_xla",
]  # decode_runners.FORCED_RUNNERS (not imported: it loads TensorFlow)
VERSES_TF = [
    "python",
    "cli",
    "xla",
    "savedmodel",
    "savedmodel_xla",
    "python_bfloat16",
    "savedmodel_bfloat16",
    "python_exact",
    "savedmodel_exact",
]  # decode_runners.VERSES_SYSTEMS
DEFAULT_SYSTEMS = ["python", "xla", "savedmodel", "python_bfloat16", "ctranslate2", "ctranslate2_int8"]
ISA_CAPS = {
    "native": {},
    "avx2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "XLA_FLAGS": "--xla_cpu_max_isa=AVX2",
        "CT2_FORCE_CPU_ISA": "AVX2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
}
AVX2_EMULATED = "AVX2 emulated by ISA caps on an AVX-512 CPU"
# TensorFlow reads the CPU's own flags and hands bf16 matmuls to oneDNN, which has no bf16 kernel
# below AVX-512 and aborts the process ("could not create a primitive descriptor for the inner
# product"); an AVX2-only CPU runs them in Eigen instead, slower than float32.
NO_BFLOAT16_UNDER_CAPS = "bf16 systems cannot run under --isa avx2 (oneDNN has no bf16 kernel below AVX-512)"
PACKAGES = {
    "tflite": "ai-edge-litert",
    "tflite_int8": "ai-edge-litert",
    "keras_hub": "keras-hub",
    "keras_hub_xla": "keras-hub",
    "ctranslate2": "ctranslate2",
    "ctranslate2_int8": "ctranslate2",
}  # beyond record()'s versions


def child_environment(isa: str) -> dict[str, str]:
    """A worker's environment: this one without OpenMP's wait policy (CTranslate2's default
    threading), with the ISA caps of `isa`."""
    env = {name: value for name, value in os.environ.items() if name != "OMP_WAIT_POLICY"}
    for name, value in ISA_CAPS[isa].items():
        env[name] = f"{env[name]} {value}" if name == "XLA_FLAGS" and env.get(name) else value
    return env


def isa_label(isa: str, flags: list[str]) -> str:
    if isa == "native":
        return "native: " + " ".join(flags)
    return AVX2_EMULATED if "avx512f" in flags else "AVX2 caps on a CPU without AVX-512"


class Worker:
    """One system's process: `ready` after its warm-up, then `ask("round")` and `ask("finish")`."""

    def __init__(self, job: dict, folder: str, env: dict[str, str]):
        self.name = job["system"]
        path = os.path.join(folder, f"{self.name}.json")
        with open(path, "w", encoding="utf-8") as f:
            json.dump(job, f)
        self.process = subprocess.Popen(
            [sys.executable, WORKER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def read(self) -> dict:
        line = self.process.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name}: its worker exited with status {self.process.wait()} (its stderr above)")
        return json.loads(line)

    def ask(self, command: str) -> dict:
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self.read()

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def run_rounds(jobs: list[dict], isa: str, rounds: int) -> tuple[dict, dict, dict]:
    """Start every job's worker (their warm-ups overlap; nothing is timed yet), then `rounds` rounds
    of one request per worker in turn. Returns ({system: ready answer}, {system: [round answers]},
    {system: finish answer})."""
    env = child_environment(isa)
    with tempfile.TemporaryDirectory() as folder:
        workers = [Worker(job, folder, env) for job in jobs]
        try:
            ready = {worker.name: worker.read() for worker in workers}
            answers = {worker.name: [] for worker in workers}
            for _ in range(rounds):
                for worker in workers:
                    answers[worker.name].append(worker.ask("round"))
            final = {worker.name: worker.ask("finish") for worker in workers}
        finally:
            for worker in workers:
                worker.close()
    return ready, answers, final


def ratios(values: dict[str, float], reference: str) -> dict[str, float]:
    return {name: round(value / values[reference], 3) for name, value in values.items()}


def package(name: str) -> str | None:
    return f"{PACKAGES[name]}=={importlib.metadata.version(PACKAGES[name])}" if name in PACKAGES else None


def forced(args) -> dict:
    from decode_runners import build_model, search_settings, source_batch
    from peers import write_ctranslate2

    config = WORKLOADS[args.workload].config
    settings = search_settings(args.search, args.generate, args.beam_size, args.alpha)
    batch = source_batch(config, args.sentences, args.source_length).tolist()
    common_job = dict(
        mode="forced",
        workload=args.workload,
        settings=settings,
        batch=batch,
        repeats=args.repeats,
        intra_threads=args.intra_threads,
        inter_threads=args.inter_threads,
        pad_id=PAD_ID,
        eos_id=EOS_ID,
    )
    with tempfile.TemporaryDirectory() as out:
        if set(args.runners) & set(CTRANSLATE2):
            write_ctranslate2(build_model(args.workload), os.path.join(out, "ctranslate2"))
        common_job["ctranslate2_dir"] = os.path.join(out, "ctranslate2")
        jobs = [{**common_job, "system": name} for name in args.runners]
        ready, answers, _ = run_rounds(jobs, args.isa, args.rounds)
    systems = {}
    for name in args.runners:
        batch_s = median(a["batch_s"] for a in answers[name])
        latency_s = median(a["batch1_latency_s"] for a in answers[name])
        generated = ready[name]["generated_tokens"]
        systems[name] = dict(
            beam_size=settings["beam_size"],
            alpha=None if name.startswith("keras_hub") or args.search == "greedy" else args.alpha,
            generated_tokens=generated,
            batch_s_median=round(batch_s, 6),
            tgt_tokens_per_s=round(args.sentences * generated / batch_s, 1),
            batch1_latency_s=round(latency_s, 6),
            batch_s_per_round=[round(a["batch_s"], 6) for a in answers[name]],
            batch1_latency_s_per_round=[round(a["batch1_latency_s"], 6) for a in answers[name]],
            intra_threads=ready[name]["intra_threads"],
            inter_threads=ready[name]["inter_threads"],
            package=package(name),
        )
    reference = reference_system(args.runners)
    return dict(
        workload=args.workload,
        search=args.search,
        sentences=args.sentences,
        source_length=args.source_length,
        repeats_per_round=args.repeats,
        reference=reference,
        tgt_tokens_per_s_over_reference=ratios({n: s["tgt_tokens_per_s"] for n, s in systems.items()}, reference),
        batch1_latency_over_reference=ratios({n: s["batch1_latency_s"] for n, s in systems.items()}, reference),
        systems=systems,
    )


def verses(args) -> dict:
    from decode_runners import padded_limits

    from keras_transformer.exporters.ctranslate2 import export_ctranslate2
    from keras_transformer.inference.evaluation import corpus_scores
    from keras_transformer.inference.translator import Translator
    from keras_transformer.model_dir import load_model

    model, tokenizer, _ = load_model(args.model_dir, args.checkpoint)
    pairs = held_out_pairs(args.model_dir, args.limit)
    sources, references = pairs.sources, pairs.references
    common_job = dict(
        mode="verses",
        model_dir=args.model_dir,
        checkpoint=args.checkpoint,
        sources=sources,
        beam_size=args.beam_size,
        alpha=args.alpha,
        batch_size=args.batch_size,
        intra_threads=args.intra_threads,
        inter_threads=args.inter_threads,
        max_length=model.config.max_length,
        limits=padded_limits(Translator(model, tokenizer).source_ids(sources), model.config.max_length),
    )
    with tempfile.TemporaryDirectory() as out:
        if set(args.systems) & set(CTRANSLATE2):
            export_ctranslate2(model, tokenizer, os.path.join(out, "ctranslate2"))
        common_job["ctranslate2_dir"] = os.path.join(out, "ctranslate2")
        jobs = [{**common_job, "system": name} for name in args.systems]
        ready, answers, final = run_rounds(jobs, args.isa, args.rounds)
    systems = {}
    for name in args.systems:
        seconds = [a["seconds"] for a in answers[name]]
        scores = corpus_scores(final[name]["translations"], references)
        bleu_signature = scores["bleu_signature"]  # the same for every system
        systems[name] = {
            "seconds_median": round(median(seconds), 3),
            "seconds_per_round": [round(s, 3) for s in seconds],
            "target_tokens": final[name]["target_tokens"],
            "tgt_tokens_per_s": round(final[name]["target_tokens"] / median(seconds), 1),
            "bleu": scores["bleu"],
            "chrf": scores["chrf"],
            "intra_threads": ready[name]["intra_threads"],
            "inter_threads": ready[name]["inter_threads"],
            "batches_at_once": ready[name]["batches_at_once"],
            "package": package(name),
        }
    reference = reference_system(args.systems)
    return dict(
        model_dir=args.model_dir,
        checkpoint=args.checkpoint,
        data=pairs.spec,
        split="test",
        sentences=len(sources),
        beam_size=args.beam_size,
        alpha=args.alpha,
        batch_size=args.batch_size,
        reference=reference,
        tgt_tokens_per_s_over_reference=ratios({n: s["tgt_tokens_per_s"] for n, s in systems.items()}, reference),
        systems=systems,
        bleu_signature=bleu_signature,
    )


def reference_system(names: list[str]) -> str:
    """CTranslate2 fp32 where it runs, else the first system."""
    return "ctranslate2" if "ctranslate2" in names else names[0]


def systems_argument(parser, flag: str, choices: list[str]) -> None:
    parser.add_argument(
        flag,
        nargs="+",
        choices=choices,
        help="each in its own process; ratios are against ctranslate2 where it runs, else the first "
        f"(default: {' '.join(DEFAULT_SYSTEMS)}; without bf16 under --isa avx2)",
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    shared = argparse.ArgumentParser(add_help=False)
    shared.add_argument("--beam-size", type=int, default=4)
    shared.add_argument("--alpha", type=float, default=0.6, help="length penalty (GNMT's; CTranslate2's |y|^alpha)")
    shared.add_argument("--rounds", type=int, default=3, help="A B rounds")
    shared.add_argument("--isa", choices=sorted(ISA_CAPS), default="native", help="avx2: cap every worker at AVX2")
    shared.add_argument(
        "--intra-threads", type=int, default=0, help="threads per batch of every system (default 0: each engine's)"
    )
    shared.add_argument(
        "--inter-threads", type=int, default=0, help="batches at once of every system (default 0: each engine's)"
    )
    modes = parser.add_subparsers(dest="mode", required=True)
    p = modes.add_parser("forced", parents=[shared], help="random weights, a fixed batch, forced length")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="base", help="model sizes")
    p.add_argument("--search", choices=["greedy", "beam"], default="beam")
    p.add_argument("--sentences", type=int, default=16)
    p.add_argument("--source-length", type=int, default=32)
    p.add_argument("--generate", type=int, default=64, help="target tokens per hypothesis, forced")
    p.add_argument("--repeats", type=int, default=1, help="timed calls of each shape per round")
    systems_argument(p, "--runners", FORCED_TF + list(CTRANSLATE2))
    p = modes.add_parser("verses", parents=[shared], help="a trained model on its held-out verses")
    p.add_argument("--model-dir", required=True)
    p.add_argument("--checkpoint", default="latest", help="latest (default), averaged, best, or a checkpoint path")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--limit", type=int, help="only the first N verses")
    systems_argument(p, "--systems", VERSES_TF + list(CTRANSLATE2))
    args = parser.parse_args(argv)
    flag = "runners" if args.mode == "forced" else "systems"
    names = getattr(args, flag)
    if names is None:
        names = [name for name in DEFAULT_SYSTEMS if not (args.isa == "avx2" and "bfloat16" in name)]
    elif args.isa == "avx2" and any("bfloat16" in name for name in names):
        parser.error(NO_BFLOAT16_UNDER_CAPS)
    setattr(args, flag, names)
    return args


def main(argv=None):
    args = parse_args(argv)
    flags = cpu_flags()
    load_before = load_average()
    fields = {"forced": forced, "verses": verses}[args.mode](args)
    emit(
        record(
            benchmark="decode_compare",
            mode=args.mode,
            **fields,
            rounds=args.rounds,
            isa=args.isa,
            isa_label=isa_label(args.isa, flags),
            isa_caps=ISA_CAPS[args.isa],
            process_per_system=True,
            omp_wait_policy="unset in every worker (OpenMP's default)",
            intra_threads=args.intra_threads or "each engine's default",
            inter_threads=args.inter_threads or "each engine's default",
            load_before=load_before,
            load_after=load_average(),
        )
    )


if __name__ == "__main__":
    main()
