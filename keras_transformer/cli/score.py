"""`keras-transformer score`: SOURCE<TAB>TARGET lines to SCORE<TAB>LOG_PROB<TAB>TOKENS lines."""

from __future__ import annotations

import contextlib
import sys

from keras_transformer.cli import common
from keras_transformer.config import decoding_names

# What scoring reads of the decoding settings: the length penalty, and where it runs.
SCORING_FIELDS = ("alpha", "disable_unk", "dtype", "int8", "batch_size")


def add(subparsers):
    p = subparsers.add_parser(
        "score", help="score translations: SOURCE<TAB>TARGET lines -> SCORE<TAB>LOG_PROB<TAB>TOKENS lines"
    )
    p.add_argument("--model-dir", required=True, help="the trained model directory whose model scores the pairs")
    p.add_argument("--data", metavar="FILE", help="SOURCE<TAB>TARGET lines (default: stdin)")
    common.add_target_lang(p, "the language of the targets")
    excluded = tuple(name for name in decoding_names() if name not in SCORING_FIELDS)
    common.add_decoding(p, exclude=excluded)


def run(args):
    """SOURCE<TAB>TARGET lines of --data or stdin, scored a chunk at a time (memory flat); bad UTF-8
    bytes replaced with a warning naming the line, as `translate` does."""
    from keras_transformer.data.errors import DataError

    translator = common.build_translator(args)
    where = args.data or "stdin"
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open(args.data, "rb")) if args.data else common.stdin_lines()
        for chunk in common.chunks(enumerate(common.decoded_lines(stream, False, where), 1), common.STDIN_CHUNK):
            pairs = []
            for number, line in chunk:
                if line.count("\t") != 1:
                    raise DataError(
                        f"{where}:{number}: expected SOURCE<TAB>TARGET, got {line.count(chr(9)) + 1} fields"
                    )
                pairs.append(line.split("\t"))
            sources, targets = [source for source, _ in pairs], [target for _, target in pairs]
            for result in translator.score(sources, targets, target_lang=args.target_lang):
                print(f"{result.score:.6f}\t{result.log_prob:.6f}\t{result.tokens}")
            sys.stdout.flush()
