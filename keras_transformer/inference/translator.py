"""Text in, text out: tokenize, decode in length-sorted batches, detokenize.

import keras_transformer as kt

translator = kt.Translator.from_model_dir("runs/small")
translator.translate("Jesus wept.")               # -> str
translator.translate(["Jesus wept.", "Amen."])     # -> list[str]
translator.translate_nbest("Jesus wept.", n=4)     # -> [(str, score)], best first
translator.translate_with_alignments("Jesus wept.")  # -> (str, [(source word, target word)])
kt.Translator.from_model_dir(["runs/a", "runs/b"])  # an ensemble (inference/ensemble.py)
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import overload

import numpy as np
import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.inference import alignment
from keras_transformer.inference.decoding import beam_search
from keras_transformer.inference.ensemble import Ensemble
from keras_transformer.special_tokens import PAD_ID


class Translator:
    """Translates sentences with a trained model and its tokenizer, by beam search with the
    settings of a `DecodingConfig` (default the paper's, §6.1: beam size 4, length penalty alpha
    0.6; `DecodingConfig.greedy()` is greedy decoding), given whole (`decoding`) or as
    `overrides` of its fields (`Translator(model, tokenizer, beam_size=1, alpha=0.0)`).

    A source longer than the model's `max_length` (EOS included) is truncated, with a warning on
    stderr. An empty (or all-space) source translates to the empty string (score 0). A score is
    the sum of the hypothesis's token log-probabilities divided by the length penalty
    ((5 + |y|) / 6)^alpha (Wu et al., 2016). With `decoding.dtype` "bfloat16" the model decodes
    in a bf16 copy (`Transformer.with_dtype`). `model` may be an `Ensemble` of models that share
    `tokenizer`.
    """

    def __init__(self, model, tokenizer, decoding: DecodingConfig | None = None, **overrides):
        self.decoding = (decoding or DecodingConfig()).replace(**overrides)
        self.model = model if self.decoding.dtype is None else model.with_dtype(self.decoding.dtype)
        self.tokenizer = tokenizer

    @classmethod
    def from_model_dir(
        cls, path: str | Sequence[str], checkpoint: str = "latest", decoding: DecodingConfig | None = None, **overrides
    ) -> Translator:
        """The translator of a model directory (`keras-transformer train --model-dir PATH`), with the
        weights of `checkpoint`: "latest" (the default), "averaged", "best" or a checkpoint path,
        decoding with `decoding` and `overrides` of its fields (`DecodingConfig`). A list of
        several directories gives their `Ensemble` (which must share one tokenizer)."""
        from keras_transformer.model_dir import load_model

        paths = [path] if isinstance(path, str) else list(path)
        if len(paths) > 1:
            model, tokenizer = Ensemble.from_model_dirs(paths, checkpoint)
        else:
            model, tokenizer, _ = load_model(paths[0], checkpoint)
        return cls(model, tokenizer, decoding, **overrides)

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

    def decode(self, source_ids, n: int | None = None):
        """[B, S] ids -> (hypothesis ids [B, n, L], scores [B, n]), the `n` best (default: the beam
        size), best first."""
        result = beam_search(self.model, source_ids, self.decoding, nbest=n)
        return result.ids, result.scores

    @overload
    def translate(self, texts: str) -> str: ...

    @overload
    def translate(self, texts: Sequence[str]) -> list[str]: ...

    def translate(self, texts):
        """The best translation of a text (a str), or of each text of a list (a list of str)."""
        if isinstance(texts, str):
            return self.translate([texts])[0]
        return [hypotheses[0][0] for hypotheses in self._nbest(list(texts), 1)]

    @overload
    def translate_nbest(self, texts: str, n: int | None = None) -> list[tuple[str, float]]: ...

    @overload
    def translate_nbest(self, texts: Sequence[str], n: int | None = None) -> list[list[tuple[str, float]]]: ...

    def translate_nbest(self, texts, n=None):
        """The `n` best (translation, score) pairs of a text, best first (for a list: one such list
        per text); `n` defaults to the decoding's `nbest`, else the beam size."""
        if n is None:
            n = self.decoding.nbest or self.decoding.beam_size
        self.decoding.replace(nbest=n)  # a DecodingConfig checks n against the beam size
        if isinstance(texts, str):
            return self._nbest([texts], n)[0]
        return self._nbest(list(texts), n)

    @overload
    def translate_with_alignments(self, texts: str) -> tuple[str, list[tuple[int, int]]]: ...

    @overload
    def translate_with_alignments(self, texts: Sequence[str]) -> list[tuple[str, list[tuple[int, int]]]]: ...

    def translate_with_alignments(self, texts):
        """The best translation of a text and its word alignment: (translation, [(i, j), ...]), one
        pair per word j of `translation.split()`, with i the word of `text.split()` it aligns to
        (`inference/alignment.py`: the cross-attention of decoder layer `decoding.alignment_layer`,
        averaged over heads); for a list: one such pair per text."""
        if isinstance(texts, str):
            return self.translate_with_alignments([texts])[0]
        texts = list(texts)
        results = [("", [])] * len(texts)
        for indices, batch in self._batches(texts):
            ids, _ = self.decode(batch, 1)  # [B, 1, L]
            pharaoh = self._alignments(batch, ids[:, 0]).numpy()  # [B]
            translations = self.tokenizer.detokenize(ids[:, 0]).numpy()  # [B]
            for i, translation, pairs in zip(indices, translations, pharaoh):
                results[i] = (translation.decode("utf-8"), alignment.parse_pharaoh(pairs.decode("utf-8")))
        return results

    @functools.cached_property
    def _alignments(self):
        """`alignment.alignments` as a tf.function (source_ids [B, S], target_ids [B, T]) -> [B] strings."""
        table, layer = alignment.pieces(self.tokenizer), self.decoding.alignment_layer
        spec = tf.TensorSpec([None, None], tf.int32)
        return tf.function(
            lambda source_ids, target_ids: alignment.alignments(self.model, source_ids, target_ids, table, layer),
            input_signature=[spec, spec],
        )

    def _batches(self, texts: list[str]):
        """(indices into `texts`, source ids [B, S] int32) per search: the non-empty texts sorted by
        length (similar lengths share a batch), `decoding.batch_size` at a time."""
        todo = [i for i, text in enumerate(texts) if text.strip()]
        rows = self.source_ids([texts[i] for i in todo]) if todo else []
        order = sorted(range(len(todo)), key=lambda k: len(rows[k]))
        for start in range(0, len(order), self.decoding.batch_size):
            chunk = order[start : start + self.decoding.batch_size]
            batch = np.full((len(chunk), max(len(rows[k]) for k in chunk)), PAD_ID, np.int32)
            for row, k in enumerate(chunk):
                batch[row, : len(rows[k])] = rows[k]
            yield [todo[k] for k in chunk], batch

    def _nbest(self, texts: list[str], n: int) -> list[list[tuple[str, float]]]:
        translations = [[("", 0.0)] * n for _ in texts]
        for indices, batch in self._batches(texts):
            ids, scores = self.decode(batch, n)  # [B, n, L], [B, n]
            outputs = self.tokenizer.detokenize(tf.reshape(ids, [-1, ids.shape[-1]])).numpy().reshape(ids.shape[:2])
            for i, row, row_scores in zip(indices, outputs, scores.numpy()):
                translations[i] = [(output.decode("utf-8"), float(score)) for output, score in zip(row, row_scores)]
        return translations
