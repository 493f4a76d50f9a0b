"""The checkpoints of a model directory (its checkpoints/, averaged/, best/ and ema/): listed,
recovered, pruned, written and restored, apart from the directory's other files (`directory`).

Checkpoints come in two kinds, listed, pruned and read alike: TensorFlow's (`ckpt-N.index` and
`ckpt-N.data-*`, written on the TensorFlow backend) and Keras' (`ckpt-N.weights.h5`, written on JAX
and PyTorch, `keras_checkpoint`), so that a model trained on any backend is used by the same tools.
Each checkpoint directory has TensorFlow's state file, `checkpoint`, which lists them; one that is
missing or unreadable is rebuilt from the checkpoint files.

A TensorFlow checkpoint read on JAX or PyTorch goes through a TensorFlow process: this module's
`main` (`python -m keras_transformer.model_dir.checkpoints CONFIG PREFIX OUT`) restores it and writes
it in Keras' format (`read_tensorflow_weights`).
"""

from __future__ import annotations

import contextlib
import errno
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile

import keras
import tensorflow as tf

from keras_transformer import messages
from keras_transformer.config import TransformerConfig
from keras_transformer.keras_checkpoint import (
    KERAS_SUFFIX,
    KerasCheckpoint,
    is_keras_checkpoint,
    tensorflow_process,
)
from keras_transformer.messages import first_line
from keras_transformer.model import Transformer
from keras_transformer.model_dir.errors import CheckpointWriteError, ModelDirError

STATE_FILE = "checkpoint"  # TensorFlow's CheckpointState, in text format, in every checkpoint directory


def _read_state(directory: str) -> tuple[list[str] | None, str]:
    """(the checkpoint paths the state file lists, newest first, or None when it cannot be read;
    why not). TensorFlow's `get_checkpoint_state` raises on an empty file and returns None (with a
    warning through its logger, which the CLI silences) on one that does not parse."""
    if not os.path.exists(os.path.join(directory, STATE_FILE)):
        return None, "missing"
    try:
        state = tf.train.get_checkpoint_state(directory)
    except ValueError as error:  # empty ("Invalid checkpoint state"), or not UTF-8 (UnicodeDecodeError)
        return None, f"unreadable: {first_line(error)}"
    if state is None:
        return None, "unreadable: it does not parse"
    return list(reversed(state.all_model_checkpoint_paths)), ""


def _found_checkpoints(directory: str) -> list[str]:
    """The checkpoints `directory` holds, from their files (`ckpt-N.index`, `ckpt-N.weights.h5`), newest first."""
    paths = [
        path.removesuffix(suffix)
        for suffix in (".index", KERAS_SUFFIX)
        for path in glob.glob(os.path.join(glob.escape(directory), "ckpt-*" + suffix))
    ]
    numbered = [path for path in paths if checkpoint_step(path) is not None]
    return sorted(numbered, key=checkpoint_step, reverse=True)


def checkpoint_file(prefix: str) -> str:
    """The file that says the checkpoint `prefix` is complete: its `.weights.h5` or its `.index`."""
    return prefix + KERAS_SUFFIX if is_keras_checkpoint(prefix) else prefix + ".index"


def checkpoint_paths(directory: str, warn=None) -> list[str]:
    """The checkpoints in `directory` (checkpoints/, averaged/, best/, ema/), newest first: those its
    state file lists, or, when that file is missing, empty or corrupt (a copy fault, a crash while
    TensorFlow rewrites it) but checkpoint files are there, those the files hold, said through
    `warn` (default: stderr) in one line naming the newest."""
    paths, why = _read_state(directory)
    if paths is not None:
        return paths
    found = _found_checkpoints(directory)
    if found:
        (warn or messages.warn)(
            f"{os.path.join(directory, STATE_FILE)} is {why}; found {len(found)} checkpoint(s) from their files, "
            f"the newest {found[0]}"
        )
    return found


def repair_state(directory: str, warn=None) -> None:
    """Rewrite `directory`'s unreadable state file from the checkpoint files (oldest first, their
    modification times as save times, so that `CheckpointManager` prunes them as it would have), or
    remove it when no checkpoint is there (`CheckpointManager` refuses an empty one)."""
    if _read_state(directory)[0] is not None or not os.path.isdir(directory):
        return
    found = list(reversed(checkpoint_paths(directory, warn)))
    if not found:
        with contextlib.suppress(FileNotFoundError):
            os.remove(os.path.join(directory, STATE_FILE))
        return
    _write_state(directory, found, [_saved_at(path) for path in found])


def _saved_at(prefix: str) -> float:
    """When the checkpoint `prefix` was written (0 for one whose files are gone)."""
    try:
        return os.path.getmtime(checkpoint_file(prefix))
    except FileNotFoundError:
        return 0.0


def _write_state(directory: str, paths: list[str], times: list[float]) -> None:
    """Point `directory`'s state file at the checkpoints `paths` (oldest first), saved at `times`."""
    names = [os.path.basename(path) for path in paths]  # relative, as CheckpointManager writes them
    tf.compat.v1.train.update_checkpoint_state(
        directory,
        names[-1],
        all_model_checkpoint_paths=names,
        all_model_checkpoint_timestamps=times,
        last_preserved_timestamp=min(times) - 1,
    )


class KerasCheckpointManager:
    """What training uses of `tf.train.CheckpointManager`, for a `KerasCheckpoint`: `save` numbered
    by step, the `max_to_keep` newest kept, the state file rewritten (atomically, by TensorFlow)
    once the new file is complete and before the oldest is deleted."""

    def __init__(self, checkpoint: KerasCheckpoint, directory: str, max_to_keep: int):
        self.checkpoint, self.directory, self.max_to_keep = checkpoint, directory, max_to_keep
        self.checkpoints = list(reversed(checkpoint_paths(directory)))  # oldest first, as TensorFlow's

    @property
    def latest_checkpoint(self) -> str | None:
        return self.checkpoints[-1] if self.checkpoints else None

    def save(self, checkpoint_number: int) -> str:
        os.makedirs(self.directory, exist_ok=True)
        prefix = self.checkpoint.write(os.path.join(self.directory, f"ckpt-{checkpoint_number}"))
        paths = [path for path in self.checkpoints if path != prefix] + [prefix]
        self.checkpoints, dropped = paths[-self.max_to_keep :], paths[: -self.max_to_keep]
        _write_state(self.directory, self.checkpoints, [_saved_at(path) for path in self.checkpoints])
        for path in dropped:
            remove_checkpoint_files(path)
        return prefix


def manager(checkpoint, directory: str, keep: int):
    """A checkpoint manager in `directory` keeping the `keep` newest: TensorFlow's for a
    `tf.train.Checkpoint`, `KerasCheckpointManager` for a `KerasCheckpoint`."""
    if isinstance(checkpoint, KerasCheckpoint):
        return KerasCheckpointManager(checkpoint, directory, keep)
    return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=keep, checkpoint_name="ckpt")


def checkpoint_step(path: str) -> int | None:
    """The step a checkpoint path is numbered by (`.../ckpt-1200` -> 1200), or None."""
    number = path.rsplit("-", 1)[-1]
    return int(number) if number.isdigit() else None


def weights_checkpoint(model):
    """A checkpoint of the model's weights only (no optimizer); it also reads training checkpoints.
    TensorFlow's on the TensorFlow backend, Keras' (`KerasCheckpoint`) on the others."""
    if keras.backend.backend() == "tensorflow":
        return tf.train.Checkpoint(model=model)
    return KerasCheckpoint(model)


def save_weights(model, directory: str, step: int, keep: int = 1) -> str:
    """Write `model`'s weights (no optimizer) as a checkpoint in `directory` (averaged/, best/,
    ema/), numbered `step`, keeping the `keep` newest; return its path.

    The write goes to a temporary sibling (`directory`.tmp) that holds the kept checkpoints too (hard
    links: no copy), renamed into place once complete: a failed write (a full disk, most often)
    leaves the previous copy intact, removes its own files and raises `CheckpointWriteError`."""
    directory = os.path.normpath(directory)
    temporary, previous = directory + ".tmp", directory + ".old"
    for leftover in (temporary, previous):  # of a write that crashed
        shutil.rmtree(leftover, ignore_errors=True)
    try:
        if os.path.isdir(directory):
            shutil.copytree(directory, temporary, copy_function=os.link)
            repair_state(temporary, warn=lambda line: None)  # CheckpointManager refuses an unreadable one
        kept = manager(weights_checkpoint(model), temporary, keep)
        kept.save(checkpoint_number=step)
        for prefix in set(_found_checkpoints(temporary)) - set(checkpoint_paths(temporary)):
            remove_checkpoint_files(prefix)  # of the other kind, which the manager does not prune
    except (tf.errors.OpError, OSError) as error:
        shutil.rmtree(temporary, ignore_errors=True)
        last_good = checkpoint_paths(directory)
        raise _write_error(error, os.path.join(directory, f"ckpt-{step}"), (last_good or [None])[0]) from None
    if os.path.isdir(directory):
        os.rename(directory, previous)
    os.rename(temporary, directory)
    shutil.rmtree(previous, ignore_errors=True)
    return os.path.join(directory, f"ckpt-{step}")


def remove_checkpoint_files(prefix: str) -> None:
    """Delete the files of the checkpoint `prefix` (`prefix.index`, `prefix.data-*`) and the
    temporary directory a save writes first (`prefix_temp`), as a failed save leaves them."""
    for path in glob.glob(glob.escape(prefix) + ".*") + glob.glob(glob.escape(prefix) + "_temp*"):
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)


def save_checkpoint(saver, step: int) -> str:
    """`saver.save(checkpoint_number=step)` (a `manager`); a failed write (no space left, most
    often) leaves none of its files and raises `CheckpointWriteError` naming the last good checkpoint."""
    last_good = saver.latest_checkpoint
    prefix = os.path.join(saver.directory, f"ckpt-{step}")
    try:
        return saver.save(checkpoint_number=step)
    except (tf.errors.OpError, OSError) as error:
        remove_checkpoint_files(prefix)
        raise _write_error(error, prefix, last_good) from None


def _write_error(error: Exception, prefix: str, last_good: str | None) -> CheckpointWriteError:
    """The one-line error of a failed write of the checkpoint `prefix`."""
    message = getattr(error, "message", None) or str(error)
    full = isinstance(error, tf.errors.ResourceExhaustedError) or getattr(error, "errno", None) == errno.ENOSPC
    full = full or "No space left on device" in message
    what = "no space left on device" if full else f"cannot write ({first_line(error)})"
    return CheckpointWriteError(f"{what} writing checkpoint {prefix}; the last good one is {last_good or 'none'}")


def restore_newest(checkpoint, paths: list[str], *, weights_only: bool = False, warn=None) -> str:
    """Restore `checkpoint` from the first of `paths` (newest first) that restores; return it.
    Skipping a broken one (a truncated file) is said through `warn` (default: stderr), one line;
    when none restores, the newest one's `ModelDirError`."""
    errors = []
    for path in paths:
        try:
            restore(checkpoint, path, weights_only=weights_only)
        except ModelDirError as error:
            errors.append(error)
            continue
        if errors:
            reasons = "; ".join(str(error) for error in errors)
            (warn or messages.warn)(f"using {path}, the newest checkpoint that restores ({reasons})")
        return path
    raise errors[0]


def restore(checkpoint, path: str, *, weights_only: bool = False) -> None:
    """Restore `checkpoint` (a `tf.train.Checkpoint` or a `KerasCheckpoint`) from `path`, of either
    kind, with a one-line error for a corrupt or foreign file. `weights_only` (a
    `weights_checkpoint`): what the file holds beside the model's weights (a training checkpoint's
    optimizer: its step, Adam's moments, the moving average of `--ema-decay`) is ignored, but its
    weights and the model's must be the same: the error names the model's weights it has no value
    for (a checkpoint of a shallower model, another architecture) or its weights the model has no
    place for (a deeper model's layers). A training run resumes from checkpoints of its own kind only."""
    keras_kind, keras_run = is_keras_checkpoint(path), isinstance(checkpoint, KerasCheckpoint)
    if keras_kind != keras_run and not weights_only:
        raise ModelDirError(
            f"cannot resume from checkpoint {path}: it was written on "
            + ("JAX or PyTorch (Keras weights): train it with --backend jax or torch" if keras_kind else
               "TensorFlow: train it with --backend tensorflow")
            + ", or fine-tune it into a new model dir (--init-from)"
        )  # fmt: skip
    if keras_kind or keras_run:
        try:
            if keras_kind:
                (checkpoint if keras_run else KerasCheckpoint(checkpoint.model)).read(path)
            else:
                read_tensorflow_weights(checkpoint.model, path)
        except ValueError as error:
            raise ModelDirError(f"cannot restore checkpoint {path}: {error}") from None
        return
    try:
        status = checkpoint.restore(path)
        if weights_only:
            status.expect_partial()  # the optimizer's values: a training checkpoint read for its weights
            missing, unused = _unrestored_weights(checkpoint.model, status), _unused_weights(checkpoint.model, status)
        else:
            status.assert_existing_objects_matched()
    except (tf.errors.OpError, AssertionError, ValueError, IndexError, KeyError) as error:  # IndexError: truncated data
        raise ModelDirError(f"cannot restore checkpoint {path}: {first_line(error)}") from None
    if weights_only and missing:
        raise ModelDirError(
            f"cannot restore checkpoint {path}: it has no value for {len(missing)} of the model's "
            f"{len(checkpoint.model.weights)} weights ({_named(missing)}): a checkpoint of another model?"
        )
    if weights_only and unused:
        raise ModelDirError(
            f"cannot restore checkpoint {path}: it holds {len(unused)} weights that the model "
            f"({len(checkpoint.model.weights)} weights) has no place for ({_named(unused)}): a checkpoint of "
            "another model?"
        )


MISSING_NAMED = 5  # missing or unused weights a restore error names


def _named(paths: list[str]) -> str:
    """The first `MISSING_NAMED` of `paths`, and how many more."""
    more = len(paths) - MISSING_NAMED
    return ", ".join(paths[:MISSING_NAMED]) + (f" and {more} more" if more > 0 else "")


def _unrestored_weights(model, status) -> list[str]:
    """The paths (without the model's own name) of `model`'s weights that the restore `status` bound
    to no value of its checkpoint. TF 2.21's load status keeps the objects it bound in
    `_checkpoint.object_by_proto_id` (what its `assert_existing_objects_matched` reads, whose
    message prints every value instead of naming the weights)."""
    bound = {id(trackable) for trackable in status._checkpoint.object_by_proto_id.values()}
    return [weight.path.partition("/")[2] for weight in model.weights if id(weight) not in bound]


def _unused_weights(model, status) -> list[str]:
    """The checkpoint's weights under the parts of `model` (its embedding, encoder, decoder: its
    trackable children) that the restore `status` bound to nothing, by their path in the checkpoint's
    object graph (`encoder/layer_2/self_attention/query_dense/_kernel`): the layers of a deeper model.
    What a training checkpoint holds beside them (the optimizer, also reached through the model's
    `optimizer` attribute, and the compiled state) is not under those parts. The graph is TF 2.21's
    `_checkpoint.object_graph_proto`, its bound nodes `object_by_proto_id`."""
    graph, bound = status._checkpoint.object_graph_proto, status._checkpoint.object_by_proto_id
    (root,) = [child.node_id for child in graph.nodes[0].children if child.local_name == "model"]
    parts = set(model._trackable_children())
    unused, seen = [], set()
    stack = [(child.node_id, child.local_name) for child in reversed(graph.nodes[root].children)]
    stack = [(node, name) for node, name in stack if name in parts]
    while stack:  # depth first, in the graph's order
        node, path = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        if graph.nodes[node].attributes and node not in bound:  # a value of a variable
            unused.append(path)
        stack.extend((child.node_id, f"{path}/{child.local_name}") for child in reversed(graph.nodes[node].children))
    return unused


def read_tensorflow_weights(model, prefix: str) -> None:
    """Set `model`'s weights (on JAX or PyTorch) from the TensorFlow checkpoint `prefix`, which only
    TensorFlow reads: a TensorFlow process (`main`) converts it to Keras' format first (a few seconds)."""
    with tempfile.TemporaryDirectory() as directory:
        converted = os.path.join(directory, "ckpt")
        config = json.dumps(model.config.to_dict())
        command, env = tensorflow_process(__name__, config, prefix, converted + KERAS_SUFFIX)
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode:
            lines = result.stderr.strip().splitlines() or ["TensorFlow could not read it"]
            raise ValueError(f"a TensorFlow checkpoint, read through TensorFlow: {lines[-1]}")
        KerasCheckpoint(model).read(converted)


def main(argv: list[str]) -> int:
    """The TensorFlow process of `read_tensorflow_weights`: argv = [the model's config as JSON, the
    TensorFlow checkpoint, the Keras weights file to write]; a checkpoint that does not restore is
    its last line on stderr and exit status 1."""
    config, prefix, out = argv
    model = Transformer(TransformerConfig.from_dict(json.loads(config)))
    model.build()
    try:
        restore(weights_checkpoint(model), prefix, weights_only=True)
    except ModelDirError as error:
        print(error, file=sys.stderr)
        return 1
    model.save_weights(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
