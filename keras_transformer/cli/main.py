"""`keras-transformer train | translate | score | evaluate | average | export | import | shortlist` (and
translate-corpus, backtranslate, clean: cli/translate_corpus.py, ...): the command line.

Bad input (a missing file, a malformed line, an unknown preset, a model dir made for another
config, a corrupt checkpoint) ends with one line on stderr and exit status 2, never a
traceback; set KERAS_TRANSFORMER_DEBUG=1 to see the traceback.

`train --backend jax|torch|tensorflow` picks the Keras backend (default $KERAS_BACKEND, else
tensorflow); every other command runs the TensorFlow tools. Keras fixes its backend when it is first
imported, and `main` imports no Keras before it has parsed the command line, so it sets
KERAS_BACKEND itself (`use_backend`): one process, whose PID, signals and exit status are the run's.

Quiet by default: TensorFlow's log lines are kept out of the output (`quiet.py`), `--verbose`
or KERAS_TRANSFORMER_DEBUG=1 lets them through. Building the parser imports no TensorFlow (each
command imports what it needs), so `--help` and `--version` answer at once.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys

from keras_transformer import __version__
from keras_transformer.cli import backtranslate, clean, translate_corpus
from keras_transformer.cli.flags import (
    add_config_flags,
    add_decoding_flags,
    add_train_flags,
    decoding,
    train_configs,
)
from keras_transformer.cli.quiet import filter_native_logs, quiet_python_logs
from keras_transformer.config import PRESETS, STRATEGIES, DataConfig, decoding_names
from keras_transformer.training.backends import BACKENDS

EXIT_USAGE = 2
# Each module's `add(subparsers)` makes its parser, `run(args)` runs it.
CORPUS_COMMANDS = {"translate-corpus": translate_corpus, "backtranslate": backtranslate, "clean": clean}
CHECKPOINT_HELP = "latest (default), averaged, best, ema (the moving average), or a checkpoint path"


def _add_train(subparsers):
    p = subparsers.add_parser("train", help="train (or resume) a model in --model-dir")
    p.add_argument("--preset", help=f"model and training preset: {', '.join(PRESETS)} (default small)")
    p.add_argument(
        "--config",
        metavar="RECIPE",
        help="settings from a YAML or JSON file (keys: these flags' names, e.g. max_steps), or a model dir's "
        "config.json; flags given here override it",
    )
    p.add_argument(
        "--model-dir",
        required=True,
        help="where checkpoints, the tokenizer and config.json go (resumed if it has them)",
    )
    d = p.add_argument_group("distribution")
    d.add_argument(
        "--backend",
        choices=BACKENDS,
        help="the Keras backend to train on (default $KERAS_BACKEND, else tensorflow); on jax, --strategy auto "
        "and mirrored use every device JAX sees, on torch one device (the README's Training on JAX or PyTorch)",
    )
    d.add_argument(
        "--strategy",
        default="auto",
        choices=STRATEGIES,
        help="tf.distribute strategy (default auto); on --backend jax, auto and mirrored: keras.distribution."
        "DataParallel on every device JAX sees (auto: when it sees several)",
    )
    d.add_argument("--cpu-devices", type=int, help="split the CPU into N logical devices (try mirrored without GPUs)")
    d.add_argument(
        "--collective-timeout", type=float, default=600.0, help="seconds before a multi-worker collective fails"
    )
    p.add_argument(
        "--build-shortlist",
        action="store_true",
        help="after training, count the training pairs into the model dir's vocabulary shortlist (shortlist.npz, "
        "as `keras-transformer shortlist` does), which translate, evaluate and export then search over "
        "(--no-shortlist: not)",
    )
    add_train_flags(p)
    add_config_flags(p, DataConfig, "data (DataConfig; the README's Data)")


def _add_model_dirs(p, required=True):
    p.add_argument(
        "--model-dir",
        action="append",
        required=required,
        metavar="DIR",
        help="the trained model; repeat for an ensemble of models that share a tokenizer (their "
        "next-token probabilities averaged)",
    )


def _add_decoding(p, exclude=()):
    p.add_argument("--checkpoint", default="latest", help=CHECKPOINT_HELP)
    add_decoding_flags(p, exclude)


def _add_op_threads(p):
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
            _log(f"warning: TensorFlow is running already: --intra-op-threads {threads} not applied")


def _add_target_lang(p, what):
    p.add_argument("--target-lang", metavar="LANG", help=f"a multilingual model: {what} (e.g. fr)")


def _add_glossary(p, what):
    p.add_argument(
        "--glossary",
        metavar="FILE",
        help=f"terminology, a TSV of 'source term<TAB>target term' lines ('term<TAB>': keep it untranslated): {what}",
    )
    p.add_argument(
        "--glossary-case-sensitive", action="store_true", help="match glossary terms case-sensitively (default: not)"
    )


def _glossary(args):
    """The `Glossary` of --glossary FILE, or None."""
    if not args.glossary:
        if args.glossary_case_sensitive:
            raise ValueError("--glossary-case-sensitive needs --glossary FILE")
        return None
    from keras_transformer.inference.glossary import Glossary

    return Glossary.from_tsv(args.glossary, args.glossary_case_sensitive)


def _add_translate(subparsers):
    p = subparsers.add_parser("translate", help="translate TEXT arguments, or stdin lines, one per line")
    _add_model_dirs(p)
    _add_decoding(p)
    _add_op_threads(p)
    _add_target_lang(p, "the language to translate into")
    prefix = p.add_mutually_exclusive_group()
    prefix.add_argument("--prefix", metavar="TEXT", help="every translation continues this start of a translation")
    prefix.add_argument("--prefix-file", metavar="FILE", help="one target prefix per input line, in order")
    constraint = p.add_mutually_exclusive_group()
    constraint.add_argument(
        "--constraint", action="append", metavar="PHRASE", help="every translation holds PHRASE (repeat for more)"
    )
    constraint.add_argument(
        "--constraints", metavar="FILE", help="one line per input line: its phrases, tab-separated (empty: none)"
    )
    _add_glossary(p, "each translation holds the target terms of the terms its input holds")
    p.add_argument(
        "--strict-input",
        action="store_true",
        help="a stdin line that is not UTF-8 is an error (default: its bad bytes become U+FFFD, with a warning)",
    )
    p.add_argument(
        "--alignments",
        action="store_true",
        help="after a tab on each line, the word alignment in Pharaoh format (source-target word indices: 0-0 2-1)",
    )
    p.add_argument(
        "--no-split",
        dest="split",
        action="store_false",
        help="translate each input as one sentence (default: as a document, sentence by sentence, the "
        "whitespace between them kept, a sentence too long for the model cut at its best boundary; "
        "--nbest, --num-samples, --alternatives, --alignments, --prefix and --constraint always take one sentence)",
    )
    p.add_argument(
        "--markup",
        choices=("on", "off"),
        default="on",
        help="on (default): an input's tags, entities, placeholders (%%s, {name}, $HOME), URLs and e-mail addresses "
        "come out exactly, placed by the word alignments (without the glossary); for 1-best translations without "
        "--prefix, --constraint, --target-lang. off: translated as text",
    )
    p.add_argument(
        "--alternatives",
        type=int,
        metavar="N",
        help="the N most likely words after the --prefix (or at the start), each continued to a whole translation "
        "(autocompletion; CTranslate2's return_alternatives): N lines INDEX<TAB>SCORE<TAB>TEXT per input",
    )
    p.add_argument(
        "text",
        nargs="*",
        help="texts (documents: see --no-split); none: stdin, one per line, streamed "
        "(--nbest N, --num-samples N: INDEX<TAB>SCORE<TAB>TEXT)",
    )


# What scoring reads of the decoding settings: the length penalty, and where it runs.
SCORING_FIELDS = ("alpha", "disable_unk", "dtype", "int8", "batch_size")


def _add_score(subparsers):
    p = subparsers.add_parser(
        "score", help="score translations: SOURCE<TAB>TARGET lines -> SCORE<TAB>LOG_PROB<TAB>TOKENS lines"
    )
    p.add_argument("--model-dir", required=True, help="the trained model directory whose model scores the pairs")
    p.add_argument("--data", metavar="FILE", help="SOURCE<TAB>TARGET lines (default: stdin)")
    _add_target_lang(p, "the language of the targets")
    excluded = tuple(name for name in decoding_names() if name not in SCORING_FIELDS)
    _add_decoding(p, exclude=excluded)


def _add_evaluate(subparsers):
    p = subparsers.add_parser("evaluate", help="sacreBLEU BLEU and chrF on a held-out split")
    _add_model_dirs(p)
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
    _add_target_lang(p, "the language to translate into (default data: the training source of that language)")
    _add_glossary(p, "each translation holds the target terms of the terms its source holds")
    _add_decoding(p)
    _add_op_threads(p)
    p.add_argument("--show", type=int, default=3, help="print N example translations")


def _add_export(subparsers):
    p = subparsers.add_parser("export", help="SavedModels and TFLite models, or a CTranslate2 model (export/README.md)")
    _add_model_dirs(p, required=False)
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
    _add_glossary(p, "the SavedModel's translate holds the target terms of the terms a text holds")
    add_decoding_flags(p, exclude=("batch_size", "concurrent_batches", "int8"))  # int8: its own SavedModel
    p.add_argument(
        "--check",
        metavar="OUT",
        help="check the export in OUT: the TF Serving contract, and every artifact's translations of held-out "
        "pairs against the checkpoint's (the model dir: --model-dir, or the one OUT was exported from)",
    )
    p.add_argument("--sample", type=int, default=100, help="with --check: held-out pairs translated (default 100)")


def _add_average(subparsers):
    p = subparsers.add_parser("average", help="average the last N checkpoints into MODEL_DIR/averaged (§6.1)")
    p.add_argument("--model-dir", required=True, help="the model directory whose checkpoints are averaged")
    p.add_argument("--last", type=int, default=5, help="checkpoints to average (default 5, the paper's for base)")
    p.add_argument(
        "--checkpoint",
        default="latest",
        choices=("latest", "ema"),
        help="latest (default): the training checkpoints; ema: the moving averages in ema/",
    )


def _add_import(subparsers):
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


def _add_shortlist(subparsers):
    from keras_transformer.data.shortlist import FREQUENT, PER_SOURCE

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


def _add_verbose(p, default):
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=default,
        help="show TensorFlow's log lines (also KERAS_TRANSFORMER_DEBUG=1, which adds tracebacks)",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="keras-transformer", description=__doc__.splitlines()[0])
    p.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    _add_verbose(p, False)
    subparsers = p.add_subparsers(dest="command", required=True)
    _add_train(subparsers)
    _add_translate(subparsers)
    _add_score(subparsers)
    _add_evaluate(subparsers)
    _add_export(subparsers)
    _add_average(subparsers)
    _add_import(subparsers)
    _add_shortlist(subparsers)
    for command in CORPUS_COMMANDS.values():
        command.add(subparsers)
    for command in subparsers.choices.values():  # --verbose before or after the command
        _add_verbose(command, argparse.SUPPRESS)
    return p


def use_backend(args) -> str:
    """Set KERAS_BACKEND for the command, before Keras is imported: `train --backend`'s (default
    $KERAS_BACKEND), the TensorFlow tools' for every other command; return it. In a process whose
    Keras runs on another backend already (`main` called from Python), ValueError."""
    wanted = getattr(args, "backend", None) or (
        os.environ["KERAS_BACKEND"] if args.command == "train" else "tensorflow"
    )
    keras = sys.modules.get("keras")
    if keras is None:
        os.environ["KERAS_BACKEND"] = wanted
        return wanted
    if keras.backend.backend() != wanted:
        raise ValueError(
            f"Keras runs on {keras.backend.backend()} in this process already (it fixes its backend when first "
            f"imported): run keras-transformer {args.command} on {wanted} in a new process"
        )
    return wanted


def _train(args):
    import keras

    from keras_transformer.training.distribute import resolve_strategy, use_cpu_devices
    from keras_transformer.training.trainer import train

    config, training, data = train_configs(args, "small")
    if keras.backend.backend() != "tensorflow":  # Keras' distribution; `train` refuses what TensorFlow alone does
        if args.cpu_devices:
            raise ValueError(
                f"--cpu-devices splits the CPU for tf.distribute, not on {keras.backend.backend()} (on jax, "
                "XLA_FLAGS=--xla_force_host_platform_device_count=N makes N CPU devices)"
            )
        strategy = args.strategy
    else:
        if args.cpu_devices:
            use_cpu_devices(args.cpu_devices)
        strategy = resolve_strategy(args.strategy, args.collective_timeout)
    train(args.model_dir, config, training, data, strategy=strategy, log=_log)
    if args.build_shortlist:  # counts the training pairs (tf.data and NumPy): on every backend
        from keras_transformer.data.shortlist import build_shortlist

        build_shortlist(args.model_dir, log=_log)


def _translator(args):
    from keras_transformer.inference.translator import Translator

    glossary = _glossary(args) if "glossary" in args else None  # translate's and evaluate's, not score's
    return Translator.from_model_dir(args.model_dir, args.checkpoint, decoding(args), glossary)


STDIN_CHUNK = 1000  # stdin lines translated at once: memory stays flat over any input length


def _decoded_lines(lines, strict: bool, name: str = "stdin"):
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
            _log(f"warning: {where} replaced by U+FFFD")
            yield line.decode("utf-8", "replace")


def _stdin_lines():
    """stdin's lines as bytes, one at a time, from its binary buffer (or a text stream's, re-encoded)."""
    return getattr(sys.stdin, "buffer", None) or (line.encode("utf-8") for line in sys.stdin)


def _chunks(items, size: int):
    chunk = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _lines(path: str):
    """The lines of a UTF-8 text file, without their line ends, one at a time."""
    with open(path, encoding="utf-8") as f:
        for line in f:
            yield line.rstrip("\r\n")


def _matched(batches, path: str, flag: str, parse=None):
    """Each batch (inputs, ...) with the lines of the file `path` (of `flag`: one line per input) that
    go with its inputs, `parse(number, line)`d: (inputs, ..., [line, ...]). The file is read along
    with the inputs, a batch at a time, never whole; a ValueError naming both counts when the file
    or the inputs end first (after the batches before)."""
    lines = enumerate(_lines(path), 1)
    done = 0
    for batch in batches:
        inputs = len(batch[0])
        matched = [parse(number, line) if parse else line for number, line in itertools.islice(lines, inputs)]
        if len(matched) < inputs:
            total = done + inputs + sum(len(rest[0]) for rest in batches)
            raise ValueError(f"{flag} {path} has {done + len(matched)} lines for {total} inputs")
        done += inputs
        yield (*batch, matched)
    extra = sum(1 for _ in lines)
    if extra:
        raise ValueError(f"{flag} {path} has {done + extra} lines for {done} inputs")


def _translate(args):
    from keras_transformer.inference.alignment import format_pharaoh

    use_op_threads(args.intra_op_threads)
    translator = _translator(args)
    lines = _decoded_lines(_stdin_lines(), args.strict_input)
    texts = [args.text] if args.text else _chunks(lines, STDIN_CHUNK)
    if args.prefix_file:  # one prefix per input, read along with the inputs
        batches = _matched(((chunk,) for chunk in texts), args.prefix_file, "--prefix-file")
    else:
        batches = ((chunk, args.prefix) for chunk in texts)
    batches = _constraints(args, batches)  # (inputs, prefixes, constraints)
    decoding = translator.decoding
    n = decoding.sampling.num_samples if decoding.sampling else decoding.search.nbest or 1  # 1: one line per input
    prefixed = args.prefix is not None or args.prefix_file
    constrained = args.constraint or args.constraints
    if args.alignments and (n > 1 or prefixed or constrained or args.target_lang):
        raise ValueError(
            "--alignments aligns the best translation of each input: drop --nbest, --num-samples, --prefix, "
            "--constraint, --target-lang (start each input with its language's token, <2fr>, instead)"
        )
    if args.alternatives is not None and (n > 1 or constrained or args.alignments):
        raise ValueError(
            "--alternatives gives N lines per input: drop --nbest, --num-samples, --constraint, --alignments"
        )
    index, lang = 0, args.target_lang
    for chunk, prefixes, constraints in batches:  # each chunk sorted by length inside the translator, in input order
        if args.alternatives is not None:
            for k, hypotheses in enumerate(translator.translate_alternatives(chunk, args.alternatives, prefixes, lang)):
                for translation, score in hypotheses:
                    print(f"{index + k}\t{score:.4f}\t{translation}")
        elif args.alignments:
            for translation, pairs in translator.translate_with_alignments(chunk):
                print(f"{translation}\t{format_pharaoh(pairs)}")
        elif n == 1 and args.markup == "on" and not (prefixed or constrained or lang):
            for translation in translator.translate(chunk, markup=True, split=args.split):
                print(translation)
        elif n == 1:
            split = args.split and prefixes is None and constraints is None  # a document: sentence by sentence
            for translation in translator.translate(chunk, prefixes, constraints, lang, split=split):
                print(translation)
        else:
            for k, hypotheses in enumerate(
                translator.translate_nbest(chunk, prefixes=prefixes, constraints=constraints, target_lang=lang)
            ):
                for translation, score in hypotheses:
                    print(f"{index + k}\t{score:.4f}\t{translation}")
        index += len(chunk)
        sys.stdout.flush()


def _constraints(args, batches):
    """Each batch (inputs, prefixes) with the phrases its translations hold: --constraint's, one list
    for all inputs; a --constraints file's lines, one per input, read along with the inputs; or None."""
    if args.constraint:
        for phrase in args.constraint:
            if not phrase.strip():
                raise ValueError("--constraint: an empty phrase")
        return ((*batch, list(args.constraint)) for batch in batches)
    if not args.constraints:
        return ((*batch, None) for batch in batches)

    def phrases(number: int, line: str) -> list[str]:
        phrases = line.split("\t") if line else []
        if any(not phrase.strip() for phrase in phrases):
            raise ValueError(f"--constraints {args.constraints}:{number}: an empty phrase (phrases are tab-separated)")
        return phrases

    return _matched(batches, args.constraints, "--constraints", phrases)


def _score(args):
    """SOURCE<TAB>TARGET lines of --data or stdin, scored a chunk at a time (memory flat); bad UTF-8
    bytes replaced with a warning naming the line, as `translate` does."""
    from keras_transformer.data.errors import DataError

    translator = _translator(args)
    where = args.data or "stdin"
    with contextlib.ExitStack() as stack:
        stream = stack.enter_context(open(args.data, "rb")) if args.data else _stdin_lines()
        for chunk in _chunks(enumerate(_decoded_lines(stream, False, where), 1), STDIN_CHUNK):
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


def _evaluate(args):
    from keras_transformer.data.files import has_own_splits
    from keras_transformer.data.held_out import held_out
    from keras_transformer.data.sources import read_pairs
    from keras_transformer.data.splits import WHOLE
    from keras_transformer.inference.evaluation import evaluate
    from keras_transformer.model_dir import ModelDir

    use_op_threads(args.intra_op_threads)
    translator = _translator(args)
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


def _average(args):
    from keras_transformer.training.averaging import average_last

    written = average_last(args.model_dir, args.last, args.checkpoint)
    kind = "ema " if args.checkpoint == "ema" else ""
    _log(f"averaged the last {args.last} {kind}checkpoints into {written}")


def _check_export(args) -> int:
    """`export --check OUT`: the TF Serving contract of its SavedModels, then (with the model dir,
    from --model-dir or translator.json) every artifact's translations against the checkpoint's."""
    import json as json_module

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
            model_dirs = json_module.load(f).get("model_dirs")
    if not model_dirs:
        print(f"{out}: translations not checked (no model dir: pass --model-dir)")
    else:
        reports, quality = check_quality(out, model_dirs, args.sample)
        for report in reports:
            print(report.line())
        problems += [f"quality: {problem}" for problem in quality]
    for problem in problems:
        _log(problem)
    return 1 if problems else 0


def export_decoding(args):
    """The decoding settings an export serves: the flags', with `disable_unk` on unless the flags
    say otherwise (an `<unk>` prints as a gap; never generating it cost no BLEU on the held-out
    verses: bench/RESULTS.md, "Decoding controls")."""
    settings = decoding(args)
    return settings if args.disable_unk is not None else settings.replace(disable_unk=True)


def _export(args):
    if args.check:
        return _check_export(args)
    if not (args.model_dir and args.out):
        raise ValueError("export needs --model-dir and --out (or --check OUT)")
    if args.quantization and args.format != "ctranslate2":
        raise ValueError("--quantization applies to --format ctranslate2 only")
    from keras_transformer.inference.ensemble import Ensemble
    from keras_transformer.model_dir import ModelDir, load_model

    if len(args.model_dir) > 1:
        if args.format == "ctranslate2":
            raise ValueError("--format ctranslate2 exports one model: pass one --model-dir")
        model, tokenizer = Ensemble.from_model_dirs(args.model_dir, args.checkpoint)
        exported = [ModelDir(path).resolve_checkpoint(args.checkpoint) for path in args.model_dir]
    else:
        model, tokenizer, values = load_model(args.model_dir[0], args.checkpoint)
        exported = [values["checkpoint_path"]]
    from keras_transformer.data.shortlist import model_dir_shortlist

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
            log=_log,
            model_dirs=args.model_dir,
            tflite=args.tflite,
            checkpoint={"name": args.checkpoint, "paths": [os.path.abspath(path) for path in exported]},
            glossary=_glossary(args),
            lexical_shortlist=shortlist,
        )
    for artifact, path in paths.items():
        print(f"{artifact}\t{path}")


def _import(args):
    from keras_transformer.importers.huggingface import import_huggingface
    from keras_transformer.importers.marian import import_marian

    importer = {"marian": import_marian, "huggingface": import_huggingface}[args.source_format]
    layout = {"sinusoid_layout": args.sinusoid_layout} if args.sinusoid_layout else {}
    checkpoint = importer(args.directory, args.model_dir, warn=lambda line: _log(f"warning: {line}"), **layout)
    print(f"model_dir\t{args.model_dir}\ncheckpoint\t{checkpoint}")


def _shortlist(args):
    from keras_transformer.data.shortlist import build_shortlist

    path = build_shortlist(
        args.model_dir, args.data, per_source=args.per_source, frequent=args.frequent, limit=args.limit, log=_log
    )
    print(f"shortlist\t{path}")


def _log(message: str) -> None:
    print(f"keras-transformer: {message}", file=sys.stderr, flush=True)


def main(argv=None) -> int:
    """Run the command in `argv` (default: this process's command line, and then this process's
    stderr is the user's: TensorFlow's native log lines are filtered out of it too)."""
    args = parser().parse_args(argv)
    try:
        use_backend(args)
    except ValueError as error:
        _log(f"error: {error}")
        return EXIT_USAGE
    if not (args.verbose or os.environ.get("KERAS_TRANSFORMER_DEBUG")):
        quiet_python_logs()
        if argv is None:
            filter_native_logs()
    from keras_transformer.data.errors import DataError
    from keras_transformer.data.tokenizer import TokenizerError
    from keras_transformer.model_dir import ModelDirError
    from keras_transformer.training.callbacks.budget import Interrupted

    commands = {"train": _train, "translate": _translate, "score": _score, "evaluate": _evaluate}
    others = {"average": _average, "export": _export, "import": _import, "shortlist": _shortlist}
    command = {**commands, **others, **{name: command.run for name, command in CORPUS_COMMANDS.items()}}[args.command]
    try:
        status = command(args)
    except (DataError, ModelDirError, TokenizerError, ValueError, OSError) as error:
        if os.environ.get("KERAS_TRANSFORMER_DEBUG"):
            raise
        _log(f"error: {error}")
        return EXIT_USAGE
    except Interrupted as interrupted:  # the checkpoint is written: the same command resumes
        return 128 + interrupted.signal_number
    except KeyboardInterrupt:
        _log("interrupted")
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
