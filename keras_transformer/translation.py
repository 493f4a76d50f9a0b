"""Text in, text out: tokenize, decode in length-sorted batches, detokenize."""

from __future__ import annotations

import sys
from collections.abc import Sequence

import numpy as np
import tensorflow as tf

from keras_transformer.decoding import beam_search


class Translator:
    """Translates sentences with a trained model and its tokenizer, by beam search (§6.1: beam
    size 4, length penalty alpha 0.6; `beam_size=1, alpha=0` is greedy decoding).

    A source longer than the model's `max_length` (EOS included) is truncated, with a warning on
    stderr. An empty (or all-space) source translates to the empty string (score 0).
    """

    def __init__(self, model, tokenizer, batch_size: int = 32, beam_size: int = 4, alpha: float = 0.6, nbest: int = 1):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not 1 <= nbest <= beam_size:
            raise ValueError(f"nbest must be between 1 and the beam size {beam_size}, got {nbest}")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.beam_size = beam_size
        self.alpha = alpha
        self.nbest = nbest

    def source_ids(self, texts: Sequence[str]) -> list[np.ndarray]:
        """Token ids of each text, truncated to max_length - 1, then EOS (`SubwordTokenizer.source_ids`)."""
        keep = self.model.config.max_length - 1
        ids, counts = self.tokenizer.source_ids(list(texts), keep + 1)  # [B, S], [B]
        rows = []
        for text, row, count in zip(texts, ids.numpy(), counts.numpy()):
            if count > keep:
                print(f"warning: source of {count} tokens truncated to {keep}: {text[:40]!r}...", file=sys.stderr)
            rows.append(row[: min(count, keep) + 1])  # [tokens + EOS]
        return rows

    def decode(self, source_ids):
        """[B, S] ids -> (hypothesis ids [B, nbest, L], scores [B, nbest]), best first."""
        result = beam_search(self.model, source_ids, beam_size=self.beam_size, alpha=self.alpha)
        return result.ids[:, : self.nbest], result.scores[:, : self.nbest]

    def translate(self, texts: Sequence[str]) -> list[str]:
        """The best translation of each text."""
        return [hypotheses[0][0] for hypotheses in self.translate_nbest(texts)]

    def translate_nbest(self, texts: Sequence[str]) -> list[list[tuple[str, float]]]:
        """The `nbest` best (translation, score) pairs of each text, best first."""
        texts = list(texts)
        translations = [[("", 0.0)] * self.nbest for _ in texts]
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
            ids, scores = self.decode(batch)
            outputs = self.tokenizer.detokenize(tf.reshape(ids, [-1, ids.shape[-1]])).numpy().reshape(ids.shape[:2])
            for k, row, row_scores in zip(chunk, outputs, scores.numpy()):
                translations[todo[k]] = [(output.decode("utf-8"), float(score)) for output, score in zip(row, row_scores)]
        return translations
