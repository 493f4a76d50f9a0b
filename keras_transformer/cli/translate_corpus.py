"""`keras-transformer translate-corpus`: files of lines translated by an export on Apache Beam
(keras_transformer/corpus/translate.py; what the corpus commands share: cli/corpus.py).
"""

from __future__ import annotations

from keras_transformer.cli import corpus


def add(subparsers) -> None:
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
    corpus.add_beam_flags(p)


def run(args) -> int:
    from keras_transformer.corpus.translate import translate_corpus as run

    corpus.quiet_beam()
    exports = corpus.exports_of(args.export)
    corpus.check_paths(args.input, list(exports.values()))
    counts = run(
        args.input,
        args.output,
        exports,
        corpus.beam_args(args),
        fmt=args.format,
        mode=args.mode,
        int8=args.int8,
        max_line_bytes=args.max_line_bytes,
    )
    corpus.log(f"translated {counts['translated']} lines into {args.output}-*; {counts['failed']} failed")
    if counts["failed"]:
        corpus.log(f"failures and their reasons: {args.output}.failed-*")
    return 0
