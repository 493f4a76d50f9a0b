"""`keras-transformer shortlist`: the training pairs counted into the model dir's vocabulary shortlist."""

from __future__ import annotations

from keras_transformer.cli.common import log
from keras_transformer.data.shortlist import FREQUENT, PER_SOURCE


def add(subparsers):
    p = subparsers.add_parser(
        "shortlist",
        help="count the training pairs into the model dir's vocabulary shortlist (shortlist.npz), which "
        "translate, evaluate and export then search over (--no-shortlist: not)",
    )
    p.add_argument("--model-dir", required=True, help="the model directory: its tokenizer, data and shortlist.npz")
    p.add_argument(
        "--data",
        help="count these pairs instead (a source as train's --data takes it: its training split, or all the "
        "pairs of a file without splits)",
    )
    p.add_argument(
        "--per-source",
        type=int,
        default=PER_SOURCE,
        metavar="K",
        help=f"targets kept per source token, by Dice coefficient (default {PER_SOURCE})",
    )
    p.add_argument(
        "--frequent",
        type=int,
        default=FREQUENT,
        metavar="N",
        help=f"the N most frequent target tokens, in every search's vocabulary (default {FREQUENT})",
    )
    p.add_argument("--limit", type=int, help="only the first N pairs of each source")


def run(args):
    from keras_transformer.model_dir.shortlist import build_shortlist

    path = build_shortlist(
        args.model_dir, args.data, per_source=args.per_source, frequent=args.frequent, limit=args.limit, log=log
    )
    print(f"shortlist\t{path}")
