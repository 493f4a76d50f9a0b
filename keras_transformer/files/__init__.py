"""Translate the files translation teams work in (issue 51): gettext PO, XLIFF 1.2 and 2.0, TMX,
SRT, WebVTT, HTML, Markdown, DOCX and plain text, each read and written by a maintained library
(polib, lxml, srt, webvtt-py, markdown-it-py, python-docx), its structure kept and only its texts
translated, through the translator's markup path (`units.py`).

    import keras_transformer as kt

    translator = kt.Translator.from_model_dir("runs/small")
    kt.translate_file(translator, "messages.po", "messages.de.po")

A module per format, each `translate(path, out, translate, options)`: it reads `path`, translates
its units' texts with `translate` (`units.translate_texts`) and writes `out`. A malformed file is a
`FileFormatError` naming the file and the line (or XML element); the output is written atomically
(a temporary file beside it, then renamed), so a failure leaves none, and the input is changed only
where `out` names it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import os
import tempfile

# format -> (module, extensions)
FORMATS = {
    "po": ("po", (".po", ".pot")),
    "xliff": ("xliff", (".xlf", ".xliff")),
    "tmx": ("tmx", (".tmx",)),
    "srt": ("srt", (".srt",)),
    "vtt": ("vtt", (".vtt",)),
    "html": ("html", (".html", ".htm", ".xhtml")),
    "md": ("markdown", (".md", ".markdown")),
    "docx": ("docx", (".docx",)),
    "txt": ("txt", (".txt",)),
}


class FileFormatError(ValueError):
    """A file that its format's reader cannot read: the message names the file and where (a
    ValueError, as the command line's bad input is: one line, exit status 2)."""


@dataclasses.dataclass(frozen=True)
class Options:
    """What a format's translation may be told: fill units translated already too (PO, XLIFF, TMX),
    the target language (a multilingual model's, and the language a TMX or XLIFF target is in)."""

    overwrite_translated: bool = False
    target_lang: str | None = None
    name: str = ""  # the progress bar's label


def file_format(path: str, format: str | None = None) -> str:
    """`format` (checked) or the one `path`'s extension names; a ValueError listing the formats."""
    known = ", ".join(f"{name} ({' '.join(extensions)})" for name, (_, extensions) in FORMATS.items())
    if format not in (None, "auto"):
        if format not in FORMATS:
            raise ValueError(f"unknown format {format!r}; the formats: {known}")
        return format
    lower = path.lower()
    for name, (_, extensions) in FORMATS.items():
        if lower.endswith(extensions):
            return name
    raise ValueError(f"{path}: unknown extension; the formats: {known} (or pass --format)")


@contextlib.contextmanager
def atomic_output(out: str, binary: bool = False):
    """A temporary file's path in `out`'s directory, renamed to `out` when the block ends without an
    error, removed when it raises."""
    directory = os.path.dirname(os.path.abspath(out))
    handle, temporary = tempfile.mkstemp(prefix=f".{os.path.basename(out)}.", suffix=".tmp", dir=directory)
    os.close(handle)
    try:
        yield temporary
        if os.path.exists(out):  # keep the permissions of the file replaced
            os.chmod(temporary, os.stat(out).st_mode & 0o7777)
        os.replace(temporary, out)
    except BaseException:
        with contextlib.suppress(OSError):
            os.remove(temporary)
        raise


def read_text(path: str) -> str:
    """A UTF-8 text file's content (a BOM dropped); a `FileFormatError` naming the line of a bad byte."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        raise FileFormatError(f"{path}:{line}: not UTF-8 text (byte {data[error.start]:#04x})") from None


def translate_file(
    translator,
    path: str,
    out: str,
    format: str | None = None,
    *,
    overwrite_translated: bool = False,
    target_lang: str | None = None,
) -> str:
    """Translate the file `path` into `out` (the module docstring); `format`: one of `FORMATS`
    (default: from the extension). `translator`: anything with the `Translator.translate(texts,
    markup=True, split=True)` method (a `Translator`, an exported model's). Returns the format."""
    from keras_transformer.files.units import translator_function

    name = file_format(path, format)
    if not os.path.isfile(path):
        raise FileFormatError(f"no such file: {path}")
    module = importlib.import_module(f"keras_transformer.files.{FORMATS[name][0]}")
    options = Options(overwrite_translated, target_lang, os.path.basename(path))
    with atomic_output(out) as temporary:
        module.translate(path, temporary, translator_function(translator, target_lang), options)
    return name
