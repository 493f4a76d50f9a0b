"""The Starlette app of `keras-transformer serve`: LibreTranslate's API over a `Translator`.

    POST /translate       q (a string or a list), source (a code or "auto"), target, format text|html,
                          api_key, alternatives (N), confidence (true: our extension) ->
                          translatedText of q's shape and order, alternatives, detectedLanguage for
                          auto, confidence; with a list, an item the model cannot read (another
                          language) is "" with its message in `errors` (null for the others)
    POST /detect          q -> [{language, confidence}]
    GET  /languages       [{code, name, targets}]
    POST /translate_file  file (multipart: a format of `keras_transformer.files`, kt.translate_file),
                          source, target, api_key -> {translatedFileUrl}
    GET  /download_file/NAME, GET /frontend/settings, GET /health, GET /metrics (Prometheus text)

Bodies as LibreTranslate reads them: JSON, or a form (urlencoded or multipart), or query parameters.
Every error is {"error": "one line"}: 400 bad input, 403 key, 429 rate (Retry-After), 503 queue full
(Retry-After), 500 otherwise. Translations run on the model thread through the `Batcher`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import time
import uuid
from collections import deque

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Route

from keras_transformer import files
from keras_transformer.service.batching import Batcher
from keras_transformer.service.languages import Detector, Languages
from keras_transformer.service.limits import LimitError, RateLimiter, check_chars, check_key
from keras_transformer.service.metrics import CONTENT_TYPE, Metrics
from keras_transformer.translation.confidence import LengthRatio, confidence
from keras_transformer.translation.streaming import token_counter

KEPT_FILES = 32  # translated files kept for download, the newest
EXTENSIONS = tuple(extension for _, extensions in files.FORMATS.values() for extension in extensions)


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """The `serve` flags: `api_keys` (None: open), `req_limit` requests per minute per key or address,
    `char_limit` characters per request, `batch_limit` texts per request (None: no limit), and the
    batching policy (`batching.Batcher`)."""

    api_keys: frozenset[str] | None = None
    req_limit: int | None = None
    char_limit: int | None = 10_000
    batch_limit: int | None = None
    max_batch_tokens: int = 4096
    batch_timeout_ms: float = 5.0
    queue_limit: int = 1024


@dataclasses.dataclass(frozen=True)
class Options:
    """What is asked of a text; texts of equal options share a model call."""

    kind: str = "text"  # "text", "html" or "file" (the text is a path)
    target_lang: str | None = None  # a multilingual model's
    alternatives: int = 0
    scores: bool = False
    target_path: str | None = None


class BadRequest(LimitError):
    def __init__(self, message: str):
        super().__init__(400, message)


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _error(status: int, message: str, retry_after: int | None = None) -> JSONResponse:
    headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
    return JSONResponse({"error": message}, status_code=status, headers=headers)


def translate_texts(translator, texts: list[str], html: bool, target_lang=None) -> list[str]:
    """HTML: each text with its tags kept (`markup=True`); plain text: each text a document of
    sentences (`split=True`, as LibreTranslate splits its input into sentences)."""
    if html:
        return translator.translate(texts, markup=True)
    language = {} if target_lang is None else {"target_lang": target_lang}
    return translator.translate(texts, split=True, **language)


def create_app(
    translator, languages: Languages, config: ServiceConfig = ServiceConfig(), length_ratio: LengthRatio | None = None
) -> Starlette:
    """The app serving `translator`, which reads `languages.source` and writes `languages.targets`."""
    metrics = Metrics()
    limiter = RateLimiter(config.req_limit)
    detector = Detector(languages)
    downloads = tempfile.mkdtemp(prefix="kt-serve-")
    kept: deque[str] = deque()

    def run(options: Options, texts: list[str]) -> list[dict]:  # on the model thread
        target_lang = options.target_lang
        if options.kind == "file":  # target_lang: the request's target, which a file may name (XLIFF, TMX)
            for source in texts:
                files.translate_file(translator, source, options.target_path, target_lang=target_lang)
            return [{}] * len(texts)
        alternatives = [[] for _ in texts]
        if options.alternatives:
            language = {} if target_lang is None else {"target_lang": target_lang}
            nbest = translator.translate_nbest(texts, n=options.alternatives + 1, **language)
            translations = [hypotheses[0][0] for hypotheses in nbest]
            alternatives = [[text for text, _ in hypotheses[1:]] for hypotheses in nbest]
        else:
            translations = translate_texts(translator, texts, options.kind == "html", target_lang)
        scored = confidence(translator, texts, translations, length_ratio, target_lang) if options.scores else None
        return [
            {"text": t, "alternatives": a, **({"confidence": scored[i].to_dict()} if scored else {})}
            for i, (t, a) in enumerate(zip(translations, alternatives))
        ]

    batcher = Batcher(
        run,
        token_counter(translator),
        max_batch_tokens=config.max_batch_tokens,
        timeout_s=config.batch_timeout_ms / 1000,
        queue_limit=config.queue_limit,
        metrics=metrics,
    )

    async def fields(request: Request) -> dict:
        """The request's parameters: query, then the JSON body or the form over them."""
        values = dict(request.query_params)
        if request.method != "POST":
            return values
        if request.headers.get("content-type", "").split(";")[0].strip() == "application/json":
            try:
                body = json.loads(await request.body())
            except (json.JSONDecodeError, UnicodeDecodeError) as error:
                raise BadRequest(f"invalid JSON body: {_one_line(error)}") from None
            if not isinstance(body, dict):
                raise BadRequest("the JSON body must be an object")
            return {**values, **body}
        form = await request.form()
        for key in form.keys():
            found = form.getlist(key)
            values[key] = found if len(found) > 1 else found[0]
        return values

    def admit(request: Request, values: dict) -> None:
        key = values.get("api_key")
        check_key(config.api_keys, key if isinstance(key, str) else None)
        limiter.check(key if config.api_keys else (request.client.host if request.client else "?"))

    def target_of(values: dict) -> str | None:
        target = values.get("target")
        if not isinstance(target, str) or not target:
            raise BadRequest("invalid request: missing target parameter")
        if target not in languages.targets:
            into = ", ".join(languages.targets)
            raise BadRequest(f"target language {target} is not supported: this model translates into {into}")
        return target if languages.multilingual else None

    def source_of(values: dict) -> str:
        source = values.get("source", "auto")
        if source != "auto" and source != languages.source:
            raise BadRequest(
                f"source language {source} is not supported: this model translates from {languages.source}"
            )
        return source

    def texts_of(values: dict) -> tuple[list[str], bool]:
        q = values.get("q")
        if q is None:
            raise BadRequest("invalid request: missing q parameter")
        listed = isinstance(q, list)
        texts = q if listed else [q]
        if not all(isinstance(text, str) for text in texts):
            raise BadRequest("q must be a string or a list of strings")
        if config.batch_limit is not None and len(texts) > config.batch_limit:
            raise BadRequest(f"{len(texts)} texts exceed the limit of {config.batch_limit} per request (--batch-limit)")
        check_chars(texts, config.char_limit)
        return texts, listed

    def count_of(values: dict) -> int:
        value = values.get("alternatives", 0)
        try:
            count = int(value)
        except (TypeError, ValueError):
            raise BadRequest(f"alternatives must be a whole number, got {value!r}") from None
        if count < 0:
            raise BadRequest(f"alternatives must be >= 0, got {count}")
        return count

    def flag(values: dict, name: str) -> bool:
        value = values.get(name, False)
        return value is True or (isinstance(value, str) and value.lower() in ("1", "true", "yes"))

    async def translate(request: Request) -> Response:
        values = await fields(request)
        admit(request, values)
        texts, listed = texts_of(values)
        source, target_lang = source_of(values), target_of(values)
        kind = values.get("format", "text")
        if kind not in ("text", "html"):
            raise BadRequest(f"format must be text or html, got {kind!r}")
        alternatives = count_of(values)
        if alternatives and kind == "html":
            raise BadRequest("alternatives are given for format text only")
        detected = None
        if source == "auto":
            detected = await run_in_threadpool(lambda: [detector.detect(text) for text in texts])
        errors = [None] * len(texts)
        if detected:
            for i, (code, _) in enumerate(detected):
                if code != languages.source and texts[i].strip():
                    errors[i] = f"the text is in {code}: this model translates from {languages.source}"
            if not listed and errors[0]:
                raise BadRequest(errors[0])
        todo = [i for i, error in enumerate(errors) if error is None]
        options = Options(kind, target_lang, alternatives, flag(values, "confidence"))
        if options.scores and not hasattr(translator, "tokenizer"):
            raise BadRequest("confidence is computed by a model dir's translator: serve --model-dir")
        results = await batcher.submit(options, [texts[i] for i in todo])
        answers = [{"text": "", "alternatives": []} for _ in texts]
        for i, result in zip(todo, results):
            answers[i] = result
        body = {"translatedText": [a["text"] for a in answers] if listed else answers[0]["text"]}
        if alternatives:
            body["alternatives"] = [a["alternatives"] for a in answers] if listed else answers[0]["alternatives"]
        if detected:
            found = [{"confidence": c, "language": code} for code, c in detected]
            body["detectedLanguage"] = found if listed else found[0]
        if options.scores:
            scores = [a.get("confidence") for a in answers]
            body["confidence"] = scores if listed else scores[0]
        if listed and any(errors):
            body["errors"] = errors
        return JSONResponse(body)

    async def detect(request: Request) -> Response:
        values = await fields(request)
        admit(request, values)
        texts, listed = texts_of(values)
        found = await run_in_threadpool(lambda: [detector.detect(text) for text in texts])
        answers = [[{"confidence": c, "language": code}] for code, c in found]
        return JSONResponse(answers if listed else answers[0])

    async def translate_file(request: Request) -> Response:
        values = await fields(request)
        admit(request, values)
        source_of(values)
        target_of(values)
        upload = values.get("file")
        if upload is None or isinstance(upload, str) or not hasattr(upload, "read"):
            raise BadRequest("invalid request: missing file (multipart/form-data)")
        extension = os.path.splitext(upload.filename or "")[1].lower()
        if extension not in EXTENSIONS:
            formats = ", ".join(EXTENSIONS)
            raise BadRequest(f"cannot translate {extension or 'files without an extension'}: the formats are {formats}")
        data = await upload.read()
        check_chars([data.decode("utf-8", errors="replace")], config.char_limit)
        name = f"{uuid.uuid4().hex}{extension}"
        source_path = os.path.join(downloads, f"source-{name}")
        with open(source_path, "wb") as f:
            f.write(data)
        target_path = os.path.join(downloads, name)
        try:
            await batcher.submit(Options("file", values["target"], target_path=target_path), [source_path])
        finally:
            os.remove(source_path)
        kept.append(target_path)
        while len(kept) > KEPT_FILES:
            with contextlib.suppress(FileNotFoundError):
                os.remove(kept.popleft())
        return JSONResponse({"translatedFileUrl": str(request.url_for("download_file", name=name))})

    async def download_file(request: Request) -> Response:
        name = os.path.basename(request.path_params["name"])
        path = os.path.join(downloads, name)
        if not os.path.isfile(path):
            return _error(404, f"no translated file {name} (they are kept for the {KEPT_FILES} newest)")
        return FileResponse(path, filename=name)

    async def list_languages(request: Request) -> Response:
        return JSONResponse(languages.listing())

    async def settings(request: Request) -> Response:
        return JSONResponse(
            {
                "charLimit": config.char_limit if config.char_limit is not None else -1,
                "keyRequired": config.api_keys is not None,
                "suggestions": False,
                "supportedFilesFormat": list(EXTENSIONS),
                "language": {"source": {"code": languages.source}, "target": {"code": languages.targets[0]}},
            }
        )

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "queued": batcher.pending})

    async def prometheus(request: Request) -> Response:
        return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    def observed(route: str, handler):
        """`handler` answering errors as one-line JSON, timed and counted in `metrics`."""

        async def endpoint(request: Request) -> Response:
            start = time.perf_counter()
            try:
                response = await handler(request)
            except LimitError as error:
                response = _error(error.status, _one_line(error), error.retry_after)
            except ValueError as error:  # bad input the translator refused
                response = _error(400, _one_line(error))
            except Exception as error:  # noqa: BLE001 - the server answers and goes on
                response = _error(500, f"internal error: {_one_line(error)}")
            metrics.observe(route, response.status_code, time.perf_counter() - start)
            return response

        return endpoint

    routes = [
        Route("/translate", observed("/translate", translate), methods=["POST"]),
        Route("/detect", observed("/detect", detect), methods=["POST"]),
        Route("/languages", observed("/languages", list_languages), methods=["GET", "POST"]),
        Route("/translate_file", observed("/translate_file", translate_file), methods=["POST"]),
        Route("/download_file/{name}", observed("/download_file", download_file), name="download_file"),
        Route("/frontend/settings", observed("/frontend/settings", settings)),
        Route("/health", observed("/health", health)),
        Route("/metrics", prometheus),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app):
        batcher.start()
        try:
            yield
        finally:
            await run_in_threadpool(batcher.stop)  # what is queued is answered first
            shutil.rmtree(downloads, ignore_errors=True)

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.batcher, app.state.metrics = batcher, metrics
    return app
