"""The TFLite model of an export as a translator for the service: `OUT/translator.tflite` (or
`translator_int8.tflite`, dynamic-range int8 weights) run by LiteRT's interpreter (XNNPACK on CPUs),
with the export's tokenizer around it, as `export/litert_client.py` runs it on a device.

`translate(texts, split=True)` splits documents into sentences as `Translator` does
(`translation/sentences.py`); the TFLite model keeps no markup and serves one target language.
"""

from __future__ import annotations

import json
import os

import numpy as np

from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.translation import sentences

BATCH_SIZE = 32  # texts per interpreter call, sorted by length


class LiteRTTranslator:
    """`translate` over an export's TFLite ids model; `threads`: the interpreter's (default all cores)."""

    def __init__(self, export_dir: str, int8: bool = False, threads: int | None = None):
        from ai_edge_litert.interpreter import Interpreter

        with open(os.path.join(export_dir, "translator.json"), encoding="utf-8") as f:
            metadata = json.load(f)
        key = "ids_int8" if int8 else "ids"
        if key not in metadata.get("models", {}):
            raise ValueError(f"{export_dir} holds no TFLite model (exported with --no-tflite?)")
        self.path = os.path.join(export_dir, metadata["models"][key])
        self.tokenizer = SubwordTokenizer.load(os.path.join(export_dir, metadata["tokenizer"]))
        self.max_length = metadata["max_length"]
        interpreter = Interpreter(model_path=self.path, num_threads=threads or os.cpu_count())
        self._runner = interpreter.get_signature_runner()

    def translate(self, texts, markup: bool = False, split: bool = False, target_lang=None):
        """The best translation of a text (a str) or of each text of a list; `split`: each text a document."""
        if isinstance(texts, str):
            return self.translate([texts], markup, split, target_lang)[0]
        if markup or target_lang is not None:
            raise ValueError("the TFLite model translates plain text into one language: serve a SavedModel for markup")
        texts = list(texts)
        if split and texts:
            found, separators = sentences.split(texts, self.tokenizer, self.max_length)  # [D, (k)] each
            flat = [sentence.decode("utf-8") for sentence in found.flat_values.numpy()]
            return [text.decode("utf-8") for text in sentences.join(self.translate(flat), separators).numpy()]
        results = [""] * len(texts)
        todo = sorted((i for i, text in enumerate(texts) if text.strip()), key=lambda i: len(texts[i]))
        for start in range(0, len(todo), BATCH_SIZE):
            chunk = todo[start : start + BATCH_SIZE]
            ids, _ = self.tokenizer.source_ids([texts[i] for i in chunk], self.max_length)  # [B, S]
            best = self._runner(source_ids=ids.numpy().astype(np.int32))["ids"][:, 0]  # [B, L]
            for i, text in zip(chunk, self.tokenizer.detokenize(best).numpy()):
                results[i] = text.decode("utf-8")
        return results
