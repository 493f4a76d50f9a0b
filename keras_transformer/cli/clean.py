"""`keras-transformer clean`: the sentence pairs of a TSV that every filter keeps, a report per filter on
stderr (keras_transformer/corpus/cleaning.py; pure Python, no Beam).
"""

from __future__ import annotations

from keras_transformer.cli import corpus


def add(subparsers) -> None:
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


def run(args) -> int:
    from keras_transformer.corpus.cleaning import CleaningConfig, clean_file

    scripts = tuple(name.strip().upper() for name in args.scripts.split(",")) if args.scripts else None
    if scripts is not None and len(scripts) != 2:
        raise ValueError(f"--scripts takes SRC,TGT (e.g. LATIN,CYRILLIC), got {args.scripts!r}")
    config = CleaningConfig(args.max_length_ratio, args.max_characters, args.min_script_share, scripts)
    corpus.log(clean_file(args.input, args.output, config))
    return 0
