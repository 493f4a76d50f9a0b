"""Latency of the exported artifacts (SavedModel vs TFLite vs int8 TFLite) at batch 1 and 16,
their sizes, and the BLEU change of int8 weights on a test split. Prints one JSON line.

    python bench/export_latency.py --export OUT [--data bible-en-de] [--limit 200] [--repeats 5]

Latency: median seconds of `translate_ids` (SavedModel, via tf.saved_model.load) and of the
TFLite `serving_default` (LiteRT), same held-out source ids, searches run to the same length.
"""

import argparse
import json
import os
import statistics
import time

import tensorflow as tf
import tensorflow_text  # noqa: F401  the SavedModel holds tensorflow-text ops
from ai_edge_litert.interpreter import Interpreter

from keras_transformer.data.sources import read_pairs
from keras_transformer.data.tokenizer import SubwordTokenizer
from keras_transformer.exporters.tensorflow import ids_saved_model_dir, next_version, saved_model_dir
from keras_transformer.inference.evaluation import corpus_scores


def size(path):
    if os.path.isfile(path):
        return os.path.getsize(path)
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def batches(tokenizer, texts, batch_size, max_length):
    for start in range(0, len(texts), batch_size):
        yield tokenizer.source_ids(texts[start : start + batch_size], max_length)[0].numpy()  # [B, S]


def median_seconds(function, batch, repeats):
    function(batch)  # warm-up: tracing, allocation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function(batch)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True)
    parser.add_argument("--name", default="translator")
    parser.add_argument("--data", default="bible-en-de")
    parser.add_argument("--limit", type=int, default=200, help="test sentences for BLEU")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--max-length", type=int, default=256, help="the model's max_length")
    args = parser.parse_args()

    version = next_version(args.export, args.name) - 1  # the latest export
    saved_model_path = saved_model_dir(args.export, args.name, version)
    signature = tf.saved_model.load(saved_model_path).signatures["translate_ids"]
    runners = {
        kind: Interpreter(model_path=os.path.join(args.export, f"{kind}.tflite")).get_signature_runner()
        for kind in ("translator", "translator_int8")
    }
    functions = {
        "saved_model": lambda ids: signature(source_ids=tf.constant(ids))["ids"].numpy(),
        "tflite": lambda ids: runners["translator"](source_ids=ids)["ids"],
        "tflite_int8": lambda ids: runners["translator_int8"](source_ids=ids)["ids"],
    }
    tokenizer = SubwordTokenizer.load(os.path.join(args.export, "tokenizer.model"))
    sources, references = read_pairs(args.data, "test", False, args.limit)
    latency = {}
    for batch_size in (1, 16):
        batch = next(batches(tokenizer, sources, batch_size, args.max_length))
        for kind, function in functions.items():
            latency[f"{kind}_batch{batch_size}_s"] = round(median_seconds(function, batch, args.repeats), 4)
    bleu = {}
    for kind in ("tflite", "tflite_int8"):
        hypotheses = []
        for batch in batches(tokenizer, sources, 16, args.max_length):
            hypotheses += [t.decode("utf-8") for t in tokenizer.detokenize(functions[kind](batch)[:, 0]).numpy()]
        bleu[kind] = corpus_scores(hypotheses, references)["bleu"]
    sizes = {
        "saved_model_bytes": size(saved_model_path),
        "saved_model_ids_bytes": size(ids_saved_model_dir(args.export, args.name, version)),
        **{
            f"{kind}_bytes": size(os.path.join(args.export, f"{kind}.tflite"))
            for kind in ("translator", "translator_int8", "translator_text")
        },
    }
    print(
        json.dumps(
            {
                **latency,
                **sizes,
                "test_sentences": len(sources),
                "bleu_tflite": bleu["tflite"],
                "bleu_tflite_int8": bleu["tflite_int8"],
                "bleu_int8_change": round(bleu["tflite_int8"] - bleu["tflite"], 2),
            }
        )
    )


if __name__ == "__main__":
    main()
