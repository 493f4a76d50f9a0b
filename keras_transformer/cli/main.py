"""`keras-transformer COMMAND`: the command line (`keras-transformer --help` lists the commands).

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
import os
import sys

from keras_transformer import __version__
from keras_transformer.cli import (
    average,
    backtranslate,
    clean,
    evaluate,
    export,
    import_,
    score,
    serve,
    shortlist,
    train,
    translate,
    translate_corpus,
    translate_file,
)
from keras_transformer.cli.common import log
from keras_transformer.cli.quiet import filter_native_logs, quiet_python_logs

EXIT_USAGE = 2
# The commands, in --help's order: each module's `add(subparsers)` makes its parser, `run(args)` runs it.
COMMANDS = {
    "train": train,
    "translate": translate,
    "score": score,
    "evaluate": evaluate,
    "export": export,
    "average": average,
    "import": import_,
    "shortlist": shortlist,
    "serve": serve,
    "translate-file": translate_file,
    "translate-corpus": translate_corpus,
    "backtranslate": backtranslate,
    "clean": clean,
}


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
    for command in COMMANDS.values():
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


def main(argv=None) -> int:
    """Run the command in `argv` (default: this process's command line, and then this process's
    stderr is the user's: TensorFlow's native log lines are filtered out of it too)."""
    args = parser().parse_args(argv)
    try:
        use_backend(args)
    except ValueError as error:
        log(f"error: {error}")
        return EXIT_USAGE
    if not (args.verbose or os.environ.get("KERAS_TRANSFORMER_DEBUG")):
        quiet_python_logs()
        if argv is None:
            filter_native_logs()
    from keras_transformer.data.errors import DataError
    from keras_transformer.data.tokenizer import TokenizerError
    from keras_transformer.model_dir import ModelDirError
    from keras_transformer.training.callbacks.budget import Interrupted

    try:
        status = COMMANDS[args.command].run(args)
    except (DataError, ModelDirError, TokenizerError, ValueError, OSError) as error:
        if os.environ.get("KERAS_TRANSFORMER_DEBUG"):
            raise
        log(f"error: {error}")
        return EXIT_USAGE
    except Interrupted as interrupted:  # the checkpoint is written: the same command resumes
        return 128 + interrupted.signal_number
    except KeyboardInterrupt:
        log("interrupted")
        return 130
    return status or 0


if __name__ == "__main__":
    sys.exit(main())
