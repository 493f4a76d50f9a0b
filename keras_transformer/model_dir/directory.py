"""The model directory: config.json, tokenizer.model (and tokenizer.target.model where the target
side has its own SentencePiece model, `SubwordTokenizer`), checkpoints/ and logs/ of one model, and
the weights-only checkpoints averaged/ (`keras-transformer average`), best/ (the best
validation BLEU, `keras_transformer.training.callbacks.bleu.BleuCallback`, or loss,
`callbacks.early_stopping`) and ema/ (the moving average of the weights, `callbacks.ema`).

Everything needed to rebuild and use a trained model lives here; `load_model` restores the
latest checkpoint that restores (or a chosen one). One `train` at a time writes to a directory
(`ModelDir.lock`). The checkpoints themselves (listed, recovered, pruned, written, restored) are
`checkpoints`' concern.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import os
import socket
import sys

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.model import Transformer
from keras_transformer.model_dir.checkpoints import (
    checkpoint_paths,
    manager,
    repair_state,
    restore,
    restore_newest,
    weights_checkpoint,
)
from keras_transformer.model_dir.errors import ModelDirError, ModelDirLocked

WEIGHTS_CHECKPOINTS = ("averaged", "best", "ema")


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
        repair_state(directory, warn)
        return manager(checkpoint, directory, keep)

    def latest_checkpoint(self) -> str | None:
        paths = self.checkpoints()
        return paths[0] if paths else None


def load_model(path: str, checkpoint: str | None = None, dtype: str | None = None):
    """(Transformer, SubwordTokenizer, stored config dict) from a model directory, weights from
    `checkpoint` ("latest", the default: the newest training checkpoint that restores, with a
    warning on stderr when it is not the newest; "averaged"; "best"; "ema"; or a path, strictly),
    as trained (float32) or cast to `dtype` for decoding (`Transformer.with_dtype`). The dict's
    "checkpoint_path" is the checkpoint the weights came from."""
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
