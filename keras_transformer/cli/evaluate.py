"""`keras-transformer evaluate`: sacreBLEU BLEU and chrF on a held-out split, or on given pairs."""

from __future__ import annotations

import json

from keras_transformer.cli import common


def add(subparsers):
    p = subparsers.add_parser("evaluate", help="sacreBLEU BLEU and chrF on a held-out split")
    common.add_model_dirs(p)
    p.add_argument(
        "--data",
        help="pairs to score: a TSV file (all of it), or the --split of tfds:NAME or of a Bible-layout source "
        "(default: the --split of the model's training data)",
    )
    p.add_argument("--reverse", action="store_true", help="swap the columns of --data (default: the model's direction)")
    p.add_argument(
        "--split", default="test", choices=("validation", "test"), help="held-out split to score (default test)"
    )
    p.add_argument("--tfds-data-dir", help="TFDS data directory (default: the training run's, $TFDS_DATA_DIR)")
    p.add_argument(
        "--tfds-download", action="store_true", help="download and prepare a tfds:NAME that is not prepared (network)"
    )
    p.add_argument("--limit", type=int, help="only the first N pairs")
    common.add_target_lang(p, "the language to translate into (default data: the training source of that language)")
    common.add_glossary(p, "each translation holds the target terms of the terms its source holds")
    common.add_decoding(p)
    common.add_op_threads(p)
    p.add_argument("--show", type=int, default=3, help="print N example translations")


def run(args):
    from keras_transformer.data.files import has_own_splits
    from keras_transformer.data.sources import read_pairs
    from keras_transformer.data.splits import WHOLE
    from keras_transformer.evaluation.evaluation import evaluate
    from keras_transformer.model_dir import ModelDir
    from keras_transformer.model_dir.held_out import held_out

    common.use_op_threads(args.intra_op_threads)
    translator = common.build_translator(args)
    target_lang = args.target_lang
    if args.data:
        trained_on = ModelDir(args.model_dir[0]).read()["data_config"]  # an ensemble: the first model's
        split = args.split if has_own_splits(args.data) else WHOLE
        read = dict(
            tfds_data_dir=args.tfds_data_dir or trained_on.tfds_data_dir,
            tfds_download=args.tfds_download or trained_on.tfds_download,
        )
        sources, references = read_pairs(args.data, split, args.reverse, args.limit, **read)
    else:
        read = dict(tfds_data_dir=args.tfds_data_dir, tfds_download=args.tfds_download or None)
        pairs = held_out(args.model_dir[0], args.split, args.limit, target_lang=target_lang, **read)
        sources, references, target_lang = pairs.sources, pairs.references, pairs.target_lang
    scores = evaluate(translator, (sources, references), target_lang=target_lang)
    for source, reference, hypothesis in list(zip(sources, references, scores.pop("translations")))[: args.show]:
        print(f"source:     {source}\nreference:  {reference}\ntranslation: {hypothesis}\n")
    print(
        json.dumps(
            {
                **scores,
                **translator.decoding.to_dict(),
                "dtype": translator.model.dtype_policy.name,
                "checkpoint": args.checkpoint,
                "models": args.model_dir,
                **({"target_lang": target_lang} if target_lang else {}),
            }
        )
    )
