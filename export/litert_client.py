"""Translate on a device with LiteRT (pip install ai-edge-litert sentencepiece): no TensorFlow.

    python export/litert_client.py --export OUT "Jesus wept."

`OUT/translator.tflite` takes token ids (builtin ops only); SentencePiece (`OUT/tokenizer.model`)
tokenizes and detokenizes on the device. `OUT/translator_text.tflite` takes the text itself,
with tensorflow-text's TFLite tokenizer kernel (see export/README.md).
"""

import argparse
import os
import re

import numpy as np
import sentencepiece
from ai_edge_litert.interpreter import Interpreter

PAD_ID, EOS_ID, UNK_ID, START_ID = 0, 2, 3, 1


def source_ids(processor, texts, max_length):
    """[B, S] int32: tokens truncated to max_length - 1, then EOS, padded with 0."""
    rows = [processor.encode(text)[: max_length - 1] + [EOS_ID] for text in texts]
    batch = np.full((len(rows), max(len(r) for r in rows)), PAD_ID, np.int32)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = row
    return batch


def detokenize(processor, ids):
    """The tokens before the first EOS or pad, without start and unknown ids, as text."""
    out = []
    for token in ids.tolist():
        if token in (EOS_ID, PAD_ID):
            break
        if token not in (START_ID, UNK_ID):
            out.append(token)
    return re.sub("  +", " ", processor.decode(out)).strip()  # as SubwordTokenizer.detokenize


def translate(texts, export_dir, model="translator.tflite", max_length=256):
    processor = sentencepiece.SentencePieceProcessor(model_file=os.path.join(export_dir, "tokenizer.model"))
    runner = Interpreter(model_path=os.path.join(export_dir, model)).get_signature_runner()
    outputs = runner(source_ids=source_ids(processor, texts, max_length))  # resizes to [B, S]
    best = outputs["ids"][:, 0]  # [B, L]
    return [(detokenize(processor, row), float(score)) for row, score in zip(best, outputs["scores"][:, 0])]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--export", required=True, help="the export directory")
    parser.add_argument("--int8", action="store_true", help="use translator_int8.tflite")
    parser.add_argument("--max-length", type=int, default=256, help="the model's max_length (config.json)")
    parser.add_argument("text", nargs="+")
    args = parser.parse_args()
    model = "translator_int8.tflite" if args.int8 else "translator.tflite"
    for translation, score in translate(args.text, args.export, model, args.max_length):
        print(f"{score:.3f}\t{translation}")


if __name__ == "__main__":
    main()
