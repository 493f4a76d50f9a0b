"""The translation service under load, and its confidence against quality (issue 52).

    python bench/serving.py load --model-dir runs/small --clients 1 8 32 --requests 500
    python bench/serving.py load --export runs/export --artifact tflite --clients 1 32 --requests 500
    python bench/serving.py confidence --model-dir runs/small
    python bench/serving.py choose --export runs/export

`load` starts `keras-transformer serve` in a process of its own on 127.0.0.1 (a free port), sends
`--warmup` requests (up to 32 clients: the searches trace their batch shapes), then for each client
count C: C threads, each sending single-sentence POST /translate requests (held-out verses, cycled)
until `--requests` have been sent in all; a bounded loop, one request in flight per client. One JSON
line: per C, sentences/s, target tokens/s (the translations' SentencePiece tokens), latency
p50/p95/p99, errors by status, the server's RSS (/proc/PID/status VmRSS) before the warm-up (cold),
after it (start) and at the end. The issue's goals: 32 clients >= 3x one client's throughput; RSS
growth < 50 MB over 5,000 requests.

    python bench/serving.py load --model-dir runs/small --clients 32 --requests 5000 --warmup 1000

`choose`: each artifact of the export (the float and int8 SavedModels, the TFLite models run by
LiteRT: those it holds) translates the held-out verses in one process, one artifact after another
(a warm-up batch first); its sentences/s and corpus BLEU, and the choice `serve --export` then runs
by default: the fastest whose BLEU is within 0.5 of float's, written to EXPORT/serving_choice.json
(`keras_transformer/service/choice.py`).

`confidence`: the held-out verses (`--split`: test, or validation to choose by) translated, their
confidence (`translation/confidence.py`) against sentence chrF (Spearman), the mean chrF of the
clean verses each flag picks against those none picks, and the share flagged of clean verses vs
degenerate inputs: the references as sources (another language), a word repeated, text that is
empty after cleaning (punctuation and symbols only); also the share of each that language
detection refuses.
"""

from __future__ import annotations

import collections
import json
import math
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

from common import command_line, emit, held_out_pairs, record

WARMUP_REQUESTS = 3
PUNCTUATION_ONLY = ("...", "!!! ???", "- * -", "«»", "( )", "§ 12", "★★★", "—")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    raise OSError(f"no VmRSS for PID {pid}")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))] if ordered else float("nan")


def post(url: str, body: dict, timeout: float = 300) -> tuple[int, dict]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, {}


def start_server(args) -> tuple[subprocess.Popen, str]:
    port = free_port()
    model = ["--model-dir", args.model_dir]
    if args.export:
        model = ["--export", args.export, "--artifact", args.artifact]
    languages = ["--languages", args.languages] if args.languages else []
    command = [sys.executable, "-m", "keras_transformer", "serve", *model, *languages, "--port", str(port)]
    command += ["--char-limit", "100000", "--queue-limit", "100000", "--no-length-ratio"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"serve ended: {process.stderr.read()[-2000:]}")
        try:
            urllib.request.urlopen(url + "health", timeout=1).read()
            return process, url
        except OSError:
            time.sleep(0.2)
    process.kill()
    raise SystemExit("serve did not answer within 300 s")


def model_dir_of(args) -> str:
    if args.model_dir:
        return args.model_dir
    with open(os.path.join(args.export, "translator.json"), encoding="utf-8") as f:
        return json.load(f)["model_dirs"][0]


def run_clients(url: str, sentences: list[str], pair: dict, clients: int, requests: int) -> dict:
    """`requests` single-sentence requests from `clients` threads, one in flight each."""
    latencies, statuses, translations = [], collections.Counter(), []
    lock, counter = threading.Lock(), iter(range(requests))

    def client():
        while True:
            with lock:
                i = next(counter, None)
            if i is None:
                return
            start = time.perf_counter()
            status, body = post(url + "translate", {"q": sentences[i % len(sentences)], **pair})
            took = time.perf_counter() - start
            with lock:
                latencies.append(took)
                statuses[status] += 1
                if status == 200:
                    translations.append(body["translatedText"])

    start = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"seconds": time.perf_counter() - start, "latencies": latencies, "statuses": statuses, "out": translations}


def load_arguments(parser) -> None:
    model = parser.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-dir")
    model.add_argument("--export")
    parser.add_argument("--artifact", default="saved_model", help="with --export: saved_model, saved_model_int8, ...")
    parser.add_argument("--languages", help="SRC-TGT, where the training data's name says none")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=500, help="requests per client count")
    parser.add_argument("--limit", type=int, default=793, help="held-out verses sent (cycled)")
    parser.add_argument(
        "--warmup", type=int, default=WARMUP_REQUESTS, help="requests (32 clients) before RSS's start is read"
    )


def load(args) -> None:
    import sentencepiece

    model_dir = model_dir_of(args)
    sentences = [text for text in held_out_pairs(model_dir, args.limit).sources if text.strip()]
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(model_dir, "tokenizer.model"))
    process, url = start_server(args)
    try:
        source = json.loads(urllib.request.urlopen(url + "languages", timeout=10).read())[0]
        pair = {"source": source["code"], "target": source["targets"][0]}
        rss_cold = rss_mb(process.pid)
        run_clients(url, sentences, pair, min(32, args.warmup), args.warmup)
        rss_start, runs = rss_mb(process.pid), []
        for clients in args.clients:
            found = run_clients(url, sentences, pair, clients, args.requests)
            tokens = sum(len(processor.encode(text)) for text in found["out"])
            runs.append(
                {
                    "clients": clients,
                    "requests": args.requests,
                    "seconds": round(found["seconds"], 3),
                    "sentences_per_s": round(len(found["out"]) / found["seconds"], 2),
                    "target_tokens_per_s": round(tokens / found["seconds"], 1),
                    **{f"p{p}_ms": round(1000 * percentile(found["latencies"], p / 100), 1) for p in (50, 95, 99)},
                    "errors": {str(s): n for s, n in found["statuses"].items() if s != 200},
                    "rss_mb": rss_mb(process.pid),
                }
            )
        rss_end = rss_mb(process.pid)
    finally:
        process.terminate()
        process.wait(timeout=120)
    first = runs[0]["sentences_per_s"]
    emit(
        record(
            benchmark="serving_load",
            artifact="model_dir" if args.model_dir else args.artifact,
            runs=runs,
            speedup_over_first=[round(run["sentences_per_s"] / first, 2) if first else None for run in runs],
            rss_cold_mb=rss_cold,
            warmup_requests=args.warmup,
            rss_start_mb=rss_start,
            rss_end_mb=rss_end,
            requests_total=args.requests * len(args.clients),
        )
    )


def confidence_arguments(parser) -> None:
    parser.add_argument("--model-dir", required=True)
    parser.add_argument("--limit", type=int, default=793, help="held-out verses (default: all 793)")
    parser.add_argument("--split", default="test", choices=("validation", "test"), help="the verses' split")


def flagged_chrf(clean, chrf: list[float]) -> dict:
    """Mean sentence chrF of the clean verses each flag picks, of those no flag picks, and of all:
    whether a flag finds the worse translations."""

    def mean(values):
        return round(statistics.fmean(values), 2) if values else None

    names = sorted({flag for c in clean for flag in c.flags})
    found = {name: mean([f for c, f in zip(clean, chrf) if name in c.flags]) for name in names}
    return {**found, "none": mean([f for c, f in zip(clean, chrf) if not c.flags]), "all": mean(chrf)}


def shares(found) -> float:
    return round(sum(bool(c.flags) for c in found) / len(found), 3) if found else float("nan")


def correlation(value: float) -> float | None:
    """Rounded; None where undefined (a constant input: every translation alike)."""
    return None if math.isnan(value) else round(float(value), 4)


def confidence_run(args) -> None:
    import sacrebleu
    from scipy.stats import spearmanr

    from keras_transformer.service.languages import Detector, model_dir_languages
    from keras_transformer.translation.confidence import LengthRatio, confidence
    from keras_transformer.translation.translator import Translator

    pairs = held_out_pairs(args.model_dir, args.limit, split=args.split)
    sources, references = pairs.sources, pairs.references
    translator = Translator.from_model_dir(args.model_dir)
    length_ratio = LengthRatio.from_model_dir(args.model_dir)
    translations = translator.translate(sources)
    clean = confidence(translator, sources, translations, length_ratio)
    chrf = [sacrebleu.sentence_chrf(t, [r]).score for t, r in zip(translations, references)]
    degenerate = {
        "another_language": references,
        "repeated_word": [" ".join([source.split()[0]] * 12) for source in sources if source.split()],
        "empty_after_cleaning": list(PUNCTUATION_ONLY),
    }
    detector = Detector(model_dir_languages(args.model_dir))
    groups = {}
    for name, texts in degenerate.items():
        found = confidence(translator, texts, translator.translate(texts), length_ratio)
        refused = sum(detector.detect(text)[0] != detector.languages.source for text in texts)
        groups[name] = {
            "inputs": len(texts),
            "flagged_share": shares(found),
            "flags": dict(collections.Counter(flag for c in found for flag in c.flags)),
            "detection_refused_share": round(refused / len(texts), 3),
            "mean_confidence": round(sum(c.score for c in found) / len(found), 4),
        }
    emit(
        record(
            benchmark="serving_confidence",
            split=args.split,
            verses=len(sources),
            spearman_confidence_chrf=correlation(spearmanr([c.score for c in clean], chrf).statistic),
            clean_flagged_share=shares(clean),
            clean_flags=dict(collections.Counter(flag for c in clean for flag in c.flags)),
            clean_chrf_by_flag=flagged_chrf(clean, chrf),
            clean_mean_confidence=round(sum(c.score for c in clean) / len(clean), 4),
            degenerate=groups,
        )
    )


def choose_arguments(parser) -> None:
    parser.add_argument("--export", required=True, help="an export's OUT (keras-transformer export)")
    parser.add_argument("--limit", type=int, default=793, help="held-out verses (default: all 793)")


def choose_run(args) -> None:
    from keras_transformer.cli.serve import export_translator
    from keras_transformer.evaluation.evaluation import corpus_scores
    from keras_transformer.service.choice import ARTIFACTS, write_choice

    args.model_dir = None
    pairs = held_out_pairs(model_dir_of(args), args.limit)
    sources, references = pairs.sources, pairs.references
    figures = {}
    for artifact in ARTIFACTS:
        try:
            translator = export_translator(args.export, artifact)
        except (ValueError, OSError) as error:  # not in this export (--no-tflite)
            print(f"{artifact}: skipped ({' '.join(str(error).split())})", file=sys.stderr)
            continue
        translator.translate(sources[:WARMUP_REQUESTS])
        start = time.perf_counter()
        translations = translator.translate(sources)
        seconds = time.perf_counter() - start
        figures[artifact] = {
            "sentences_per_s": round(len(sources) / seconds, 2),
            "bleu": round(corpus_scores(translations, references)["bleu"], 2),
            "seconds": round(seconds, 3),
        }
    chosen = write_choice(args.export, figures, verses=len(sources), measured=record(benchmark="serving_choice"))
    emit(record(benchmark="serving_choice", verses=len(sources), choice=chosen["choice"], artifacts=figures))


main = command_line(
    __doc__,
    {
        "load": (load_arguments, load, "throughput, latency, errors and RSS of `serve` under C concurrent clients"),
        "confidence": (confidence_arguments, confidence_run, "confidence vs chrF, flags on degenerate inputs"),
        "choose": (choose_arguments, choose_run, "each artifact's sentences/s and BLEU; serve's default artifact"),
    },
)

if __name__ == "__main__":
    main()
