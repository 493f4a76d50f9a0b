"""`keras-transformer serve`: a translation service speaking LibreTranslate's API (`keras_transformer/service`).

    keras-transformer serve --model-dir runs/small --port 5000
    curl -s localhost:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "Jesus wept.", "source": "en", "target": "de"}'

SIGTERM or Ctrl+C: uvicorn stops accepting connections, answers the requests in flight, the model
thread finishes what is queued, and the command exits 0.
"""

from __future__ import annotations

import signal

from keras_transformer.cli.common import training_length_ratio

DEFAULT_PORT = 5000  # LibreTranslate's


def add(subparsers):
    from keras_transformer.service.choice import ARTIFACTS, CHOICE

    p = subparsers.add_parser("serve", help="a translation HTTP service (LibreTranslate's API)")
    model = p.add_mutually_exclusive_group(required=True)
    model.add_argument("--model-dir", metavar="DIR", help="serve the model of a model directory")
    model.add_argument("--export", metavar="DIR", help="serve an exported SavedModel (OUT of export)")
    p.add_argument(
        "--artifact",
        choices=ARTIFACTS,
        help="with --export: the float or int8 SavedModel, or the TFLite model run by LiteRT (default: the "
        f"export's {CHOICE}, written by bench/serving.py choose: the fastest within 0.5 BLEU of float; without "
        "it saved_model)",
    )
    p.add_argument("--checkpoint", default="latest", help="with --model-dir: latest (default), averaged, best, ema")
    p.add_argument("--languages", metavar="SRC-TGT", help="the language pair (default: from the training data's name)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})")
    p.add_argument("--api-keys", metavar="FILE", help="require one of these keys (one per line) in api_key")
    p.add_argument("--req-limit", type=int, metavar="N", help="requests per minute per key (or address)")
    p.add_argument("--char-limit", type=int, default=10_000, metavar="N", help="characters per request (10000)")
    p.add_argument("--batch-limit", type=int, metavar="N", help="texts per request (default: no limit)")
    p.add_argument("--max-batch-tokens", type=int, default=4096, metavar="N", help="source tokens per model batch")
    p.add_argument("--batch-timeout-ms", type=float, default=5.0, metavar="T", help="wait for more texts (5 ms)")
    p.add_argument("--queue-limit", type=int, default=1024, metavar="N", help="texts waiting, then 503 (1024)")
    p.add_argument("--no-length-ratio", action="store_true", help="confidence: skip the training pairs' length ratio")
    return p


def _positive(name: str, value) -> None:
    if value is not None and value < 1:
        raise ValueError(f"--{name} must be >= 1, got {value}")


def run(args) -> int:
    import uvicorn

    from keras_transformer.service.app import ServiceConfig, create_app
    from keras_transformer.service.languages import export_languages, model_dir_languages
    from keras_transformer.service.limits import read_api_keys

    for name in ("req_limit", "char_limit", "batch_limit", "max_batch_tokens", "queue_limit", "port"):
        _positive(name.replace("_", "-"), getattr(args, name))
    config = ServiceConfig(
        api_keys=read_api_keys(args.api_keys) if args.api_keys else None,
        req_limit=args.req_limit,
        char_limit=args.char_limit,
        batch_limit=args.batch_limit,
        max_batch_tokens=args.max_batch_tokens,
        batch_timeout_ms=args.batch_timeout_ms,
        queue_limit=args.queue_limit,
    )
    length_ratio = None
    if args.model_dir:
        from keras_transformer.translation.translator import Translator

        languages = model_dir_languages(args.model_dir, args.languages)
        translator = Translator.from_model_dir(args.model_dir, args.checkpoint)
        if not args.no_length_ratio:
            length_ratio = training_length_ratio(args.model_dir)
    else:
        languages = export_languages(args.export, args.languages)
        translator = export_translator(args.export, served_artifact(args.export, args.artifact))
    app = create_app(translator, languages, config, length_ratio)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
    stopped = []
    # uvicorn re-raises the signal that stopped it after its graceful shutdown: handled here, so that a
    # drained server exits 0
    signal.signal(signal.SIGTERM, lambda number, frame: stopped.append(number))
    print(f"serving {args.model_dir or args.export} on http://{args.host}:{args.port}", flush=True)
    server.run()
    return 0 if server.started else 1


def served_artifact(export_dir: str, artifact: str | None) -> str:
    """`artifact` if given, else the export's chosen one (`service/choice.py`), else the float
    SavedModel, with a note on stderr."""
    import sys

    from keras_transformer.service.choice import CHOICE, FLOAT, read_choice

    if artifact is not None:
        return artifact
    chosen = read_choice(export_dir)
    if chosen is None:
        print(
            f"keras-transformer: note: {export_dir} has no {CHOICE} (bench/serving.py choose writes it): "
            f"serving the float SavedModel ({FLOAT})",
            file=sys.stderr,
        )
        return FLOAT
    print(f"keras-transformer: serving {chosen}, the choice of {export_dir}/{CHOICE}", file=sys.stderr)
    return chosen


def export_translator(path: str, artifact: str):
    """The translator of one artifact (`ARTIFACTS`) of the export `path`."""
    int8 = artifact.endswith("_int8")
    if artifact.startswith("tflite"):
        from keras_transformer.service.litert import LiteRTTranslator

        return LiteRTTranslator(path, int8=int8)
    from keras_transformer.translation.exported import SavedModelTranslator

    return SavedModelTranslator(path, int8=int8)
