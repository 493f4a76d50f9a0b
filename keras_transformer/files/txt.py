"""Plain text: each paragraph (lines between blank lines) translated as a document, sentence by
sentence; blank lines, the lines' indentation and the line ends kept; a paragraph is rewrapped to
its number of lines."""

from __future__ import annotations

import re

from keras_transformer.files import read_text


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import rewrap, translate_texts

    text = read_text(path)
    parts = re.split(r"((?:\n[ \t]*)+\n|\n$)", text)  # paragraphs, and the blank lines or final line end after each
    lines = [paragraph.split("\n") for paragraph in parts[0::2]]
    joined = [" ".join(line.strip() for line in paragraph) for paragraph in lines]
    for i, (paragraph, translation) in enumerate(zip(lines, translate_texts(translate, joined, options.name))):
        indent = re.match(r"\s*", paragraph[0]).group(0)
        wrapped = rewrap(translation, paragraph).split("\n")
        parts[2 * i] = "\n".join(line if line == old else indent + line for line, old in zip(wrapped, paragraph))
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write("".join(parts))
