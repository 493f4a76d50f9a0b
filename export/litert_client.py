"""Translate on a device with LiteRT (pip install ai-edge-litert sentencepiece): no TensorFlow.

    python export/litert_client.py --export OUT "Jesus wept."
    python export/litert_client.py --export OUT --int8 "Jesus wept."

It runs the ids models (`OUT/translator.tflite`, `translator_int8.tflite`: builtin ops only) and
does, in Python, the steps an app does around them on the device: read `OUT/translator.json`
(max_length, reserved ids, beam size), tokenize with SentencePiece (`OUT/tokenizer.model`),
truncate and append EOS, run the model, keep the best beam, detokenize. The text model
(`translator_text.tflite`) needs tensorflow-text's tokenizer kernel registered in the
interpreter, which stock LiteRT lacks; see export/README.md, "Devices".
"""

import argparse
import json
import os
import re

import numpy as np
import sentencepiece
from ai_edge_litert.interpreter import Interpreter


def load_metadata(export_dir):
    """`OUT/translator.json`, written by `keras-transformer export`."""
    with open(os.path.join(export_dir, "translator.json"), encoding="utf-8") as f:
        return json.load(f)


def source_ids(processor, texts, metadata):
    """[B, S] int32: tokens truncated to max_length - 1, then EOS, padded."""
    rows = [processor.encode(text)[: metadata["max_length"] - 1] + [metadata["eos_id"]] for text in texts]
    batch = np.full((len(rows), max(len(r) for r in rows)), metadata["pad_id"], np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


def detokenize(processor, ids, metadata):
    """The tokens before the first EOS or pad, without start and unknown ids, as text."""
    out = []
    for token in ids.tolist():
        if token in (metadata["eos_id"], metadata["pad_id"]):
            break
        if token not in (metadata["start_id"], metadata["unk_id"]):
            out.append(token)
    return re.sub("  +", " ", processor.decode(out)).strip()  # as SubwordTokenizer.detokenize


def translate(texts, export_dir, model="ids"):
    """[(translation, score)] of each text, by the model `model` ("ids" or "ids_int8") of the export."""
    metadata = load_metadata(export_dir)
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(export_dir, metadata["tokenizer"]))
    # the target side's model, where the model has one of its own (OPUS-MT's two SentencePiece models)
    target = os.path.join(export_dir, metadata.get("target_tokenizer", metadata["tokenizer"]))
    detokenizer = sentencepiece.SentencePieceProcessor(model_file=target)
    runner = Interpreter(model_path=os.path.join(export_dir, metadata["models"][model])).get_signature_runner()
    outputs = runner(source_ids=source_ids(processor, texts, metadata))  # resizes to [B, S]
    best = outputs["ids"][:, 0]  # [B, L]
    return [(detokenize(detokenizer, row, metadata), float(score)) for row, score in zip(best, outputs["scores"][:, 0])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="the export directory")
    parser.add_argument("--int8", action="store_true", help="use translator_int8.tflite")
    parser.add_argument("text", nargs="+")
    args = parser.parse_args()
    for translation, score in translate(args.text, args.export, "ids_int8" if args.int8 else "ids"):
        print(f"{score:.3f}\t{translation}")


if __name__ == "__main__":
    main()
