"""The texts of a file's units translated together: one call of the translator per chunk of units
(it sorts a chunk by length and batches it), a progress bar on a terminal, line structure kept.

A unit's text is cut into lines; each line's leading and trailing whitespace is kept as it is and
only its core translated, so a gettext message that starts or ends with "\\n" (which `msgfmt --check`
requires of its translation) or a paragraph's indentation survives (where line breaks are mere spaces, in
HTML and XML, a text is translated whole, its ends kept). A core without a letter ("%s:",
"42", "—") is kept as it is, and so is one that the model translates to nothing; identical cores
are translated once. Translation goes through the
markup path (`Translator.translate(..., markup=True)`, `translation/markup_restore.py`): tags,
placeholders, inline codes and characters the model cannot write come out exactly, as many times
as in the source.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence

CHUNK = 1000  # distinct lines translated per call: the memory of a chunk, whatever the file's length
_LINE = re.compile(r"(\s*)(.*?)(\s*)", re.S)
_LETTER = re.compile(r"[^\W\d_]")


def translator_function(translator, target_lang: str | None = None) -> Callable[[list[str]], list[str]]:
    """texts -> translations through the translator's markup path. A `Translator` (it has a tokenizer)
    takes each text as a document, sentence by sentence; an exported model's `SavedModelTranslator`
    (one of markup and documents at a time) as one sentence, with markup. `target_lang` is told to a
    multilingual model only (one whose tokenizer has language pieces): a bilingual model has one
    target language, which a file's `target_lang` merely names."""
    tokenizer = getattr(translator, "tokenizer", None)
    options = {"split": True} if tokenizer is not None else {}
    if target_lang and getattr(tokenizer, "lang_ids", None):
        options["target_lang"] = target_lang
    return lambda texts: list(translator.translate(list(texts), markup=True, **options))


def _progress(total: int, name: str):
    """A tqdm bar (units done, units/s) on stderr when it is a terminal, else None."""
    if not sys.stderr.isatty():
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=name, unit=" lines", file=sys.stderr, leave=False)


def translate_texts(
    translate: Callable[[list[str]], list[str]], texts: Sequence[str], name: str = "", by_line: bool = True
) -> list[str]:
    """Each text translated line by line (the module docstring; not `by_line`: whole, its inner line
    breaks read as spaces, as HTML and XML read them), `CHUNK` distinct texts per call of `translate`."""
    split = [[_LINE.fullmatch(line).groups() for line in (text.split("\n") if by_line else [text])] for text in texts]
    cores = list(dict.fromkeys(core for lines in split for _, core, _ in lines if _LETTER.search(core)))
    translated = {}
    bar = _progress(len(cores), name)
    for start in range(0, len(cores), CHUNK):
        chunk = cores[start : start + CHUNK]
        # an empty translation (a model that stops at once) keeps the source: a file never loses a text
        translated.update((core, translation or core) for core, translation in zip(chunk, translate(chunk)))
        if bar is not None:
            bar.update(len(chunk))
    if bar is not None:
        bar.close()
    return ["\n".join(lead + translated.get(core, core) + trail for lead, core, trail in lines) for lines in split]


def rewrap(text: str, like: list[str]) -> str:
    """`text` in as many lines as `like` (at most as many as it has words), each about as long, cut at
    spaces; `like` itself where `text` is its lines joined (an untranslated text keeps its lines)."""
    if text == " ".join(line.strip() for line in like) or text == "\n".join(like):
        return "\n".join(like)
    lines = len(like)
    words = text.split()
    if lines <= 1 or len(words) <= 1:
        return " ".join(words)
    lines = min(lines, len(words))
    total = sum(map(len, words)) + len(words) - 1
    out, current = [], []
    for i, word in enumerate(words):
        remaining_words = len(words) - i
        remaining_lines = lines - len(out)
        done = sum(len(" ".join(line)) + 1 for line in out)
        if (
            current
            and remaining_lines > 1
            and (
                len(" ".join([*current, word])) > (total - done) / remaining_lines or remaining_words < remaining_lines
            )
        ):
            out.append(current)
            current = []
        current.append(word)
    out.append(current)
    return "\n".join(" ".join(line) for line in out)
