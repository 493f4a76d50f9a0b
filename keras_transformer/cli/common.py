"""What several commands share: the model-dir, checkpoint, decoding, thread, target-language and
glossary flags, the translator they build, stdin read a chunk at a time, and the log line on stderr."""

from __future__ import annotations

import os
import sys

from keras_transformer.cli.flags import add_decoding_flags, decoding

CHECKPOINT_HELP = "latest (default), averaged, best, ema (the moving average), or a checkpoint path"


def add_model_dirs(p, required=True):
    p.add_argument(
        "--model-dir",
        action="append",
        required=required,
        metavar="DIR",
        help="the trained model; repeat for an ensemble of models that share a tokenizer (their "
        "next-token probabilities averaged)",
    )


def add_decoding(p, exclude=()):
    p.add_argument("--checkpoint", default="latest", help=CHECKPOINT_HELP)
    add_decoding_flags(p, exclude)


def add_op_threads(p):
    p.add_argument(
        "--intra-op-threads",
        type=int,
        metavar="N",
        help="threads TensorFlow gives one op, set before it starts (default 1, or $TF_NUM_INTRAOP_THREADS; 0: "
        "TensorFlow's own default, every core). The cores search batches side by side (--concurrent-batches): on "
        '2 cores, one thread per op was fastest (bench/RESULTS.md, "One thread per op, batches side by side")',
    )


def use_op_threads(threads: int | None) -> None:
    """TensorFlow's intra-op pool for a decoding command (`--intra-op-threads`): `threads`, else 1
    unless $TF_NUM_INTRAOP_THREADS says otherwise; a TensorFlow already running (`main()` called
    in a process that has computed) keeps its pool, with a warning if `threads` asked for another."""
    import tensorflow as tf

    if threads is None and "TF_NUM_INTRAOP_THREADS" in os.environ:
        return
    try:
        tf.config.threading.set_intra_op_parallelism_threads(1 if threads is None else threads)
    except RuntimeError:  # TensorFlow has started
        if threads is not None and threads != tf.config.threading.get_intra_op_parallelism_threads():
            log(f"warning: TensorFlow is running already: --intra-op-threads {threads} not applied")


def add_target_lang(p, what):
    p.add_argument("--target-lang", metavar="LANG", help=f"a multilingual model: {what} (e.g. fr)")


def add_glossary(p, what):
    p.add_argument(
        "--glossary",
        metavar="FILE",
        help=f"terminology, a TSV of 'source term<TAB>target term' lines ('term<TAB>': keep it untranslated): {what}",
    )
    p.add_argument(
        "--glossary-case-sensitive", action="store_true", help="match glossary terms case-sensitively (default: not)"
    )


def read_glossary(args):
    """The `Glossary` of --glossary FILE, or None."""
    if not args.glossary:
        if args.glossary_case_sensitive:
            raise ValueError("--glossary-case-sensitive needs --glossary FILE")
        return None
    from keras_transformer.translation.glossary import Glossary

    return Glossary.from_tsv(args.glossary, args.glossary_case_sensitive)


def build_translator(args):
    from keras_transformer.translation.translator import Translator

    glossary = read_glossary(args) if "glossary" in args else None  # translate's and evaluate's, not score's
    return Translator.from_model_dir(args.model_dir, args.checkpoint, decoding(args), glossary)


STDIN_CHUNK = 1000  # stdin lines translated at once: memory stays flat over any input length


def decoded_lines(lines, strict: bool, name: str = "stdin"):
    """Text lines of a binary stream (`name`: stdin, or a file's path): invalid UTF-8 replaced by
    U+FFFD with a warning naming the line (as the SavedModels' text signatures do), or with `strict`
    a one-line error."""
    from keras_transformer.data.errors import DataError

    for number, line in enumerate(lines, 1):
        line = line.rstrip(b"\r\n")
        try:
            yield line.decode("utf-8")
        except UnicodeDecodeError as error:
            where = f"{name} line {number}: invalid UTF-8 (byte {line[error.start]:#04x} at offset {error.start})"
            if strict:
                raise DataError(f"{where}; drop --strict-input to translate it with U+FFFD in place") from None
            log(f"warning: {where} replaced by U+FFFD")
            yield line.decode("utf-8", "replace")


def stdin_lines():
    """stdin's lines as bytes, one at a time, from its binary buffer (or a text stream's, re-encoded)."""
    return getattr(sys.stdin, "buffer", None) or (line.encode("utf-8") for line in sys.stdin)


def chunks(items, size: int):
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def training_length_ratio(model_dir: str):
    """The training pairs' `confidence.LengthRatio` (the `length_ratio` flag of a translation's
    confidence), or None with a note where the training data cannot be read."""
    from keras_transformer.data.errors import DataError
    from keras_transformer.translation.confidence import LengthRatio

    try:
        return LengthRatio.from_model_dir(model_dir)
    except (DataError, OSError, ValueError) as error:
        print(f"keras-transformer: note: no length-ratio flag ({error})", file=sys.stderr)
        return None


def log(message: str) -> None:
    print(f"keras-transformer: {message}", file=sys.stderr, flush=True)
