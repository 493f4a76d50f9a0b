"""The model directory: config.json, tokenizer.model (and tokenizer.target.model where the target
side has its own SentencePiece model, `SubwordTokenizer`), checkpoints/ and logs/ of one model, and
the weights-only checkpoints averaged/ (`keras-transformer average`), best/ (the best
validation BLEU, `keras_transformer.training.callbacks.bleu.BleuCallback`, or loss,
`callbacks.early_stopping`) and ema/ (the moving average of the weights, `callbacks.ema`).

Everything needed to rebuild and use a trained model lives here; `load_model` restores the
latest checkpoint that restores (or a chosen one). One `train` at a time writes to a directory
(`ModelDir.lock`).

Checkpoints come in two kinds, listed, pruned and read alike: TensorFlow's (`ckpt-N.index` and
`ckpt-N.data-*`, written on the TensorFlow backend) and Keras' (`ckpt-N.weights.h5`, written on JAX
and PyTorch, `keras_checkpoint`), so that a model trained on any backend is used by the same tools.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import glob
import json
import os
import shutil
import socket
import sys

import keras
import tensorflow as tf

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.keras_checkpoint import (
    KERAS_SUFFIX,
    KerasCheckpoint,
    is_keras_checkpoint,
    read_tensorflow_weights,
)

WEIGHTS_CHECKPOINTS = ("averaged", "best", "ema")


class ModelDirError(ValueError):
    """A model directory that is missing, incomplete, corrupt or made for another config."""


class ModelDirLocked(ModelDirError):
    """Another live `train` process holds the model directory."""


class CheckpointWriteError(ModelDirError):
    """A checkpoint could not be written (a full disk, most often); its partial files are gone."""


def _take_lock(directory: str, path: str) -> int:
    """The descriptor of the lock file `path`, exclusively `flock`ed, holding "host pid" of this
    process (`ModelDir.lock`)."""
    while True:
        descriptor = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(descriptor)
            host, pid = _lock_holder(path)
            raise ModelDirLocked(
                f"{directory} is in use by another train (host {host or '?'}, PID {pid or '?'}; "
                f"lock file {path}): wait for it to end, or use another --model-dir"
            ) from None
        try:
            if os.stat(path).st_ino != os.fstat(descriptor).st_ino:
                raise FileNotFoundError(path)  # replaced since it was opened
        except FileNotFoundError:  # its holder released it after we opened it: lock the new one
            os.close(descriptor)
            continue
        host, pid = _lock_holder(path)
        if host and host != socket.gethostname():
            os.close(descriptor)
            raise ModelDirLocked(
                f"{directory} is in use by a train on host {host} (PID {pid or '?'}; lock file {path}), or was: "
                "a lock of another host is not taken over; remove the lock file if that train has ended"
            )
        if pid:
            print(f"warning: took over the stale lock of PID {pid} (no such process) in {path}", file=sys.stderr)
        os.ftruncate(descriptor, 0)
        os.write(descriptor, f"{socket.gethostname()} {os.getpid()}\n".encode())
        return descriptor


def _lock_holder(path: str) -> tuple[str, str]:
    """(host, PID) that the lock file `path` names; empty strings for what it does not say."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            host, _, pid = f.read().strip().partition(" ")
    except FileNotFoundError:
        return "", ""
    return host, pid


@dataclasses.dataclass(frozen=True)
class ModelDir:
    path: str

    @property
    def config_path(self) -> str:
        return os.path.join(self.path, "config.json")

    @property
    def tokenizer_path(self) -> str:
        return os.path.join(self.path, "tokenizer.model")

    @property
    def checkpoint_dir(self) -> str:
        return os.path.join(self.path, "checkpoints")

    @property
    def early_stopping_path(self) -> str:
        return os.path.join(self.path, "early_stopping.json")

    @property
    def log_dir(self) -> str:
        return os.path.join(self.path, "logs")

    def weights_dir(self, name: str) -> str:
        """Where the weights-only checkpoint `name` (one of `WEIGHTS_CHECKPOINTS`) lives."""
        return os.path.join(self.path, name)

    def lock_path(self, worker: int = 0) -> str:
        return os.path.join(self.path, "train.lock" if worker == 0 else f"train.worker-{worker}.lock")

    @contextlib.contextmanager
    def lock(self, worker: int = 0):
        """Hold the directory for one training process (worker `worker` of a multi-worker run) and
        release it on exit. The holder keeps an exclusive `flock` on the lock file, which holds
        "host pid" for the messages: the kernel releases it when the holder dies (a `kill -9`, a
        crash), so a lock file that can be locked is stale and taken over, and however many take it
        over at once, one wins (a lock file removed meanwhile by its holder is locked anew). A lock
        file of another host is never taken over (a network file system may not share locks).
        Raises `ModelDirLocked` naming the live holder. A directory that the lock made and that is
        empty again when it is released (a run that failed before writing anything) is removed."""
        made = not os.path.isdir(self.path)
        os.makedirs(self.path, exist_ok=True)
        path = self.lock_path(worker)
        descriptor = _take_lock(self.path, path)
        try:
            yield
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)  # while still holding it: a taker that opened it sees it gone and retries
            os.close(descriptor)
            if made:
                with contextlib.suppress(OSError):  # not empty: the run wrote into it
                    os.rmdir(self.path)

    def checkpoints(self, warn=None) -> list[str]:
        """The training checkpoints, newest first (`checkpoint_paths`)."""
        return checkpoint_paths(self.checkpoint_dir, warn)

    def resolve_checkpoint(self, name: str | None) -> str | None:
        """None or "latest": the last training checkpoint; "averaged", "best" or "ema": that
        one's newest; anything else is a checkpoint path."""
        if name in (None, "latest"):
            return self.latest_checkpoint()
        if name in WEIGHTS_CHECKPOINTS:
            paths = checkpoint_paths(self.weights_dir(name))
            if not paths:
                raise ModelDirError(f"{self.path} has no {name} checkpoint yet")
            return paths[0]
        return name

    def exists(self) -> bool:
        return os.path.isfile(self.config_path)

    def write(
        self,
        model: TransformerConfig,
        training: TrainingConfig,
        data: DataConfig | str,
        tokenizer: SubwordTokenizer,
        requested_vocab_size: int | None = None,
        parent: dict | None = None,
        target_langs: tuple[str, ...] = (),
    ) -> None:
        """`data`: the data settings, or the data source's name; `requested_vocab_size`: the
        vocab_size the tokenizer was asked for (it may learn fewer); `parent`: the model dir a
        fine-tuned model started from, {"dir", "checkpoint", "step"} (and, after `--vocabulary
        update`, "vocabulary": "update", the parent's "vocab_size" and the "shared_pieces" count);
        `target_langs`: a multilingual model's target languages (its tokenizer's `<2xx>` pieces)."""
        data = DataConfig(data=data) if isinstance(data, str) else data
        os.makedirs(self.path, exist_ok=True)
        tokenizer.save(self.tokenizer_path)
        values = {
            "model": model.to_dict(),
            "training": dataclasses.asdict(training),
            "data_config": dataclasses.asdict(data),
        }
        if requested_vocab_size is not None:
            values["requested_vocab_size"] = requested_vocab_size
        if parent is not None:
            values["parent"] = parent
        if target_langs:
            values["target_langs"] = list(target_langs)
        temporary = self.config_path + ".tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump(values, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(temporary, self.config_path)  # atomic: never a half-written config

    def read(self) -> dict:
        """{"model": TransformerConfig, "training": dict, "data_config": DataConfig,
        "requested_vocab_size": int (newer dirs)}; also of 0.1.0's dirs, whose config.json held
        label smoothing in the model config and the data source's name alone ("data")."""
        if not os.path.isdir(self.path):
            raise ModelDirError(f"no such model directory: {self.path}")
        if not self.exists():
            raise ModelDirError(f"{self.path} has no config.json: not a model directory (train one first)")
        try:
            with open(self.config_path, encoding="utf-8") as f:
                values = json.load(f)
            smoothing = values["model"].get("label_smoothing")  # a model setting in 0.1.0's config.json
            if smoothing is not None:
                values["training"].setdefault("label_smoothing", smoothing)
            values["model"] = TransformerConfig.from_dict(values["model"])
            values["data_config"] = DataConfig(
                **values.get("data_config", {"data": values.get("data")})
            )  # 0.1.0: "data"
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as error:
            raise ModelDirError(f"{self.config_path} is corrupt: {error}") from None
        return values

    def tokenizer(self) -> SubwordTokenizer:
        return SubwordTokenizer.load(self.tokenizer_path)

    def checkpoint_manager(self, checkpoint, keep: int = 5, worker: int = 0, warn=None):
        """The manager of `checkpoint` (a `tf.train.Checkpoint` or a `KerasCheckpoint`: `manager`).
        The chief (worker 0) saves to checkpoints/; in multi-worker training every other worker
        saves too (all must), to checkpoints/worker-N/, which nothing reads but that worker. An
        unreadable state file is rewritten first from the checkpoint files (`checkpoint_paths`,
        which says so through `warn`), so that the manager resumes and prunes them."""
        directory = self.checkpoint_dir if worker == 0 else os.path.join(self.checkpoint_dir, f"worker-{worker}")
        _repair_state(directory, warn)
        return manager(checkpoint, directory, keep)

    def latest_checkpoint(self) -> str | None:
        paths = self.checkpoints()
        return paths[0] if paths else None


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
        return None, f"unreadable: {_first_line(error)}"
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
        (warn or _warn)(
            f"{os.path.join(directory, STATE_FILE)} is {why}; found {len(found)} checkpoint(s) from their files, "
            f"the newest {found[0]}"
        )
    return found


def _repair_state(directory: str, warn=None) -> None:
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


def _warn(line: str) -> None:
    print(f"warning: {line}", file=sys.stderr)


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
            _repair_state(temporary, warn=lambda line: None)  # CheckpointManager refuses an unreadable one
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
    what = "no space left on device" if full else f"cannot write ({_first_line(error)})"
    return CheckpointWriteError(f"{what} writing checkpoint {prefix}; the last good one is {last_good or 'none'}")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


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
            (warn or _warn)(f"using {path}, the newest checkpoint that restores ({reasons})")
        return path
    raise errors[0]


def restore(checkpoint, path: str, *, weights_only: bool = False) -> None:
    """Restore `checkpoint` (a `tf.train.Checkpoint` or a `KerasCheckpoint`) from `path`, of either
    kind, with a one-line error for a corrupt or foreign file. `weights_only` (a
    `weights_checkpoint`): what else the file holds (an optimizer) is ignored, but every weight of
    the model must be in it; the error names those that are not (a checkpoint of another model:
    fewer layers, another architecture). A training run resumes from checkpoints of its own kind only."""
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
            status.expect_partial()
            missing = _unrestored_weights(checkpoint.model, status)
        else:
            status.assert_existing_objects_matched()
    except (tf.errors.OpError, AssertionError, ValueError, IndexError, KeyError) as error:  # IndexError: truncated data
        raise ModelDirError(f"cannot restore checkpoint {path}: {_first_line(error)}") from None
    if weights_only and missing:
        names = ", ".join(missing[:MISSING_NAMED]) + (
            f" and {len(missing) - MISSING_NAMED} more" if len(missing) > MISSING_NAMED else ""
        )
        raise ModelDirError(
            f"cannot restore checkpoint {path}: it has no value for {len(missing)} of the model's "
            f"{len(checkpoint.model.weights)} weights ({names}): a checkpoint of another model?"
        )


MISSING_NAMED = 5  # missing weights a restore error names


def _unrestored_weights(model, status) -> list[str]:
    """The paths (without the model's own name) of `model`'s weights that the restore `status` bound
    to no value of its checkpoint. TF 2.21's load status keeps the objects it bound in
    `_checkpoint.object_by_proto_id` (what its `assert_existing_objects_matched` reads, whose
    message prints every value instead of naming the weights)."""
    bound = {id(trackable) for trackable in status._checkpoint.object_by_proto_id.values()}
    return [weight.path.partition("/")[2] for weight in model.weights if id(weight) not in bound]


def load_model(path: str, checkpoint: str | None = None, dtype: str | None = None):
    """(Transformer, SubwordTokenizer, stored config dict) from a model directory, weights from
    `checkpoint` ("latest", the default: the newest training checkpoint that restores, with a
    warning on stderr when it is not the newest; "averaged"; "best"; "ema"; or a path, strictly),
    as trained (float32) or cast to `dtype` for decoding (`Transformer.with_dtype`). The dict's
    "checkpoint_path" is the checkpoint the weights came from."""
    from keras_transformer.model import Transformer

    model_dir = ModelDir(path)
    values = model_dir.read()
    tokenizer = model_dir.tokenizer()
    config = values["model"]
    if tokenizer.vocab_size != config.vocab_size:
        raise ModelDirError(
            f"{model_dir.tokenizer_path} has {tokenizer.vocab_size} tokens "
            f"but the config says vocab_size={config.vocab_size}"
        )
    latest = checkpoint in (None, "latest")
    paths = model_dir.checkpoints() if latest else [model_dir.resolve_checkpoint(checkpoint)]
    if not paths:
        raise ModelDirError(f"{path} holds no checkpoint yet (train first)")
    model = Transformer(config)
    model.build()
    if latest:
        values["checkpoint_path"] = restore_newest(weights_checkpoint(model), paths, weights_only=True)
    else:
        restore(weights_checkpoint(model), paths[0], weights_only=True)
        values["checkpoint_path"] = paths[0]
    if dtype is not None:
        model = model.with_dtype(dtype)
    return model, tokenizer, values
