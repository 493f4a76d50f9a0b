"""Translation quality: sacreBLEU BLEU and chrF (Post, 2018) of a model's translations of held-out pairs.

import keras_transformer as kt

scores = kt.evaluate("runs/small", kt.read_pairs("bible-en-de", "test"))
scores["bleu"], scores["chrf"], scores["translations"][:3]
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import sacrebleu

from keras_transformer.config import DecodingConfig
from keras_transformer.translation.translator import Translator


def corpus_scores(hypotheses: list[str], references: list[str]) -> dict:
    """sacreBLEU BLEU and chrF of detokenized hypotheses against one reference each, with signatures."""
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return {
        "bleu": round(bleu_score.score, 2),
        "chrf": round(chrf_score.score, 2),
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
        "sentences": len(hypotheses),
    }


def evaluate(
    translator: Translator | str | os.PathLike,
    pairs: tuple[Sequence[str], Sequence[str]],
    checkpoint: str = "latest",
    decoding: DecodingConfig | None = None,
    target_lang: str | None = None,
    **overrides,
) -> dict:
    """Translate the sources of `pairs` (sources, references), as `read_pairs` returns them, and
    score the translations: `corpus_scores` and "translations" (one per source, in order).

    `translator`: a `Translator`, or a model directory (its `checkpoint`'s weights). `decoding`
    and `overrides` (`DecodingConfig` fields) replace the translator's settings. `target_lang`: a
    multilingual model's target language (`Translator.translate`).
    """
    if isinstance(translator, str | os.PathLike):
        translator = Translator.from_model_dir(os.fspath(translator), checkpoint, decoding, **overrides)
    elif decoding is not None or overrides:
        translator = Translator(translator.model, translator.tokenizer, (decoding or translator.decoding), **overrides)
    sources, references = pairs
    if len(sources) != len(references):
        raise ValueError(f"{len(sources)} sources but {len(references)} references")
    # Only a multilingual model's call names the language: any object with `translate(texts)` serves.
    given = {} if target_lang is None else {"target_lang": target_lang}
    translations = translator.translate(list(sources), **given)
    return {**corpus_scores(translations, list(references)), "translations": translations}
