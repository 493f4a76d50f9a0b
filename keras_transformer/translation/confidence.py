"""How far to trust a translation: a sentence confidence, per-word scores, and flags for likely failures.

Confidence is the model's own probability of its output, per token: exp of the mean log-probability
of the translation's tokens, EOS included (the "TP" glass-box estimate of Fomicheva et al., 2020,
"Unsupervised Quality Estimation for Neural Machine Translation"), from `Translator.score` (teacher
forcing the translation). A word's score is exp of the mean log-probability of its subwords (words as
`translation/alignment.py` counts them: `word_probabilities`, which the SavedModel's
`translate_with_scores` signature runs too). `Translator.translate(..., return_scores=True)`, the
service's `confidence` field and `translate --scores` all come from `confidence` here. The flags
name the failures peers' users report (CTranslate2#836, #1236, LibreTranslate#670):

    repetition     a word n-gram (n <= 4) repeated REPEATS times in a row in the translation and
                   not in the source (a decoding loop)
    length_ratio   log(target chars / source chars) more than LENGTH_Z standard deviations from the
                   training pairs' (`LengthRatio`; only where one is given)
    uncovered      more than UNCOVERED_SHARE of the source's words have no target word aligned to
                   them (`Translator.translate_with_alignments`: attention that never looked there)
    empty          a source or a translation without a word
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
import weakref
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
import tensorflow as tf

from keras_transformer.translation import alignment

REPEATS = 3
MAX_NGRAM = 4
LENGTH_Z = 3.0
UNCOVERED_SHARE = 0.5
_WORDLIKE = re.compile(r"\w")


@dataclasses.dataclass(frozen=True)
class LengthRatio:
    """The mean and standard deviation of log(target chars / source chars) over training pairs."""

    mean: float
    std: float

    @classmethod
    def from_pairs(cls, sources: Sequence[str], targets: Sequence[str]) -> LengthRatio:
        ratios = [math.log(len(t) / len(s)) for s, t in zip(sources, targets) if s.strip() and t.strip()]
        if len(ratios) < 2:
            raise ValueError("a length ratio needs at least 2 non-empty pairs")
        return cls(statistics.fmean(ratios), max(statistics.stdev(ratios), 1e-6))

    @classmethod
    def from_model_dir(cls, model_dir: str, pairs: int = 2000) -> LengthRatio:
        """From the first `pairs` training pairs of the data the model was trained on (`model_dir.held_out`)."""
        from keras_transformer.model_dir.held_out import held_out

        found = held_out(model_dir, "train", pairs)
        return cls.from_pairs(found.sources, found.references)

    def far(self, source: str, target: str) -> bool:
        if not source.strip() or not target.strip():
            return False
        return abs(math.log(len(target) / len(source)) - self.mean) > LENGTH_Z * self.std


@dataclasses.dataclass(frozen=True)
class Confidence:
    """`score` in (0, 1]; `words`: (target word, score) per word of the translation; `flags`: the
    failures suspected (see the module); `uncovered`: the source words nothing aligned to (None: not
    checked, the alignment's translation differing from the one scored)."""

    score: float
    words: list[tuple[str, float]]
    flags: tuple[str, ...]
    uncovered: list[str] | None

    def to_dict(self) -> dict:
        return {
            "score": round(self.score, 4),
            "words": [[word, round(value, 4)] for word, value in self.words],
            "flags": list(self.flags),
            "uncovered": self.uncovered,
        }


def repeated(words: Sequence[str]) -> bool:
    """Whether a word n-gram (1 <= n <= MAX_NGRAM) occurs REPEATS times in a row in `words`."""
    for n in range(1, MAX_NGRAM + 1):
        for start in range(len(words) - n * REPEATS + 1):
            gram = words[start : start + n]
            if all(words[start + k * n : start + (k + 1) * n] == gram for k in range(1, REPEATS)):
                return True
    return False


def word_probabilities(target_ids, token_log_probs, table: alignment.Pieces):
    """target_ids [B, T] int32 (pad-padded, no EOS) and their token_log_probs [B, T + 1]
    (`scoring.score_targets`, EOS last) -> each word's exp(mean log-prob of its subwords) [B, W]
    (0 past a row's words, and for a word without tokens), W the batch's most words
    (`alignment.token_words`). Traceable: the `translate_with_scores` signature runs it too."""
    word_of, words = alignment.token_words(target_ids, table)  # [B, T], [B]
    batch, length = tf.shape(target_ids)[0], tf.shape(target_ids)[1]
    width = tf.reduce_max(tf.concat([words, [0]], axis=0))  # W
    counted = word_of >= 0  # [B, T]
    dump = batch * width  # the segment of tokens without a word (EOS, pads, reserved pieces)
    segment = tf.where(counted, word_of + tf.range(batch)[:, None] * width, dump)  # [B, T]
    log_probs = tf.cast(token_log_probs, tf.float32)[:, :length]  # [B, T]: the EOS's has no word
    sums = tf.math.unsorted_segment_sum(log_probs, segment, dump + 1)[:dump]  # [B * W]
    counts = tf.math.unsorted_segment_sum(tf.cast(counted, tf.float32), segment, dump + 1)[:dump]  # [B * W]
    probabilities = tf.where(counts > 0, tf.exp(tf.math.divide_no_nan(sums, counts)), 0.0)  # [B * W]
    return tf.reshape(probabilities, [batch, width])  # [B, W]


def word_scores(translator, translations: Sequence[str], scores: Sequence) -> list[list[tuple[str, float]]]:
    """(word, `word_probabilities`) for each word of each translation (`translation.split()`), from
    its `Score` (`Translator.score`)."""
    if not translations:
        return []
    rows = translator.target_ids(list(translations))  # [T] each
    width = max([1, *map(len, rows)])
    target_ids = np.zeros((len(rows), width), np.int32)  # PAD_ID 0
    token_log_probs = np.zeros((len(rows), width + 1), np.float32)
    for i, (row, score) in enumerate(zip(rows, scores)):
        target_ids[i, : len(row)] = row
        token_log_probs[i, : len(score.token_log_probs)] = score.token_log_probs
    found = word_probabilities(target_ids, token_log_probs, _pieces(translator)).numpy()  # [B, W]
    return [
        [(word, float(found[i, j]) if j < found.shape[1] else 0.0) for j, word in enumerate(text.split())]
        for i, text in enumerate(translations)
    ]


_PIECES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # tokenizer -> its Pieces, built once


def _pieces(translator) -> alignment.Pieces:
    tokenizer = translator.tokenizer
    if tokenizer not in _PIECES:
        _PIECES[tokenizer] = alignment.pieces(tokenizer)
    return _PIECES[tokenizer]


def _uncovered(source: str, aligned: tuple[str, list[tuple[int, int]]], translation: str) -> list[str] | None:
    realigned, pairs = aligned
    if realigned != translation or not translation.split():
        return None
    covered = {i for i, _ in pairs}
    return [word for i, word in enumerate(source.split()) if i not in covered and _WORDLIKE.search(word)]


def confidence(
    translator,
    sources: Sequence[str],
    translations: Sequence[str],
    length_ratio: LengthRatio | None = None,
    target_lang=None,
    aligned: Sequence[tuple[str, list[tuple[int, int]]]] | None = None,
) -> list[Confidence]:
    """The `Confidence` of each translation of `sources`: scored by `translator.score`, aligned by
    `aligned` (`translate_with_alignments`' output, where the translations came from it) or else by
    `translator.translate_with_alignments` (a new search, whose output is checked against the
    translation: coverage is judged only where they agree; not for a multilingual `target_lang`)."""
    sources, translations = list(sources), list(translations)
    scores = translator.score(sources, translations, target_lang=target_lang)
    if target_lang is not None:
        aligned = [("", [])] * len(sources)
    elif aligned is None:
        aligned = translator.translate_with_alignments(sources)
    words_of = word_scores(translator, translations, scores)
    results = []
    for source, translation, score, found, scored in zip(sources, translations, scores, aligned, words_of):
        flags = []
        source_words, words = source.split(), translation.split()
        if not source_words or not words:
            flags.append("empty")
        if repeated(words) and not repeated(source_words):
            flags.append("repetition")
        if length_ratio is not None and length_ratio.far(source, translation):
            flags.append("length_ratio")
        uncovered = _uncovered(source, found, translation) if target_lang is None else None
        counted = [w for w in source_words if _WORDLIKE.search(w)]
        if uncovered is not None and counted and len(uncovered) > UNCOVERED_SHARE * len(counted):
            flags.append("uncovered")
        value = math.exp(score.log_prob / score.tokens) if score.tokens else 0.0
        results.append(Confidence(value, scored, tuple(flags), uncovered))
    return results


class Scored(NamedTuple):
    """A translation and its `Confidence` (`Translator.translate(..., return_scores=True)`)."""

    translation: str
    confidence: Confidence

    def to_dict(self) -> dict:
        """{"translation", "confidence" (the sentence's), "words", "flags", "uncovered"}: a JSON line of
        `translate --scores`."""
        found = self.confidence.to_dict()
        return {"translation": self.translation, "confidence": found.pop("score"), **found}
