"""`keras-transformer translate-file IN [IN ...]`: translate PO, XLIFF, TMX, SRT, WebVTT, HTML,
Markdown, DOCX and text files, their structure kept (`keras_transformer/files/`, issue 51)."""

from __future__ import annotations

import os

from keras_transformer.cli import common
from keras_transformer.files import FORMATS


def add(subparsers) -> None:
    p = subparsers.add_parser(
        "translate-file",
        help="translate files (PO, XLIFF, TMX, SRT, WebVTT, HTML, Markdown, DOCX, txt), their structure kept",
    )
    p.add_argument("inputs", nargs="+", metavar="IN", help="the files to translate")
    model = p.add_mutually_exclusive_group(required=True)
    common.add_model_dirs(model, required=False)
    model.add_argument("--export", metavar="DIR", help="an exported SavedModel (keras-transformer export) instead")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--out", metavar="OUT", help="the output file (one input); it may name the input: in place")
    out.add_argument(
        "--out-dir",
        metavar="D",
        help="the outputs' directory, each named as its input (default: IN's name with .LANG "
        "or .translated before its extension, beside it)",
    )
    p.add_argument("--format", default="auto", choices=("auto", *FORMATS), help="the format (default: the extension)")
    p.add_argument(
        "--target-lang",
        metavar="LANG",
        help="the language of the targets (written in XLIFF and TMX files; a multilingual model translates into it)",
    )
    p.add_argument(
        "--overwrite-translated",
        action="store_true",
        help="translate units that have a translation already (PO, XLIFF, TMX; default: keep them)",
    )
    common.add_glossary(
        p,
        "with --model-dir, each unit's translation holds the target terms of the terms its source holds, "
        "a unit with tags or placeholders included (an export applies the glossary it was exported with)",
    )
    common.add_decoding(p)
    common.add_op_threads(p)


def output_path(path: str, args) -> str:
    """Where the translation of `path` goes: --out, --out-dir/NAME, or NAME.LANG.EXT beside it."""
    if args.out:
        return args.out
    if args.out_dir:
        return os.path.join(args.out_dir, os.path.basename(path))
    stem, extension = os.path.splitext(path)
    return f"{stem}.{args.target_lang or 'translated'}{extension}"


def run(args) -> int:
    from keras_transformer.files import file_format, translate_file

    if args.out and len(args.inputs) > 1:
        raise ValueError(f"--out names one file, for {len(args.inputs)} inputs: pass --out-dir D")
    formats = [file_format(path, args.format) for path in args.inputs]  # an unknown one fails before the model loads
    if args.out_dir:
        os.makedirs(args.out_dir, exist_ok=True)
    common.use_op_threads(args.intra_op_threads)
    if args.export:
        if args.glossary:
            raise ValueError("--glossary needs --model-dir (an export applies its own `export --glossary`)")
        from keras_transformer.translation.exported import SavedModelTranslator

        translator = SavedModelTranslator(args.export)
    else:
        common.read_glossary(args)  # checks the glossary flags
        translator = common.build_translator(args)
    for path, name in zip(args.inputs, formats):
        out = output_path(path, args)
        translate_file(
            translator, path, out, name, overwrite_translated=args.overwrite_translated, target_lang=args.target_lang
        )
        common.log(f"{path} -> {out} ({name})")
    return 0
