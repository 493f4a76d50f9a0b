"""Model selection by validation BLEU (sacreBLEU; Post, 2018): every K epochs, translate a
validation subset with beam search (§6.1) and keep the weights of the best BLEU so far in the
model dir's best/ checkpoint, with best/bleu.json saying which step and score."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

import keras

from keras_transformer.evaluation.evaluation import evaluate
from keras_transformer.model_dir.checkpoints import save_weights
from keras_transformer.training.schedules import trained_steps


class BleuCallback(keras.callbacks.Callback):
    """Scores `translator.translate(sources)` against `references` every `every_epochs` epochs;
    a new best BLEU saves the model's weights to `best_dir`. A resumed run starts from the best
    recorded in `best_dir/bleu.json`. A translator with a `close()` (on JAX and PyTorch, the
    TensorFlow process of `training.tensorflow_translator`) is closed when training ends."""

    def __init__(
        self,
        translator,
        sources: list[str],
        references: list[str],
        best_dir: str,
        every_epochs: int = 1,
        log: Callable[[str], None] = print,
    ):
        super().__init__()
        if every_epochs < 1:
            raise ValueError(f"every_epochs must be >= 1, got {every_epochs}")
        self.translator = translator
        self.sources = sources
        self.references = references
        self.best_dir = best_dir
        self.every_epochs = every_epochs
        self.log = log
        self.record_path = os.path.join(best_dir, "bleu.json")
        self.best = None  # {"step": int, "bleu": float}
        if os.path.isfile(self.record_path):
            with open(self.record_path, encoding="utf-8") as f:
                self.best = json.load(f)

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_epochs:
            return
        step = trained_steps(self.model)
        bleu = evaluate(self.translator, (self.sources, self.references))["bleu"]
        if logs is not None:
            logs["val_bleu"] = bleu
        if self.best is None or bleu > self.best["bleu"]:
            self.best = {"step": step, "bleu": bleu}
            save_weights(self.model, self.best_dir, step)
            with open(self.record_path, "w", encoding="utf-8") as f:
                json.dump(self.best, f)
        self.log(
            f"step {step}: validation BLEU {bleu} on {len(self.sources)} sentences "
            f"(best {self.best['bleu']} at step {self.best['step']})"
        )

    def on_train_end(self, logs=None):
        close = getattr(self.translator, "close", None)
        if close is not None:
            close()
