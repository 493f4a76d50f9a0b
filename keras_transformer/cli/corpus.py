"""What the corpus commands share (translate_corpus.py, backtranslate.py, clean.py; the code in
keras_transformer/corpus/): translate-corpus and backtranslate are Apache Beam pipelines (the `beam`
extra), DirectRunner with two worker processes by default; Beam's own options after `--` pass through
as given, so the same command runs on Dataflow, Flink or Spark (the README's "Corpus scale on Apache
Beam"). Beam is imported when such a command runs, never to build the parser.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

BEAM_HELP = "Beam pipeline options after `--`, passed through (e.g. -- --runner FlinkRunner --flink_master HOST:8081)"


def log(message: str) -> None:
    print(f"keras-transformer: {message}", file=sys.stderr, flush=True)


def add_beam_flags(p):
    p.add_argument("--runner", help="Beam runner (default DirectRunner with --direct_num_workers=2)")
    p.add_argument(
        "--max-line-bytes", type=int, default=65_536, help="a longer line is a failure, not translated (default 65536)"
    )
    p.add_argument("beam_args", nargs=argparse.REMAINDER, metavar="-- BEAM_OPTIONS", help=BEAM_HELP)


def beam_args(args) -> list[str]:
    extra = list(args.beam_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if args.runner:
        extra = [f"--runner={args.runner}", *extra]
    return extra


def exports_of(values: list[str]) -> dict:
    """{None: DIR} of one `--export DIR`, {KEY: DIR, ...} of `--export KEY=DIR` flags."""
    pairs = [value.split("=", 1) if "=" in value else (None, value) for value in values]
    keyed = [key is not None for key, _ in pairs]
    if (any(keyed) and not all(keyed)) or (not any(keyed) and len(pairs) > 1):
        raise ValueError("several exports are named KEY=DIR each (--format keyed: lines KEY<TAB>text)")
    return dict(pairs)


def quiet_beam() -> None:
    logging.getLogger("apache_beam").setLevel(logging.WARNING)


def check_paths(pattern: str, dirs: list[str]) -> None:
    """One-line errors before a pipeline starts: --input matching no file, a local DIR that is not one."""
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.match([pattern])[0].metadata_list:
        raise ValueError(f"--input {pattern}: no file matches")
    for path in dirs:
        if "://" not in path and not os.path.isdir(path):
            raise ValueError(f"{path}: no such directory")
