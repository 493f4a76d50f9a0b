"""The Beam pieces every corpus pipeline shares: pipeline options with our defaults, numbered
input lines, the check that turns a raw line into a text or a dead letter, sharded outputs, and
the counts a run reports.

A line's id is `<input file name>:<line number from 1>` ("news.txt:17"), so that outputs written in
any order by any worker can be put back in the input's order. A file is read by one worker
(line numbers need its lines in order); `Reshuffle` then spreads its lines over the workers.
"""

from __future__ import annotations

import os
import re

import apache_beam as beam
from apache_beam.io import fileio
from apache_beam.metrics import Metrics, MetricsFilter
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

NAMESPACE = "keras_transformer"
FAILED = "failed"  # the tagged output of dead letters: (id, reason)
MAX_LINE_BYTES = 65_536  # a longer line is a dead letter, not a model call
LINE_BREAK = re.compile("[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")  # where str.splitlines splits
# DirectRunner on this machine's 2 cores: two worker processes, each with its own TensorFlow and model
# (threads of one process share the GIL between batches; processes do not).
DIRECT_DEFAULTS = {"runner": "DirectRunner", "direct_num_workers": 2, "direct_running_mode": "multi_processing"}
QUIET = {"default_sdk_harness_log_level": "WARNING"}  # the workers' INFO lines are not the command's output


def pipeline_options(beam_args: list[str]) -> PipelineOptions:
    """Beam's options from `beam_args` (`--runner DataflowRunner --project ...`, passed through as
    given), with `QUIET` and, on DirectRunner, `DIRECT_DEFAULTS` where `beam_args` do not name them."""
    named = {arg[2:].split("=", 1)[0] for arg in beam_args if arg.startswith("--")}
    runner = PipelineOptions(beam_args).view_as(StandardOptions).runner
    defaults = {**QUIET, **(DIRECT_DEFAULTS if runner in (None, "DirectRunner") else {})}
    return PipelineOptions(beam_args, **{key: value for key, value in defaults.items() if key not in named})


def numbered_lines(readable: fileio.ReadableFile):
    """(id, raw bytes) of every line of a matched file, the line ending dropped."""
    name = os.path.basename(readable.metadata.path)
    with readable.open() as f:
        for number, raw in enumerate(f, 1):
            yield f"{name}:{number}", raw.rstrip(b"\n").rstrip(b"\r")


class ReadNumberedLines(beam.PTransform):
    """PCollection of (id, raw line bytes) of the files `pattern` matches (a glob, on any file
    system Beam knows: gs://, s3://, hdfs://); no match is an error."""

    def __init__(self, pattern: str):
        super().__init__()
        self.pattern = pattern

    def expand(self, pipeline):
        return (
            pipeline
            | "Match" >> fileio.MatchFiles(self.pattern, empty_match_treatment=fileio.EmptyMatchTreatment.DISALLOW)
            | "Open" >> fileio.ReadMatches()
            | "Number" >> beam.FlatMap(numbered_lines)
            | "Spread" >> beam.Reshuffle()
        )


def line_fault(raw: bytes, max_bytes: int) -> tuple[str | None, str | None]:
    """(text, None) of a raw line, or (None, reason): over `max_bytes`, or not UTF-8."""
    if len(raw) > max_bytes:
        return None, f"line of {len(raw)} bytes, over the limit of {max_bytes}"
    try:
        return raw.decode("utf-8"), None
    except UnicodeDecodeError as error:
        return None, f"invalid UTF-8 at byte {error.start}"


def output_fault(translation: str) -> str | None:
    """Why `translation` cannot be one line of an output, or None: a line break in it (any at which
    `str.splitlines` splits; a byte-fallback piece can write one, sampling especially), which would cut
    its line in two and the reader's count of fields and lines with it."""
    if found := LINE_BREAK.search(translation):
        return f"a line break (U+{ord(found.group()):04X}) in the translation"
    return None


def count(name: str, n: int = 1) -> None:
    Metrics.counter(NAMESPACE, name).inc(n)


def dead_letter(line_id: str, reason: str):
    """The tagged output of a failed line (counted)."""
    count(FAILED)
    return beam.pvalue.TaggedOutput(FAILED, (line_id, reason))


def tsv_line(line_id: str, value: str) -> str:
    return f"{line_id}\t{value}"


def write_sharded(lines, prefix: str, label: str):
    """`lines` to PREFIX-SSSSS-of-NNNNN (as many shards as the runner picks)."""
    return lines | label >> beam.io.WriteToText(prefix, shard_name_template="-SSSSS-of-NNNNN")


def counters(result) -> dict[str, int]:
    """{name: committed value} of the run's counters in our namespace."""
    found = result.metrics().query(MetricsFilter().with_namespace(NAMESPACE))["counters"]
    totals: dict[str, int] = {}
    for counter in found:
        totals[counter.key.metric.name] = totals.get(counter.key.metric.name, 0) + (counter.committed or 0)
    return totals
