"""`keras-transformer average`: the last N checkpoints averaged into MODEL_DIR/averaged (§6.1)."""

from __future__ import annotations

from keras_transformer.cli.common import log


def add(subparsers):
    p = subparsers.add_parser("average", help="average the last N checkpoints into MODEL_DIR/averaged (§6.1)")
    p.add_argument("--model-dir", required=True, help="the model directory whose checkpoints are averaged")
    p.add_argument("--last", type=int, default=5, help="checkpoints to average (default 5, the paper's for base)")
    p.add_argument(
        "--checkpoint",
        default="latest",
        choices=("latest", "ema"),
        help="latest (default): the training checkpoints; ema: the moving averages in ema/",
    )


def run(args):
    from keras_transformer.training.averaging import average_last

    written = average_last(args.model_dir, args.last, args.checkpoint)
    kind = "ema " if args.checkpoint == "ema" else ""
    log(f"averaged the last {args.last} {kind}checkpoints into {written}")
