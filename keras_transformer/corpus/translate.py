"""`translate-corpus`: a corpus translated by an exported SavedModel on Apache Beam (RunInference).

    files (GLOB) -> (id, raw line) -> text | dead letter -> RunInference(ExportHandler) ->
        PREFIX-SSSSS-of-NNNNN            "ID<TAB>translation"
        PREFIX.failed-SSSSS-of-NNNNN     "ID<TAB>reason"

What a line is (`--format`): `txt`, the text; `tsv`, its first field (the source column of a pairs
file); `keyed`, `KEY<TAB>text`, the text translated by the export of KEY (`exports`, e.g. en-de,
en-fr: the keyed handler). What fails, never dropped, each line alone: a line over
`max_line_bytes`, one that is not UTF-8, a keyed line without a known key, and a text on which the
model raises (its batch translated again text by text).
"""

from __future__ import annotations

from collections.abc import Mapping

import apache_beam as beam
from apache_beam.ml.inference.base import RunInference

from keras_transformer.corpus import beam_io
from keras_transformer.corpus.handlers import BATCH_SIZE, ExportHandler, keyed_handler

FORMATS = ("txt", "tsv", "keyed")


class ParseLine(beam.DoFn):
    """(id, raw line) -> (key, (id, text)), key None unless `keyed`; or a dead letter."""

    def __init__(self, fmt: str, keys: tuple[str, ...], max_line_bytes: int):
        self.fmt, self.keys, self.max_line_bytes = fmt, keys, max_line_bytes

    def process(self, element):
        line_id, raw = element
        text, reason = beam_io.line_fault(raw, self.max_line_bytes)
        if reason:
            yield beam_io.dead_letter(line_id, reason)
            return
        key = None
        if self.fmt == "tsv":
            text = text.split("\t", 1)[0]
        elif self.fmt == "keyed":
            key, tab, text = text.partition("\t")
            if not tab:
                yield beam_io.dead_letter(line_id, "a keyed line is KEY<TAB>text; no tab found")
                return
            if key not in self.keys:
                yield beam_io.dead_letter(line_id, f"no export for key {key!r} (exports: {', '.join(self.keys)})")
                return
        yield key, (line_id, text)


class SplitResults(beam.DoFn):
    """PredictionResult((id, text), (translation, reason)) -> "ID<TAB>translation", or a dead letter
    (the model's reason, or `beam_io.output_fault`'s)."""

    def process(self, result):
        (line_id, _), (translation, reason) = result.example, result.inference
        reason = reason or beam_io.output_fault(translation)
        if reason:
            yield beam_io.dead_letter(line_id, reason)
        else:
            beam_io.count("translated")
            yield beam_io.tsv_line(line_id, translation)


def translate_lines(
    lines, exports: Mapping[str | None, str], fmt: str = "txt", max_line_bytes: int = beam_io.MAX_LINE_BYTES, **options
):
    """(id, raw line) PCollection -> (translations "ID<TAB>translation", dead letters (id, reason)):
    `build`'s stage, usable inside a larger pipeline; `options`: `ExportHandler`'s."""
    keys = tuple(key for key in exports if key is not None)
    parsed = lines | "Parse" >> beam.ParDo(ParseLine(fmt, keys, max_line_bytes)).with_outputs(
        beam_io.FAILED, main="texts"
    )
    handlers = {key: ExportHandler(path, **options) for key, path in exports.items()}
    if fmt == "keyed":
        results = (
            parsed.texts
            | "Translate" >> RunInference(keyed_handler(handlers))
            | "Unkey" >> beam.Map(lambda keyed: keyed[1])
        )
    else:
        results = (
            parsed.texts
            | "Drop key" >> beam.Map(lambda keyed: keyed[1])
            | "Translate" >> RunInference(next(iter(handlers.values())))
        )
    split = results | "Split" >> beam.ParDo(SplitResults()).with_outputs(beam_io.FAILED, main="translations")
    failed = (parsed[beam_io.FAILED], split[beam_io.FAILED]) | "Failures" >> beam.Flatten()
    return split.translations, failed


def build(
    pipeline,
    pattern: str,
    output: str,
    exports: Mapping[str | None, str],
    *,
    fmt: str = "txt",
    max_line_bytes: int = beam_io.MAX_LINE_BYTES,
    int8: bool = False,
    mode: str = "sentences",
    batch_size: int = BATCH_SIZE,
) -> None:
    """The translate-corpus pipeline on `pipeline` (see the module docstring). `exports`: {None: DIR}
    for one export, {KEY: DIR, ...} with `fmt` "keyed"."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")
    if (fmt == "keyed") != (None not in exports):
        raise ValueError("--format keyed takes exports named KEY=DIR (one per key); other formats one DIR")
    lines = pipeline | "Read" >> beam_io.ReadNumberedLines(pattern)
    translations, failed = translate_lines(
        lines, exports, fmt=fmt, max_line_bytes=max_line_bytes, int8=int8, mode=mode, batch_size=batch_size
    )
    beam_io.write_sharded(translations, output, "Write")
    failures = failed | "Format failures" >> beam.MapTuple(beam_io.tsv_line)
    beam_io.write_sharded(failures, output + ".failed", "Write failures")


def translate_corpus(pattern: str, output: str, exports: Mapping[str | None, str], beam_args=(), **options) -> dict:
    """Run `build` with Beam's options `beam_args` (`beam_io.pipeline_options`); its counters
    ({"translated": N, "failed": M})."""
    pipeline = beam.Pipeline(options=beam_io.pipeline_options(list(beam_args)))
    build(pipeline, pattern, output, exports, **options)
    result = pipeline.run()
    result.wait_until_finish()
    return {"translated": 0, "failed": 0, **beam_io.counters(result)}
