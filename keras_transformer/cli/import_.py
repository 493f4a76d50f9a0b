"""`keras-transformer import`: a pretrained Marian / OPUS-MT model (or Hugging Face's MarianMTModel) as a
model directory. (`import_`: `import` is Python's keyword.)"""

from __future__ import annotations

from keras_transformer.cli.common import log


def add(subparsers):
    p = subparsers.add_parser("import", help="a pretrained Marian / OPUS-MT model as a model directory")
    p.add_argument(
        "--from",
        dest="source_format",
        required=True,
        choices=("marian", "huggingface"),
        help="the format of DIR: marian (an OPUS-MT directory: *.npz, decoder.yml, vocab.yml, source.spm, "
        "target.spm) or huggingface (a MarianMTModel: config.json, model.safetensors, vocab.json, the .spm files)",
    )
    p.add_argument("directory", metavar="DIR", help="the directory of the model to import")
    p.add_argument("--model-dir", required=True, help="the new model directory to write (must be new or empty)")
    p.add_argument(
        "--sinusoid-layout",
        choices=("tensor2tensor", "halves"),
        help="the positional encoding (default: the format's own, tensor2tensor for marian, halves for "
        "huggingface; CTranslate2's converter gives Marian's weights halves)",
    )


def run(args):
    from keras_transformer.importers.huggingface import import_huggingface
    from keras_transformer.importers.marian import import_marian

    importer = {"marian": import_marian, "huggingface": import_huggingface}[args.source_format]
    layout = {"sinusoid_layout": args.sinusoid_layout} if args.sinusoid_layout else {}
    checkpoint = importer(args.directory, args.model_dir, warn=lambda line: log(f"warning: {line}"), **layout)
    print(f"model_dir\t{args.model_dir}\ncheckpoint\t{checkpoint}")
