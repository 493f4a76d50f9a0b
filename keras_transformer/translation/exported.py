"""An exported SavedModel as a translator: text in, text out through its signatures, no model dir.

    translator = SavedModelTranslator("runs/demo-export")            # OUT of `keras-transformer export`
    translator = SavedModelTranslator("runs/demo-export", int8=True)  # its int8 SavedModel
    translator.translate(["Jesus wept."], markup=True)                # translate_markup

The same calls as `Translator` (`translate`, `translate_nbest`, `score`, `translate_with_alignments`)
for the file formats, the service and the Beam pipelines, which take either: a model dir's
`Translator` or the artifact a deployment serves. Every call runs a signature of the SavedModel
(`exporters/signatures.py`), so what it returns is what TF Serving returns for the same texts.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Sequence

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer's ops, which the SavedModel holds

from keras_transformer.exporters.tensorflow import INT8_SUFFIX, versions
from keras_transformer.translation.alignment import parse_pharaoh

BATCH_SIZE = 32  # texts per signature call, sorted by length so that a batch's texts pad little


def saved_model_path(path: str, int8: bool = False) -> str:
    """The SavedModel to load for `path`: itself if it holds one (saved_model.pb), else the highest
    version of the export OUT's text SavedModel (`saved_model/<name>/N`, `<name>_int8` with
    `int8`); a ValueError naming what was looked for when there is none."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path

    def wanted(base: str) -> bool:
        return base.endswith(INT8_SUFFIX) if int8 else not base.endswith(("_ids", INT8_SUFFIX))

    bases = [base for base in sorted(glob.glob(os.path.join(path, "saved_model", "*"))) if wanted(base)]
    found = [os.path.join(base, str(versions(base)[-1])) for base in bases if versions(base)]
    if len(found) != 1:
        kind = "int8 " if int8 else ""
        raise ValueError(
            f"{path}: expected one {kind}text SavedModel (saved_model.pb, or OUT/saved_model/<name>/N of "
            f"`keras-transformer export`), found {len(found)}"
        )
    return found[0]


class SavedModelTranslator:
    """The signatures of an exported SavedModel (`saved_model_path(path, int8)`) behind
    `Translator`'s text methods. `batch_size` texts go to a signature at a time, sorted by length."""

    def __init__(self, path: str, int8: bool = False, batch_size: int = BATCH_SIZE):
        self.path = saved_model_path(path, int8)
        self.signatures = tf.saved_model.load(self.path).signatures
        self.batch_size = batch_size

    def _call(self, name: str, texts: list[str], **inputs) -> list[dict]:
        """One row of `name`'s outputs per text (numpy values), the texts run `batch_size` at a time
        in order of length; `inputs`: other per-text inputs of the signature (lists beside `texts`)."""
        if name not in self.signatures:
            raise ValueError(f"{self.path} has no signature {name!r} (it has {', '.join(sorted(self.signatures))})")
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        rows: list[dict | None] = [None] * len(texts)
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            given = {key: tf.constant([values[i] for i in chunk]) for key, values in inputs.items()}
            outputs = {key: value.numpy() for key, value in self.signatures[name](**given).items()}
            for k, i in enumerate(chunk):
                rows[i] = {key: value[k] for key, value in outputs.items()}
        return rows

    def translate(self, texts, markup: bool = False, split: bool = False, target_lang=None):
        """The translation of a text (a str) or of each text of a list: `translate_markup` with
        `markup`, `translate_document` with `split`, `translate_to` with `target_lang` (one str,
        or one per text), else `serving_default`."""
        if isinstance(texts, str):
            return self.translate([texts], markup, split, target_lang)[0]
        texts = list(texts)
        if sum((markup, split, target_lang is not None)) > 1:
            raise ValueError("an export translates with one of markup, split (documents) and target_lang at a time")
        if target_lang is not None:
            langs = [target_lang] * len(texts) if isinstance(target_lang, str) else list(target_lang)
            rows = self._call("translate_to", texts, text=texts, target_lang=langs)
            errors = [row["error"].decode("utf-8") for row in rows]
            if any(errors):
                raise ValueError(next(error for error in errors if error))
        else:
            name = "translate_markup" if markup else "translate_document" if split else "serving_default"
            rows = self._call(name, texts, text=texts)
        return [row["translation"].decode("utf-8") for row in rows]

    def translate_nbest(self, texts, n: int | None = None):
        """The `n` best (translation, score) pairs of a text, best first (default: every beam);
        for a list, one such list per text."""
        if isinstance(texts, str):
            return self.translate_nbest([texts], n)[0]
        rows = self._call("translate_nbest", list(texts), text=list(texts))
        return [
            [(t.decode("utf-8"), float(s)) for t, s in zip(row["translations"][:n], row["scores"][:n])] for row in rows
        ]

    def translate_with_alignments(self, texts):
        """(translation, [(source word, target word), ...]) of a text, or of each text of a list."""
        if isinstance(texts, str):
            return self.translate_with_alignments([texts])[0]
        rows = self._call("translate_with_alignments", list(texts), text=list(texts))
        return [(row["translation"].decode("utf-8"), parse_pharaoh(row["alignment"].decode("utf-8"))) for row in rows]

    def score(self, sources: Sequence[str], targets: Sequence[str]) -> list[tuple[float, float, int]]:
        """(score, log_prob, tokens) of each (source, target) pair, by the `score` signature."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        rows = self._call("score", list(sources), source=list(sources), target=list(targets))
        return [(float(row["score"]), float(row["log_prob"]), int(row["tokens"])) for row in rows]
