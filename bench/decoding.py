"""Decoding speed, one subcommand per question; each prints one JSON line.

`forced` and `verses` (benchmark `decode_compare`): decoding systems against each other, each in a
process of its own, rounds interleaved A B A B (only one process computes at a time):

    python bench/decoding.py forced [--workload base] [--search beam] [--runners python xla ...]
        [--rounds 3] [--isa native|avx2] [--intra-threads N] [--inter-threads M]
    python bench/decoding.py verses --model-dir runs/demo [--systems python xla ...] [--limit N]
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

`int8`: `verses` with int8 weights against float32, per sentence: `Translator` and the ids-only
SavedModel in float32 and with int8 weights (`python_int8`, `savedmodel_int8`: `Transformer.with_int8`,
the weights of `export`'s saved_model/translator_int8/) against CTranslate2 fp32 and int8 on the same
weights; batches of one verse, every engine on one thread (`--batch-size`, `--intra-threads` and
`--inter-threads` change that); the same record as `verses` (BLEU and chrF per system: int8's cost
in quality beside its speed):

    python bench/decoding.py int8 --model-dir runs/demo [--systems ...] [--limit N] [--rounds 3]

`--isa avx2` caps every worker at AVX2 on an AVX-512 machine: `ONEDNN_MAX_CPU_ISA=AVX2` (oneDNN,
TensorFlow's matmuls), `XLA_FLAGS=--xla_cpu_max_isa=AVX2` (XLA's generated code) and
`CT2_FORCE_CPU_ISA=AVX2` (CTranslate2's documented override of its own kernels), and
`MKL_ENABLE_INSTRUCTIONS=AVX2` (Intel MKL's dispatch: CTranslate2's matmuls on an Intel CPU, where
it picks MKL as its GEMM backend; without it the caps left CTranslate2's matmuls at AVX-512 there,
bench/JOURNAL.md, "2026-12-02 (evening)"). Its figures are labelled "AVX2
emulated by ISA caps on an AVX-512 CPU": an AVX2-only CPU also differs in cores, caches and clocks.

`frontier`: the speed-quality frontier (issue 39): `verses` for each model dir given (e.g. the
`small` recipe and a deep-encoder / shallow-decoder one), each with and without its vocabulary
shortlist and int8 weights, and CTranslate2 fp32, int8 and int8 over its vocabulary map of the same
shortlist (`export --format ctranslate2 --shortlist`), on the same weights; every system on one
thread, batches of 32. One JSON line (a point per model and system: BLEU, chrF, target tokens/s,
the ratio to CTranslate2 fp32 on that model) and a PNG of BLEU against target tokens/s:

    python bench/decoding.py frontier --model-dirs runs/demo runs/deep --labels small deep-encoder \
        [--systems ...] [--limit N] [--rounds 3] [--plot bench/frontier.png]

`export-latency`: latency of the exported artifacts (SavedModel vs TFLite vs int8 TFLite) at batch 1
and 16, their sizes, and the BLEU change of int8 weights on a test split:

    python bench/decoding.py export-latency --export OUT [--data bible-en-de] [--limit 200] [--repeats 5]

Latency: median seconds of `translate_ids` (SavedModel, via tf.saved_model.load) and of the
TFLite `serving_default` (LiteRT), same held-out source ids, searches run to the same length.

`search-steps`: how much work each stopping rule of beam search does on a trained model's held-out
verses, through `Translator` (length-sorted batches, one translation per verse): decoder steps
(calls of `decode_step`) and hypothesis-steps (the rows those calls computed: the batch shrinks as
sentences stop). Deterministic counts, not timings:

    python bench/decoding.py search-steps --model-dir runs/demo1080

Rules: `patience_1` (`beam_search`'s default: a sentence stops once K of its hypotheses have
ended, as in CTranslate2 and fairseq) and `exact` (`patience=None`: once no alive hypothesis can
beat the kept ones).

`threads`: throughput of one `Translator` called from 8 threads vs from 1, as a web service's thread
pool calls it: requests of 1-3 held-out verses each, the same requests in both runs (after a
warm-up that traces the search):

    python bench/decoding.py threads --model-dir runs/demo --requests 200

`token-selection`: what a beam step's choice of tokens costs (§6.1's beam search,
`log_probs.best_tokens`): the log-probabilities and the best 2K + 2 tokens of N rows of V logits,
the plain way (`tf.nn.log_softmax`, then `tf.math.top_k`) against the search's
(`log_probs.LogProbs.of`: one softmax; then `log_probs.best_tokens`: the blocked top-k on the
logits, and the normalizer from the best token's probability), and their pieces: log_softmax,
softmax, top_k over whole rows, and the blocked top-k at several block widths
(`log_probs.top_k_block` picks the default). Every figure is microseconds per call inside a
`tf.while_loop`, as the search runs them, less the loop's own cost:

    python bench/decoding.py token-selection --rows 128 32 --vocab 8000 32000 --threads 1

`translator-time`: seconds of `Translator` over a model's held-out verses (beam 4, alpha 0.6, batches
of 32), three runs after a warm-up. Its work uses only what every version of the package has had
(a version from before `model_dir.held_out` reads the Bible's `test` split), so that two versions can
be timed alike, each in its own process:

    PYTHONPATH=/path/to/other/checkout python bench/decoding.py translator-time runs/demo

`controls-cost`: what each decoding control costs (`search/controls.py`): `Translator` over a
model's held-out verses (beam 4, alpha 0.6, batches of 32, one thread per op) with no control,
each control alone and all at once, interleaved A B C ... rounds in one process; seconds, target
tokens/s, its ratio to no control, sacreBLEU BLEU:

    python bench/decoding.py controls-cost --model-dir runs/demo [--limit N] [--rounds 3]

Every subcommand that reads a model's held-out verses reads them through the package's one reader
(`common.held_out_pairs`).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import importlib.metadata
import os
import sys
import tempfile
import time

import tensorflow as tf
import workers
from common import WORKLOADS, command_line, cpu_flags, emit, held_out_pairs, load_average, median, record

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "decode_worker.py")
CTRANSLATE2 = ("ctranslate2", "ctranslate2_int8")
CTRANSLATE2_VMAP = ("ctranslate2_vmap", "ctranslate2_int8_vmap")  # verses only: over the model dir's shortlist
FORCED_TF = [
    "python",
    "xla",
    "savedmodel",
    "python_bfloat16",
    "savedmodel_bfloat16",
    "python_int8",
    "savedmodel_int8",
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
    "python_int8",
    "savedmodel_int8",
    "python_shortlist",
    "savedmodel_shortlist",
    "python_int8_shortlist",
    "savedmodel_int8_shortlist",
    "python_exact",
    "savedmodel_exact",
]  # decode_runners.VERSES_SYSTEMS
DEFAULT_SYSTEMS = ["python", "xla", "savedmodel", "python_bfloat16", "ctranslate2", "ctranslate2_int8"]
FRONTIER_SYSTEMS = [
    "savedmodel",
    "savedmodel_shortlist",
    "savedmodel_int8",
    "savedmodel_int8_shortlist",
    "ctranslate2",
    "ctranslate2_int8",
    "ctranslate2_int8_vmap",
]
INT8_SYSTEMS = ["python", "python_int8", "savedmodel", "savedmodel_int8", "ctranslate2", "ctranslate2_int8"]
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
    "ctranslate2_vmap": "ctranslate2",
    "ctranslate2_int8_vmap": "ctranslate2",
}  # beyond record()'s versions


def child_environment(isa: str) -> dict[str, str]:
    """A worker's environment: this one without OpenMP's wait policy (CTranslate2's default
    threading), with the ISA caps of `isa`."""
    env = workers.without_wait_policy(dict(os.environ))
    for name, value in ISA_CAPS[isa].items():
        env[name] = f"{env[name]} {value}" if name == "XLA_FLAGS" and env.get(name) else value
    return env


def isa_label(isa: str, flags: list[str]) -> str:
    if isa == "native":
        return "native: " + " ".join(flags)
    return AVX2_EMULATED if "avx512f" in flags else "AVX2 caps on a CPU without AVX-512"


class Worker(workers.Worker):
    """One system's process (`decode_worker.py`): ready after its warm-up, then `ask("round")` and
    `ask("finish")`."""

    command = (sys.executable, WORKER)


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


def forced_fields(args) -> dict:
    from decode_runners import build_model, search_settings, source_batch
    from peers import write_ctranslate2

    from keras_transformer.special_tokens import EOS_ID, PAD_ID

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


def verses_fields(args) -> dict:
    from decode_runners import padded_limits

    from keras_transformer.evaluation.evaluation import corpus_scores
    from keras_transformer.exporters.ctranslate2 import export_ctranslate2
    from keras_transformer.model_dir import load_model
    from keras_transformer.model_dir.shortlist import load_shortlist
    from keras_transformer.translation.translator import Translator

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
        if set(args.systems) & {*CTRANSLATE2, *CTRANSLATE2_VMAP}:
            vmap = set(args.systems) & set(CTRANSLATE2_VMAP)
            shortlist = load_shortlist(args.model_dir, model.config.vocab_size) if vmap else None
            export_ctranslate2(model, tokenizer, os.path.join(out, "ctranslate2"), lexical_shortlist=shortlist)
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


def shared_arguments(parser) -> None:
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6, help="length penalty (GNMT's; CTranslate2's |y|^alpha)")
    parser.add_argument("--rounds", type=int, default=3, help="A B rounds")
    parser.add_argument("--isa", choices=sorted(ISA_CAPS), default="native", help="avx2: cap every worker at AVX2")
    parser.add_argument(
        "--intra-threads", type=int, default=0, help="threads per batch of every system (default 0: each engine's)"
    )
    parser.add_argument(
        "--inter-threads", type=int, default=0, help="batches at once of every system (default 0: each engine's)"
    )


def forced_arguments(parser) -> None:
    shared_arguments(parser)
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="base", help="model sizes")
    parser.add_argument("--search", choices=["greedy", "beam"], default="beam")
    parser.add_argument("--sentences", type=int, default=16)
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--generate", type=int, default=64, help="target tokens per hypothesis, forced")
    parser.add_argument("--repeats", type=int, default=1, help="timed calls of each shape per round")
    systems_argument(parser, "--runners", FORCED_TF + list(CTRANSLATE2))


def verses_arguments(parser) -> None:
    shared_arguments(parser)
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--checkpoint", default="latest", help="latest (default), averaged, best, or a checkpoint path")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, help="only the first N verses")
    systems_argument(parser, "--systems", VERSES_TF + list(CTRANSLATE2) + list(CTRANSLATE2_VMAP))


def int8_arguments(parser) -> None:
    verses_arguments(parser)
    parser.set_defaults(batch_size=1, intra_threads=1, inter_threads=1)


def chosen_systems(args) -> list[str]:
    """The systems asked for (`--runners` of `forced`, `--systems` of `verses`), or the default ones
    (without bf16 under `--isa avx2`); bf16 asked for under `--isa avx2` is refused."""
    names = args.runners if args.subcommand == "forced" else args.systems
    if names is None:
        defaults = {"int8": INT8_SYSTEMS, "frontier": FRONTIER_SYSTEMS}.get(args.subcommand, DEFAULT_SYSTEMS)
        return [name for name in defaults if not (args.isa == "avx2" and "bfloat16" in name)]
    if args.isa == "avx2" and any("bfloat16" in name for name in names):
        raise SystemExit(f"decoding.py {args.subcommand}: error: {NO_BFLOAT16_UNDER_CAPS}")
    return names


def compared(fields):
    """A `forced` or `verses` run: `fields(args)` with the systems chosen, in the shared record."""

    def run(args) -> None:
        if args.subcommand == "forced":
            args.runners = chosen_systems(args)
        else:
            args.systems = chosen_systems(args)
        flags = cpu_flags()
        load_before = load_average()
        emit(
            record(
                benchmark="decode_compare",
                mode=args.subcommand,
                **fields(args),
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

    return run


def sizes_on_disk(path: str) -> int:
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def id_batches(tokenizer, texts, batch_size, max_length):
    for start in range(0, len(texts), batch_size):
        yield tokenizer.source_ids(texts[start : start + batch_size], max_length)[0].numpy()  # [B, S]


def median_seconds(function, batch, repeats):
    function(batch)  # warm-up: tracing, allocation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(batch)
        times.append(time.perf_counter() - start)
    return median(times)


def export_latency_arguments(parser) -> None:
    parser.add_argument("--export", required=True)
    parser.add_argument("--name", default="translator")
    parser.add_argument("--data", default="bible-en-de")
    parser.add_argument("--limit", type=int, default=200, help="test sentences for BLEU")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=256, help="the model's max_length")


def export_latency(args) -> None:
    import tensorflow_text  # noqa: F401  the SavedModel holds tensorflow-text ops
    from ai_edge_litert.interpreter import Interpreter

    from keras_transformer.data.sources import read_pairs
    from keras_transformer.data.tokenizer import SubwordTokenizer
    from keras_transformer.evaluation.evaluation import corpus_scores
    from keras_transformer.exporters.tensorflow import ids_saved_model_dir, next_version, saved_model_dir

    version = next_version(args.export, args.name) - 1  # the latest export
    saved_model_path = saved_model_dir(args.export, args.name, version)
    signature = tf.saved_model.load(saved_model_path).signatures["translate_ids"]
    runners = {
        kind: Interpreter(model_path=os.path.join(args.export, f"{kind}.tflite")).get_signature_runner()
        for kind in ("translator", "translator_int8")
    }
    functions = {
        "saved_model": lambda ids: signature(source_ids=tf.constant(ids))["ids"].numpy(),
        "tflite": lambda ids: runners["translator"](source_ids=ids)["ids"],
        "tflite_int8": lambda ids: runners["translator_int8"](source_ids=ids)["ids"],
    }
    tokenizer = SubwordTokenizer.load(os.path.join(args.export, "tokenizer.model"))
    sources, references = read_pairs(args.data, "test", False, args.limit)
    latency = {}
    for batch_size in (1, 16):
        batch = next(id_batches(tokenizer, sources, batch_size, args.max_length))
        for kind, function in functions.items():
            latency[f"{kind}_batch{batch_size}_s"] = round(median_seconds(function, batch, args.repeats), 4)
    bleu = {}
    for kind in ("tflite", "tflite_int8"):
        hypotheses = []
        for batch in id_batches(tokenizer, sources, 16, args.max_length):
            hypotheses += [t.decode("utf-8") for t in tokenizer.detokenize(functions[kind](batch)[:, 0]).numpy()]
        bleu[kind] = corpus_scores(hypotheses, references)["bleu"]
    sizes = {
        "saved_model_bytes": sizes_on_disk(saved_model_path),
        "saved_model_ids_bytes": sizes_on_disk(ids_saved_model_dir(args.export, args.name, version)),
        **{
            f"{kind}_bytes": sizes_on_disk(os.path.join(args.export, f"{kind}.tflite"))
            for kind in ("translator", "translator_int8", "translator_text")
        },
    }
    emit(
        record(
            benchmark="export_latency",
            **latency,
            **sizes,
            test_sentences=len(sources),
            bleu_tflite=bleu["tflite"],
            bleu_tflite_int8=bleu["tflite_int8"],
            bleu_int8_change=round(bleu["tflite_int8"] - bleu["tflite"], 2),
        )
    )


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


def search_steps_arguments(parser) -> None:
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--checkpoint", default="latest")
    parser.add_argument("--beam-size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, help="only the first N verses")


def search_steps(args) -> None:
    from keras_transformer.model_dir import load_model
    from keras_transformer.translation.translator import Translator

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


def requests_of(sources: list[str], count: int) -> list[list[str]]:
    """`count` requests of 1-3 consecutive verses (mixed lengths), cycling through `sources`."""
    requests, start = [], 0
    for index in range(count):
        size = 1 + index % 3
        requests.append([sources[(start + k) % len(sources)] for k in range(size)])
        start += size
    return requests


def timed_requests(translator, requests: list[list[str]], threads: int) -> tuple[float, list[list[str]]]:
    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        outputs = list(pool.map(translator.translate, requests))
    return time.perf_counter() - start, outputs


def threads_arguments(parser) -> None:
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--beam-size", type=int, default=4)


def threads(args) -> None:
    from keras_transformer.translation.translator import Translator

    translator = Translator.from_model_dir(args.model_dir, beam_size=args.beam_size)
    sources = held_out_pairs(args.model_dir, 500).sources
    requests = requests_of(sources, args.requests)
    translator.translate(requests[0])  # tracing
    one_s, one = timed_requests(translator, requests, 1)
    many_s, many = timed_requests(translator, requests, args.threads)
    sentences = sum(len(request) for request in requests)
    emit(
        record(
            benchmark="threads",
            model_dir=args.model_dir,
            requests=len(requests),
            sentences=sentences,
            beam_size=args.beam_size,
            threads=args.threads,
            sentences_per_s_1_thread=round(sentences / one_s, 2),
            sentences_per_s_n_threads=round(sentences / many_s, 2),
            speedup=round(one_s / many_s, 3),
            identical_outputs=one == many,
        )
    )


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
    from keras_transformer.search.log_probs import LogProbs, best_tokens, top_k_block, top_k_rows

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


def token_selection_arguments(parser) -> None:
    parser.add_argument("--rows", nargs="+", type=int, default=[128, 32], help="hypotheses per step (batch x beam)")
    parser.add_argument("--vocab", nargs="+", type=int, default=[8000, 32000])
    parser.add_argument("--beam-size", type=int, default=4, help="2K best tokens per row (+ pad and start)")
    parser.add_argument("--blocks", nargs="+", type=int, default=[32, 64, 128])
    parser.add_argument("--threads", type=int, default=0, help="TensorFlow's intra- and inter-op threads (0: default)")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)


def token_selection(args) -> None:
    if args.threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    load_before = load_average()
    rows = [
        selection_costs(rows, vocab_size, 2 * args.beam_size, args) for vocab_size in args.vocab for rows in args.rows
    ]
    emit(record(benchmark="token_selection", threads=args.threads or "default", costs=rows, load_before=load_before))


def long_standing_pairs(model_dir: str) -> tuple[list[str], list[str]]:
    """The model's held-out pairs through the package's one reader (`common.held_out_pairs`); a version
    of the package from before that reader: the Bible's `test` split, what its models were trained on."""
    try:
        pairs = held_out_pairs(model_dir)
    except ImportError:
        from keras_transformer.data.sources import read_pairs

        return read_pairs("bible-en-de", "test", False)
    return pairs.sources, pairs.references


def translator_time_arguments(parser) -> None:
    parser.add_argument("model_dir", help="a trained model directory (its held-out verses)")


def translator_time(args) -> None:
    import sacrebleu

    from keras_transformer.model_dir import load_model
    from keras_transformer.translation.translator import Translator

    model, tokenizer = load_model(args.model_dir)[:2]
    sources, references = long_standing_pairs(args.model_dir)
    translator = Translator(model, tokenizer)
    translator.translate(sources[:2])  # tracing
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        outputs = translator.translate(sources)
        seconds.append(time.perf_counter() - start)
    emit(
        record(
            benchmark="translator_time",
            package=os.path.dirname(os.path.dirname(sys.modules["keras_transformer"].__file__)),
            seconds=[round(s, 3) for s in seconds],
            median=round(median(seconds), 3),
            bleu=round(sacrebleu.corpus_bleu(outputs, [references]).score, 2),
            load_average=os.getloadavg(),
        )
    )


CONTROLS = {
    "none": {},
    "min_decoding_length": {"min_decoding_length": 3},
    "max_decoding_length": {"max_decoding_length": 100},
    "repetition_penalty": {"repetition_penalty": 1.2},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 3},
    "disable_unk": {"disable_unk": True},
    "suppress_sequences": {"suppress_sequences": ("und und",)},
    "all": {
        "min_decoding_length": 3,
        "repetition_penalty": 1.2,
        "no_repeat_ngram_size": 3,
        "disable_unk": True,
        "suppress_sequences": ("und und",),
    },
}


def controls_cost_arguments(parser) -> None:
    parser.add_argument("--model-dir", required=True, help="a trained model directory (its held-out verses)")
    parser.add_argument("--limit", type=int, help="only the first N held-out verses")
    parser.add_argument("--rounds", type=int, default=3, help="timed passes of every setting, interleaved")


def controls_cost(args) -> None:
    import sacrebleu

    from keras_transformer.model_dir import load_model
    from keras_transformer.translation.translator import Translator

    if not tf.config.threading.get_intra_op_parallelism_threads():  # as keras-transformer translate runs
        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)
        except RuntimeError:  # TensorFlow already runs (an in-process caller): its pools stay
            pass
    model, tokenizer, _ = load_model(args.model_dir)
    sources, references = held_out_pairs(args.model_dir, args.limit)[:2]
    translators = {name: Translator(model, tokenizer, **settings) for name, settings in CONTROLS.items()}
    for translator in translators.values():
        translator.translate(sources[:2])  # tracing
    seconds = {name: [] for name in CONTROLS}
    outputs = {}
    for _ in range(args.rounds):
        for name, translator in translators.items():
            start = time.perf_counter()
            outputs[name] = translator.translate(sources)
            seconds[name].append(time.perf_counter() - start)
    tokens = {
        name: sum(len(ids) for ids in tokenizer.tokenize(out).to_list()) + len(out) for name, out in outputs.items()
    }
    medians = {name: median(s) for name, s in seconds.items()}
    systems = {
        name: {
            "seconds": [round(s, 3) for s in seconds[name]],
            "seconds_median": round(medians[name], 3),
            "tgt_tokens_per_s": round(tokens[name] / medians[name], 1),
            "time_over_none": round(medians[name] / medians["none"], 3),
            "bleu": round(sacrebleu.corpus_bleu(outputs[name], [references]).score, 2),
        }
        for name in CONTROLS
    }
    emit(record(benchmark="controls_cost", model_dir=args.model_dir, sentences=len(sources), systems=systems))


def frontier_arguments(parser) -> None:
    shared_arguments(parser)
    parser.set_defaults(intra_threads=1, inter_threads=1)
    parser.add_argument("--model-dirs", nargs="+", required=True, help="model dirs, each with its shortlist.npz")
    parser.add_argument("--labels", nargs="+", help="a name per model dir (default: the dirs' names)")
    parser.add_argument("--checkpoint", default="latest")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--limit", type=int, help="only the first N verses")
    parser.add_argument("--plot", default="bench/frontier.png", help="PNG path ('' for none)")
    systems_argument(parser, "--systems", VERSES_TF + list(CTRANSLATE2) + list(CTRANSLATE2_VMAP))


def frontier(args) -> None:
    args.systems = chosen_systems(args)
    labels = args.labels or [os.path.basename(os.path.normpath(path)) for path in args.model_dirs]
    if len(labels) != len(args.model_dirs):
        raise SystemExit("decoding.py frontier: error: one --labels name per --model-dirs directory")
    load_before, models, points = load_average(), {}, []
    for label, model_dir in zip(labels, args.model_dirs):
        fields = verses_fields(argparse.Namespace(**vars(args), model_dir=model_dir))
        models[label] = fields
        over = fields["tgt_tokens_per_s_over_reference"]
        for name, system in fields["systems"].items():
            point = {key: system[key] for key in ("bleu", "chrf", "tgt_tokens_per_s", "seconds_median")}
            points.append({"model": label, "system": name, **point, "over_ctranslate2": over.get(name)})
    if args.plot:
        plot_frontier(points, args.plot)
    emit(
        record(
            benchmark="frontier",
            points=points,
            models=models,
            rounds=args.rounds,
            plot=args.plot or None,
            load_before=load_before,
            load_after=load_average(),
            machine_flags=cpu_flags(),
        )
    )


def plot_frontier(points: list[dict], path: str) -> None:
    """BLEU against target tokens/s, a colour per model, a marker per engine, each point named."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 5))
    colours = dict(zip(dict.fromkeys(p["model"] for p in points), plt.rcParams["axes.prop_cycle"].by_key()["color"]))
    for p in points:
        marker = "s" if p["system"].startswith("ctranslate2") else "o"
        ax.scatter(p["tgt_tokens_per_s"], p["bleu"], color=colours[p["model"]], marker=marker)
        ax.annotate(
            p["system"], (p["tgt_tokens_per_s"], p["bleu"]), fontsize=7, xytext=(3, 3), textcoords="offset points"
        )
    for model, colour in colours.items():
        ax.scatter([], [], color=colour, label=model)
    ax.scatter([], [], color="grey", marker="o", label="ours (SavedModel)")
    ax.scatter([], [], color="grey", marker="s", label="CTranslate2")
    ax.set_xscale("log")
    ax.set_xlabel("target tokens/s (one thread, batches of 32; log scale)")
    ax.set_ylabel("sacreBLEU on the held-out verses")
    ax.set_title("Speed and quality: pick the point on the upper right")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


COMMANDS = {
    "forced": (forced_arguments, compared(forced_fields), "systems against each other on fixed work, random weights"),
    "verses": (verses_arguments, compared(verses_fields), "systems against each other on a model's held-out verses"),
    "int8": (int8_arguments, compared(verses_fields), "int8 weights against float32 and CTranslate2, per sentence"),
    "frontier": (frontier_arguments, frontier, "BLEU against speed: models x shortlist x int8, and CTranslate2's"),
    "export-latency": (export_latency_arguments, export_latency, "the exported artifacts' latency, sizes, int8 BLEU"),
    "search-steps": (search_steps_arguments, search_steps, "the work of each stopping rule (counts, not timings)"),
    "threads": (threads_arguments, threads, "one Translator called from N threads vs from 1"),
    "token-selection": (token_selection_arguments, token_selection, "what a beam step's choice of tokens costs"),
    "translator-time": (translator_time_arguments, translator_time, "Translator's seconds, any version of the package"),
    "controls-cost": (controls_cost_arguments, controls_cost, "what each decoding control costs"),
}
main = command_line(__doc__, COMMANDS)

if __name__ == "__main__":
    main()
