"""Seconds of `Translator` over a model's held-out Bible verses (beam 4, alpha 0.6, batches of
32), three runs after a warm-up; one JSON line. It uses only what every version of the package
has had, so that two versions can be timed alike, each in its own process:

    PYTHONPATH=/path/to/other/checkout python bench/translator_time.py runs/demo
"""

import json
import os
import sys
import time

import numpy as np
import sacrebleu

from keras_transformer.inference.translator import Translator
from keras_transformer.model_dir import load_model


def held_out_pairs(model_dir: str) -> tuple[list[str], list[str]]:
    """The model's held-out pairs through the package's one reader (`data.held_out`); a version of the
    package from before that reader: the Bible's `test` split, what its models were trained on."""
    try:
        from keras_transformer.data.held_out import held_out
        from keras_transformer.data.tokenizer import tag
    except ImportError:
        from keras_transformer.data.sources import read_pairs

        return read_pairs("bible-en-de", "test", False)
    pairs = held_out(model_dir)
    return [tag(text, pairs.target_lang) for text in pairs.sources], pairs.references


def main(model_dir: str) -> None:
    model, tokenizer = load_model(model_dir)[:2]
    sources, references = held_out_pairs(model_dir)
    translator = Translator(model, tokenizer)
    translator.translate(sources[:2])  # tracing
    seconds = []
    for _ in range(3):
        start = time.perf_counter()
        outputs = translator.translate(sources)
        seconds.append(time.perf_counter() - start)
    record = {
        "package": os.path.dirname(os.path.dirname(sys.modules["keras_transformer"].__file__)),
        "seconds": [round(s, 3) for s in seconds],
        "median": round(float(np.median(seconds)), 3),
        "bleu": round(sacrebleu.corpus_bleu(outputs, [references]).score, 2),
        "load_average": os.getloadavg(),
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main(sys.argv[1])
