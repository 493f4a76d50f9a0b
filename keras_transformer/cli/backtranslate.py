"""`keras-transformer backtranslate`: synthetic pairs from monolingual text with a reverse model, on
Apache Beam (keras_transformer/corpus/backtranslate.py; what the corpus commands share: cli/corpus.py).
"""

from __future__ import annotations

from keras_transformer.cli import corpus


def add(subparsers) -> None:
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
    corpus.add_beam_flags(p)


def run(args) -> int:
    from keras_transformer.corpus.backtranslate import backtranslate as run

    corpus.quiet_beam()
    corpus.check_paths(args.input, [args.model_dir])
    decoding = {"sampling_topk": args.sampling_topk} if args.sampling_topk is not None else {}
    if args.beam_size is not None:
        decoding["beam_size"] = args.beam_size
    counts = run(
        args.input,
        args.output,
        args.model_dir,
        corpus.beam_args(args),
        tag=args.tag,
        noise=args.noise,
        seed=args.seed,
        max_line_bytes=args.max_line_bytes,
        **decoding,
    )
    corpus.log(f"wrote {counts['pairs']} synthetic pairs to {args.output}; {counts['failed']} lines failed")
    if counts["failed"]:
        corpus.log(f"failures and their reasons: {args.output}.failed-*")
    return 0
