"""How well the cross-attention word alignments (`Translator.translate_with_alignments`) pair
names: on a trained model's held-out verses (the `test` split of its training data, as
`keras-transformer evaluate` reads it), every word of our German output that is a name (of
`NAMES`, the same string in English and German) also in its English source counts once, and is
aligned when its source word is that name. One JSON line, per decoder layer asked for:

    python bench/alignment_names.py --model-dir runs/a [--model-dir runs/b] [--alignment-layer -2 -1]

Only verses whose source holds a name are translated (the others hold no case). A name that
German spells otherwise (Paul/Paulus, Christ/Christus, Mordecai/Mordechai) counts only where
our output keeps the English spelling.
"""

from __future__ import annotations

import argparse

from common import emit, held_out_pairs, record

from keras_transformer.config import DecodingConfig
from keras_transformer.inference.translator import Translator

NAMES = frozenset(
    "Elimelech Naomi Bethlehem Moab Boaz Ruth Orpah Esther Mordecai Haman Ahasuerus Paul Jesus Christ Israel "
    "David Abraham Aaron Jerusalem Saul Samuel Simon Joseph Benjamin Levi Eli Jordan Babylon Adam Noah Sarah "
    "Timothy Titus Silas Barnabas Judas Pilate Herod Moses Jacob Isaac Peter John Egypt Judah".split()
)
PUNCTUATION = ".,;:!?'\"()[]„“”‘’«»‚-"


def bare(word: str) -> str:
    """A word without the punctuation around it and an English possessive's "'s"."""
    word = word.strip(PUNCTUATION)
    return word[:-2] if word.endswith(("'s", "’s")) else word


def name_cases(source: str, translation: str, pairs) -> list[bool]:
    """For every output word that is a name also in the source: whether it aligns to that name."""
    source_words = [bare(word) for word in source.split()]
    target_words = [bare(word) for word in translation.split()]
    aligned_to = {j: i for i, j in pairs}
    return [
        j in aligned_to and source_words[aligned_to[j]] == word
        for j, word in enumerate(target_words)
        if word in NAMES and word in source_words
    ]


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model-dir", action="append", required=True, help="repeat for an ensemble")
    p.add_argument("--checkpoint", default="latest")
    p.add_argument("--alignment-layer", type=int, nargs="+", default=[DecodingConfig().alignment_layer])
    p.add_argument("--limit", type=int, help="only the first N verses")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    sources = held_out_pairs(args.model_dir[0], args.limit).sources
    with_names = [source for source in sources if NAMES & {bare(word) for word in source.split()}]
    translator = Translator.from_model_dir(args.model_dir, args.checkpoint)
    layers = {}
    for layer in args.alignment_layer:
        layered = Translator(translator.model, translator.tokenizer, translator.decoding, alignment_layer=layer)
        results = layered.translate_with_alignments(with_names)
        cases = [case for source, (text, pairs) in zip(with_names, results) for case in name_cases(source, text, pairs)]
        layers[str(layer)] = {
            "names_in_source_and_output": len(cases),
            "aligned": sum(cases),
            "aligned_share": round(sum(cases) / len(cases), 4) if cases else None,
        }
    emit(
        record(
            benchmark="alignment_names",
            model_dirs=args.model_dir,
            verses=len(sources),
            verses_with_names=len(with_names),
            layers=layers,
        )
    )


if __name__ == "__main__":
    main()
