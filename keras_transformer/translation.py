"""Text in, text out: tokenize, decode in length-sorted batches, detokenize."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np

from keras_transformer.decoding import greedy_search


class Translator:
    """Translates sentences with a trained model and its tokenizer.

    A source longer than the model's `max_length` (EOS included) is truncated, with a warning on
    stderr. An empty (or all-space) source translates to the empty string.
    """

    def __init__(self, model, tokenizer, batch_size: int = 32):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size

    def source_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text, truncated to max_length - 1, then EOS."""
        config = self.model.config
        ragged = self.tokenizer.tokenize(list(texts))
        rows = []
        for text, ids in zip(texts, ragged.numpy()):
            if len(ids) > config.max_length - 1:
                print(
                    f"warning: source of {len(ids)} tokens truncated to {config.max_length - 1}: {text[:40]!r}...",
                    file=sys.stderr,
                )
                ids = ids[: config.max_length - 1]
            rows.append(np.append(ids, config.eos_id).astype(np.int32))
        return rows

    def decode(self, source_ids):
        """[B, S] ids -> hypothesis ids [B, L] (the best of each sentence)."""
        return greedy_search(self.model, source_ids).ids[:, 0]

    def translate(self, texts: Sequence[str]) -> list[str]:
        texts = list(texts)
        translations = [""] * len(texts)
        todo = [i for i, text in enumerate(texts) if text.strip()]
        if not todo:
            return translations
        rows = self.source_ids([texts[i] for i in todo])
        order = sorted(range(len(todo)), key=lambda k: len(rows[k]))  # similar lengths share a batch
        for start in range(0, len(order), self.batch_size):
            chunk = order[start : start + self.batch_size]
            width = max(len(rows[k]) for k in chunk)
            batch = np.full((len(chunk), width), self.model.config.pad_id, np.int32)
            for row, k in enumerate(chunk):
                batch[row, : len(rows[k])] = rows[k]
            outputs = self.tokenizer.detokenize(self.decode(batch)).numpy()
            for k, output in zip(chunk, outputs):
                translations[todo[k]] = output.decode("utf-8")
        return translations
