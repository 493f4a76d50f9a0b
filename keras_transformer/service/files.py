"""`POST /translate_file`: a document in, the translated document out, on the model thread.

Plain text is translated line by line (each line a document of sentences: `split=True`, blank
lines kept); HTML as one document whose tags are kept (`markup=True`, `translation/markup_restore.py`).
Hook for the files issue: where `keras_transformer.files.translate_file` exists, the lead routes
`translate_path` through it (PO, XLIFF, SRT, ...) and extends `FORMATS` with its formats.
"""

from __future__ import annotations

import os

FORMATS = (".txt", ".html", ".htm")


def check_format(filename: str) -> str:
    """The extension of `filename`, lower case; ValueError for one this service does not translate."""
    extension = os.path.splitext(filename)[1].lower()
    if extension not in FORMATS:
        known = ", ".join(FORMATS)
        raise ValueError(f"cannot translate {extension or 'files without an extension'}: the formats are {known}")
    return extension


def translate_path(translate, source_path: str, target_path: str) -> None:
    """Write the translation of the file `source_path` (a `FORMATS` file, UTF-8) to `target_path`;
    `translate(texts, html)` translates a list of texts (`app.translate_texts`)."""
    extension = check_format(source_path)
    with open(source_path, encoding="utf-8") as f:
        text = f.read()
    if extension == ".txt":
        result = "\n".join(translate(text.split("\n"), False))
    else:
        result = translate([text], True)[0]
    with open(target_path, "w", encoding="utf-8") as f:
        f.write(result)
