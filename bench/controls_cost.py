"""What each decoding control costs (`inference/controls.py`): `Translator` over a model's
held-out verses (beam 4, alpha 0.6, batches of 32, one thread per op) with no control, each
control alone and all at once, interleaved A B C ... rounds in one process; seconds, target
tokens/s, its ratio to no control, sacreBLEU BLEU; one JSON line.

    python bench/controls_cost.py --model-dir runs/demo [--limit N] [--rounds 3]
"""

import argparse
import statistics
import time

import sacrebleu
import tensorflow as tf
from common import emit, held_out_pairs, record

from keras_transformer.inference.translator import Translator
from keras_transformer.model_dir import load_model

CONTROLS = {
    "none": {},
    "min_decoding_length": {"min_decoding_length": 3},
    "max_decoding_length": {"max_decoding_length": 100},
    "repetition_penalty": {"repetition_penalty": 1.2},
    "no_repeat_ngram_size": {"no_repeat_ngram_size": 3},
    "disable_unk": {"disable_unk": True},
    "suppress_sequences": {"suppress_sequences": ("und und",)},
    "all": {
        "min_decoding_length": 3,
        "repetition_penalty": 1.2,
        "no_repeat_ngram_size": 3,
        "disable_unk": True,
        "suppress_sequences": ("und und",),
    },
}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="a trained model directory (its held-out verses)")
    p.add_argument("--limit", type=int, help="only the first N held-out verses")
    p.add_argument("--rounds", type=int, default=3, help="timed passes of every setting, interleaved")
    args = p.parse_args(argv)
    if not tf.config.threading.get_intra_op_parallelism_threads():  # as keras-transformer translate runs
        try:
            tf.config.threading.set_intra_op_parallelism_threads(1)
        except RuntimeError:  # TensorFlow already runs (an in-process caller): its pools stay
            pass
    model, tokenizer, _ = load_model(args.model_dir)
    sources, references = held_out_pairs(args.model_dir, args.limit)[:2]
    translators = {name: Translator(model, tokenizer, **settings) for name, settings in CONTROLS.items()}
    for translator in translators.values():
        translator.translate(sources[:2])  # tracing
    seconds = {name: [] for name in CONTROLS}
    outputs = {}
    for _ in range(args.rounds):
        for name, translator in translators.items():
            start = time.perf_counter()
            outputs[name] = translator.translate(sources)
            seconds[name].append(time.perf_counter() - start)
    tokens = {
        name: sum(len(ids) for ids in tokenizer.tokenize(out).to_list()) + len(out) for name, out in outputs.items()
    }
    median = {name: statistics.median(s) for name, s in seconds.items()}
    systems = {
        name: {
            "seconds": [round(s, 3) for s in seconds[name]],
            "seconds_median": round(median[name], 3),
            "tgt_tokens_per_s": round(tokens[name] / median[name], 1),
            "time_over_none": round(median[name] / median["none"], 3),
            "bleu": round(sacrebleu.corpus_bleu(outputs[name], [references]).score, 2),
        }
        for name in CONTROLS
    }
    emit(record(benchmark="controls_cost", model_dir=args.model_dir, sentences=len(sources), systems=systems))


if __name__ == "__main__":
    main()
