"""Translation quality: sacreBLEU BLEU and chrF (Post, 2018) of a model's translations of held-out pairs."""

from __future__ import annotations

import sacrebleu


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
