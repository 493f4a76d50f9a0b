"""The model directory: config.json, tokenizer.model, checkpoints/ and logs/ of one model, and
the weights-only checkpoints averaged/ (`keras-transformer average`), best/ (the best
validation BLEU, `keras_transformer.training.callbacks.bleu.BleuCallback`, or loss,
`callbacks.early_stopping`) and ema/ (the moving average of the weights, `callbacks.ema`).

Everything needed to rebuild and use a trained model lives here; `load_model` restores the
latest (or a chosen) checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf

from keras_transformer.config import DataConfig, TrainingConfig, TransformerConfig
from keras_transformer.data.tokenizer import SubwordTokenizer

WEIGHTS_CHECKPOINTS = ("averaged", "best", "ema")


class ModelDirError(ValueError):
    """A model directory that is missing, incomplete, corrupt or made for another config."""


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

    def resolve_checkpoint(self, name: str | None) -> str | None:
        """None or "latest": the last training checkpoint; "averaged", "best" or "ema": that
        one's newest; anything else is a checkpoint path."""
        if name in (None, "latest"):
            return self.latest_checkpoint()
        if name in WEIGHTS_CHECKPOINTS:
            path = tf.train.latest_checkpoint(self.weights_dir(name))
            if path is None:
                raise ModelDirError(f"{self.path} has no {name} checkpoint yet")
            return path
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
    ) -> None:
        """`data`: the data settings, or the data source's name; `requested_vocab_size`: the
        vocab_size the tokenizer was asked for (it may learn fewer); `parent`: the model dir a
        fine-tuned model started from, {"dir", "checkpoint", "step"}."""
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

    def checkpoint_manager(
        self, checkpoint: tf.train.Checkpoint, keep: int = 5, worker: int = 0
    ) -> tf.train.CheckpointManager:
        """The chief (worker 0) saves to checkpoints/; in multi-worker training every other worker
        saves too (all must), to checkpoints/worker-N/, which nothing reads but that worker."""
        directory = self.checkpoint_dir if worker == 0 else os.path.join(self.checkpoint_dir, f"worker-{worker}")
        return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=keep, checkpoint_name="ckpt")

    def latest_checkpoint(self) -> str | None:
        return tf.train.latest_checkpoint(self.checkpoint_dir)


def checkpoint_step(path: str) -> int | None:
    """The step a checkpoint path is numbered by (`.../ckpt-1200` -> 1200), or None."""
    number = path.rsplit("-", 1)[-1]
    return int(number) if number.isdigit() else None


def weights_checkpoint(model) -> tf.train.Checkpoint:
    """A checkpoint of the model's weights only (no optimizer); it also reads training checkpoints."""
    return tf.train.Checkpoint(model=model)


def save_weights(model, directory: str, step: int, keep: int = 1) -> str:
    """Write `model`'s weights (no optimizer) as a checkpoint in `directory` (averaged/, best/,
    ema/), numbered `step`, keeping the `keep` newest; return its path."""
    manager = tf.train.CheckpointManager(weights_checkpoint(model), directory, max_to_keep=keep, checkpoint_name="ckpt")
    return manager.save(checkpoint_number=step)


def restore(checkpoint: tf.train.Checkpoint, path: str, *, weights_only: bool = False) -> None:
    """Restore `checkpoint` from `path`, with a one-line error for a corrupt or foreign file."""
    try:
        status = checkpoint.restore(path)
        if weights_only:
            status.expect_partial()
        else:
            status.assert_existing_objects_matched()
    except (tf.errors.OpError, AssertionError, ValueError, IndexError, KeyError) as error:  # IndexError: truncated data
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise ModelDirError(f"cannot restore checkpoint {path}: {first_line}") from None


def load_model(path: str, checkpoint: str | None = None, dtype: str | None = None):
    """(Transformer, SubwordTokenizer, stored config dict) from a model directory, weights from
    `checkpoint` ("latest", the default; "averaged"; "best"; "ema"; or a path), as trained (float32) or
    cast to `dtype` for decoding (`Transformer.with_dtype`)."""
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
    checkpoint = model_dir.resolve_checkpoint(checkpoint)
    if checkpoint is None:
        raise ModelDirError(f"{path} holds no checkpoint yet (train first)")
    model = Transformer(config)
    model.build()
    restore(weights_checkpoint(model), checkpoint, weights_only=True)
    if dtype is not None:
        model = model.with_dtype(dtype)
    return model, tokenizer, values
