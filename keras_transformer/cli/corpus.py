"""`keras-transformer translate-corpus | backtranslate | clean`: corpus-scale work (keras_transformer/corpus/).

translate-corpus and backtranslate are Apache Beam pipelines (the `beam` extra): DirectRunner with
two worker processes by default; Beam's own options after `--` pass through as given, so the same
command runs on Dataflow, Flink or Spark (the README's "Corpus scale on Apache Beam"). Beam is
imported by these commands only. clean streams a file in this process (pure Python).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

BEAM_HELP = "Beam pipeline options after `--`, passed through (e.g. -- --runner FlinkRunner --flink_master HOST:8081)"


def _log(message: str) -> None:
    print(f"keras-transformer: {message}", file=sys.stderr, flush=True)


def _add_beam(p):
    p.add_argument("--runner", help="Beam runner (default DirectRunner with --direct_num_workers=2)")
    p.add_argument(
        "--max-line-bytes", type=int, default=65_536, help="a longer line is a failure, not translated (default 65536)"
    )
    p.add_argument("beam_args", nargs=argparse.REMAINDER, metavar="-- BEAM_OPTIONS", help=BEAM_HELP)


def _beam_args(args) -> list[str]:
    extra = list(args.beam_args)
    if extra and extra[0] == "--":
        extra = extra[1:]
    if args.runner:
        extra = [f"--runner={args.runner}", *extra]
    return extra


def _exports(values: list[str]) -> dict:
    """{None: DIR} of one `--export DIR`, {KEY: DIR, ...} of `--export KEY=DIR` flags."""
    pairs = [value.split("=", 1) if "=" in value else (None, value) for value in values]
    keyed = [key is not None for key, _ in pairs]
    if (any(keyed) and not all(keyed)) or (not any(keyed) and len(pairs) > 1):
        raise ValueError("several exports are named KEY=DIR each (--format keyed: lines KEY<TAB>text)")
    return dict(pairs)


def _quiet_beam() -> None:
    logging.getLogger("apache_beam").setLevel(logging.WARNING)


def _check_paths(pattern: str, dirs: list[str]) -> None:
    """One-line errors before a pipeline starts: --input matching no file, a local DIR that is not one."""
    from apache_beam.io.filesystems import FileSystems

    if not FileSystems.match([pattern])[0].metadata_list:
        raise ValueError(f"--input {pattern}: no file matches")
    for path in dirs:
        if "://" not in path and not os.path.isdir(path):
            raise ValueError(f"{path}: no such directory")


def add_parsers(subparsers) -> None:
    p = subparsers.add_parser("translate-corpus", help="translate files of lines with an export on Apache Beam")
    p.add_argument("--input", required=True, metavar="GLOB", help="the input files (local, gs://, s3://, ...)")
    p.add_argument(
        "--output",
        required=True,
        metavar="PREFIX",
        help="PREFIX-SSSSS-of-NNNNN get 'ID<TAB>translation' lines, ID = FILE:LINE; failures "
        "PREFIX.failed-SSSSS-of-NNNNN as 'ID<TAB>reason'",
    )
    p.add_argument(
        "--export",
        required=True,
        action="append",
        metavar="[KEY=]DIR",
        help="`keras-transformer export`'s OUT (or a SavedModel dir); repeat as KEY=DIR for --format keyed",
    )
    p.add_argument(
        "--format",
        default="txt",
        choices=("txt", "tsv", "keyed"),
        help="a line is the text (txt), a TSV whose first field is translated (tsv), or KEY<TAB>text routed to "
        "KEY's export (keyed)",
    )
    p.add_argument(
        "--mode",
        default="sentences",
        choices=("sentences", "documents", "markup"),
        help="the export's signature: serving_default, translate_document or translate_markup",
    )
    p.add_argument("--int8", action="store_true", help="the export's int8 SavedModel")
    _add_beam(p)

    p = subparsers.add_parser("backtranslate", help="synthetic pairs from monolingual text with a reverse model")
    p.add_argument("--model-dir", required=True, help="the reverse (target -> source) model")
    p.add_argument("--input", required=True, metavar="GLOB", help="monolingual target-language text, a line each")
    p.add_argument("--output", required=True, metavar="PAIRS.tsv", help="'synthetic source<TAB>original line'")
    search = p.add_mutually_exclusive_group()
    search.add_argument("--sampling-topk", type=int, metavar="K", help="sample from the K most likely tokens (0: all)")
    search.add_argument("--beam-size", type=int, metavar="N", help="beam search with N beams (default: the model's)")
    p.add_argument("--tag", help="put TAG before each synthetic source (e.g. '<BT>'; train with --user-symbols TAG)")
    p.add_argument("--noise", action="store_true", help="word drop 0.1, blank 0.1, swaps within 3 (Edunov et al.)")
    p.add_argument("--seed", type=int, default=0, help="seeds the sampling and the noise (default 0)")
    _add_beam(p)

    p = subparsers.add_parser("clean", help="drop bad sentence pairs from a TSV (a report per filter on stderr)")
    p.add_argument("--input", required=True, metavar="PAIRS.tsv", help="the pairs, 'source<TAB>target' per line")
    p.add_argument("--output", required=True, metavar="CLEAN.tsv", help="the pairs every filter keeps, in order")
    ratio = "drop a pair whose (longer + 10) / (shorter + 10) characters exceed X (default 3)"
    p.add_argument("--max-length-ratio", type=float, default=3.0, help=ratio)
    p.add_argument("--max-characters", type=int, default=1000, help="drop a pair with a side longer than N (1000)")
    share = "drop a pair with less of a side's letters in its script (default 0.5)"
    p.add_argument("--min-script-share", type=float, default=0.5, help=share)
    p.add_argument(
        "--scripts",
        metavar="SRC,TGT",
        help="each side's script, e.g. LATIN,CYRILLIC (default: learned from the first 1000 pairs)",
    )


def translate_corpus(args) -> int:
    from keras_transformer.corpus.translate import translate_corpus as run

    _quiet_beam()
    exports = _exports(args.export)
    _check_paths(args.input, list(exports.values()))
    counts = run(
        args.input,
        args.output,
        exports,
        _beam_args(args),
        fmt=args.format,
        mode=args.mode,
        int8=args.int8,
        max_line_bytes=args.max_line_bytes,
    )
    _log(f"translated {counts['translated']} lines into {args.output}-*; {counts['failed']} failed")
    if counts["failed"]:
        _log(f"failures and their reasons: {args.output}.failed-*")
    return 0


def backtranslate(args) -> int:
    from keras_transformer.corpus.backtranslate import backtranslate as run

    _quiet_beam()
    _check_paths(args.input, [args.model_dir])
    decoding = {"sampling_topk": args.sampling_topk} if args.sampling_topk is not None else {}
    if args.beam_size is not None:
        decoding["beam_size"] = args.beam_size
    counts = run(
        args.input,
        args.output,
        args.model_dir,
        _beam_args(args),
        tag=args.tag,
        noise=args.noise,
        seed=args.seed,
        max_line_bytes=args.max_line_bytes,
        **decoding,
    )
    _log(f"wrote {counts['pairs']} synthetic pairs to {args.output}; {counts['failed']} lines failed")
    if counts["failed"]:
        _log(f"failures and their reasons: {args.output}.failed-*")
    return 0


def clean(args) -> int:
    from keras_transformer.corpus.cleaning import CleaningConfig, clean_file

    scripts = tuple(name.strip().upper() for name in args.scripts.split(",")) if args.scripts else None
    if scripts is not None and len(scripts) != 2:
        raise ValueError(f"--scripts takes SRC,TGT (e.g. LATIN,CYRILLIC), got {args.scripts!r}")
    config = CleaningConfig(args.max_length_ratio, args.max_characters, args.min_script_share, scripts)
    _log(clean_file(args.input, args.output, config))
    return 0


COMMANDS = {"translate-corpus": translate_corpus, "backtranslate": backtranslate, "clean": clean}
