"""`keras-transformer export`: SavedModels and TFLite models, or a CTranslate2 model; `export --check`
holds an export to the TF Serving contract and to the checkpoint's translations."""

from __future__ import annotations

import json
import os

from keras_transformer.cli.common import CHECKPOINT_HELP, add_glossary, add_model_dirs, log, read_glossary
from keras_transformer.cli.flags import add_decoding_flags, decoding


def add(subparsers):
    p = subparsers.add_parser("export", help="SavedModels and TFLite models, or a CTranslate2 model (export/README.md)")
    add_model_dirs(p, required=False)
    p.add_argument("--out", help="output directory of the SavedModels, TFLite models, tokenizer and translator.json")
    p.add_argument(
        "--format",
        default="tensorflow",
        choices=("tensorflow", "ctranslate2"),
        help="tensorflow (default): SavedModels and TFLite models; ctranslate2: a CTranslate2 model directory",
    )
    p.add_argument(
        "--quantization", help="with --format ctranslate2: weight type, e.g. int8, float16 (default float32)"
    )
    p.add_argument("--name", default="translator", help="model name in TF Serving (default translator)")
    p.add_argument(
        "--no-tflite",
        dest="tflite",
        action="store_false",
        help="the SavedModels only (for TF Serving; about half the time): no TFLite model, and none left from an "
        "earlier export into OUT",
    )
    p.add_argument("--checkpoint", default="latest", help=CHECKPOINT_HELP)
    add_glossary(p, "the SavedModel's translate holds the target terms of the terms a text holds")
    add_decoding_flags(p, exclude=("batch_size", "concurrent_batches", "int8"))  # int8: its own SavedModel
    p.add_argument(
        "--check",
        metavar="OUT",
        help="check the export in OUT: the TF Serving contract, and every artifact's translations of held-out "
        "pairs against the checkpoint's (the model dir: --model-dir, or the one OUT was exported from)",
    )
    p.add_argument("--sample", type=int, default=100, help="with --check: held-out pairs translated (default 100)")
    p.add_argument(
        "--batching",
        action="store_true",
        help="also write TF Serving's batching_parameters.txt and models.config into OUT/saved_model: server-side "
        "batching with serve's policy (export/README.md)",
    )
    p.add_argument(
        "--max-batch-tokens", type=int, default=4096, metavar="N", help="with --batching: source tokens per batch"
    )
    p.add_argument(
        "--batch-timeout-ms", type=float, default=5.0, metavar="T", help="with --batching: wait for more texts (5 ms)"
    )


def _check_export(args) -> int:
    """`export --check OUT`: the TF Serving contract of its SavedModels, then (with the model dir,
    from --model-dir or translator.json) every artifact's translations against the checkpoint's."""
    from keras_transformer.exporters.quality_check import check_quality
    from keras_transformer.exporters.serving_check import check_export

    out = args.check
    problems = []
    if not os.path.isfile(os.path.join(out, "model.bin")):  # a CTranslate2 model has no SavedModel
        problems = [f"contract: {problem}" for problem in check_export(out)]
        if not problems:
            print(f"{out}: every SavedModel meets the TF Serving contract")
    model_dirs = args.model_dir
    metadata = os.path.join(out, "translator.json")
    if not model_dirs and os.path.isfile(metadata):
        with open(metadata, encoding="utf-8") as f:
            model_dirs = json.load(f).get("model_dirs")
    if not model_dirs:
        print(f"{out}: translations not checked (no model dir: pass --model-dir)")
    else:
        reports, quality = check_quality(out, model_dirs, args.sample)
        for report in reports:
            print(report.line())
        problems += [f"quality: {problem}" for problem in quality]
    for problem in problems:
        log(problem)
    return 1 if problems else 0


def export_decoding(args):
    """The decoding settings an export serves: the flags', with `disable_unk` on unless the flags
    say otherwise (an `<unk>` prints as a gap; never generating it cost no BLEU on the held-out
    verses: bench/RESULTS.md, "Decoding controls")."""
    settings = decoding(args)
    return settings if args.disable_unk is not None else settings.replace(disable_unk=True)


def run(args):
    if args.check:
        return _check_export(args)
    if not (args.model_dir and args.out):
        raise ValueError("export needs --model-dir and --out (or --check OUT)")
    if args.quantization and args.format != "ctranslate2":
        raise ValueError("--quantization applies to --format ctranslate2 only")
    if args.batching and args.format != "tensorflow":
        raise ValueError("--batching applies to --format tensorflow only (TF Serving)")
    from keras_transformer.model_dir import ModelDir, load_model
    from keras_transformer.model_dir.shortlist import model_dir_shortlist
    from keras_transformer.search.ensemble import Ensemble

    if len(args.model_dir) > 1:
        if args.format == "ctranslate2":
            raise ValueError("--format ctranslate2 exports one model: pass one --model-dir")
        model, tokenizer = Ensemble.from_model_dirs(args.model_dir, args.checkpoint)
        exported = [ModelDir(path).resolve_checkpoint(args.checkpoint) for path in args.model_dir]
    else:
        model, tokenizer, values = load_model(args.model_dir[0], args.checkpoint)
        exported = [values["checkpoint_path"]]
    settings, shortlist = model_dir_shortlist(args.model_dir[0], export_decoding(args), model.config.vocab_size)
    if args.format == "ctranslate2":
        from keras_transformer.exporters.ctranslate2 import export_ctranslate2

        paths = export_ctranslate2(model, tokenizer, args.out, args.quantization, shortlist)
    else:
        from keras_transformer.exporters.tensorflow import export_tensorflow

        paths = export_tensorflow(
            model,
            tokenizer,
            args.out,
            args.name,
            settings,
            log=log,
            model_dirs=args.model_dir,
            tflite=args.tflite,
            checkpoint={"name": args.checkpoint, "paths": [os.path.abspath(path) for path in exported]},
            glossary=read_glossary(args),
            lexical_shortlist=shortlist,
            batching=dict(max_batch_tokens=args.max_batch_tokens, batch_timeout_ms=args.batch_timeout_ms)
            if args.batching
            else None,
        )
    for artifact, path in paths.items():
        print(f"{artifact}\t{path}")
