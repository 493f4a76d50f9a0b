"""TMX (Translation Memory eXchange, LISA/GALA 1.4b) as training pairs, streamed by lxml's iterparse.

A `<tu>` gives a pair when it has a `<tuv>` in the source language and one in the target language;
its `<seg>`'s text, inline codes (`<bpt>`, `<ept>`, `<ph>`, `<it>`, `<ut>`: native codes) dropped and
the text of `<hi>` kept, whitespace runs made one space. The languages: those given (`train
--source-lang en --target-lang de`), else the file name's `xx-yy` (`config.language_pair`, as for
any data source), else the header's `srclang` and the one other language of the file's `<tuv>`s
("de" matches "de-DE"). The file is read once first, to check it (a malformed one is a `DataError`
with its line), to find its languages and to count its pairs (for the blocks of `splits.TSV_BLOCKS`).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator

from lxml import etree

from keras_transformer.config import language_pair
from keras_transformer.data.errors import DataError

XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"
_CODES = {"bpt", "ept", "ph", "it", "ut"}  # native codes, not text


def is_tmx(path: str) -> bool:
    return path.lower().endswith(".tmx")


def _text(seg) -> str:
    parts = [seg.text or ""]
    for child in seg:
        if isinstance(child.tag, str) and child.tag not in _CODES:
            parts.append(_text(child))
        parts.append(child.tail or "")
    return re.sub(r"\s+", " ", "".join(parts)).strip()


def _units(path: str) -> Iterator[tuple[int, dict[str, str]]]:
    """(line, {language: text}) of each <tu>, streamed; the header's srclang as line 0 ({"": srclang})."""
    try:
        for _, element in etree.iterparse(path, events=("end",), tag=("header", "tu"), huge_tree=True):
            if element.tag == "header":
                yield 0, {"": element.get("srclang", "")}
                continue
            variants = {}
            for tuv in element.iterfind("tuv"):
                seg = tuv.find("seg")
                lang = (tuv.get(XML_LANG) or tuv.get("lang") or "").lower()
                if seg is not None and lang:
                    variants[lang] = _text(seg)
            yield element.sourceline, variants
            element.clear(keep_tail=False)
            while element.getprevious() is not None:
                del element.getparent()[0]
    except etree.XMLSyntaxError as error:
        raise DataError(f"{path}:{error.lineno}: not well-formed TMX ({error.msg})") from None


def _match(variants: dict[str, str], lang: str) -> str | None:
    """The variant of `lang`, or of a regional variant of it ("de" matches "de-de")."""
    if lang in variants:
        return variants[lang]
    return next((text for code, text in variants.items() if code.split("-")[0] == lang), None)


@functools.lru_cache(maxsize=16)
def _scan(path: str, mtime: float, size: int) -> tuple[tuple[str, str], frozenset, int]:
    """(srclang, every language, <tu>s) of a TMX file, read once per file version."""
    srclang, languages, units = "", set(), 0
    for line, variants in _units(path):
        if line == 0:
            srclang = variants[""].lower()
        else:
            languages |= set(variants)
            units += 1
    return srclang, frozenset(languages), units


def languages(path: str, given: tuple[str | None, str | None] = (None, None)) -> tuple[str, str]:
    """The (source, target) languages of a TMX file: `given` (`--source-lang`, `--target-lang`; one
    of them, the other found), else its name's, else its srclang and its one other language (the
    module docstring); a DataError where that leaves it unclear."""
    srclang, found, _ = _scan(path, os.path.getmtime(path), os.path.getsize(path))  # checks the file
    named = language_pair(os.path.basename(path))
    if named is not None and not any(given):
        return named
    base = lambda code: code.lower().split("-")[0]
    source = base(given[0] or srclang)
    others = sorted({base(code) for code in found} - {source})
    target = base(given[1]) if given[1] else others[0] if len(others) == 1 else None
    if source in ("", "*all*") or target is None:
        raise DataError(
            f"{path}: cannot tell its language pair (srclang {srclang or 'missing'}, languages {sorted(found)}): "
            "pass --source-lang and --target-lang, or name the file with the pair, e.g. memory.en-de.tmx"
        )
    return source, target


def count_units(path: str) -> int:
    """The <tu>s of a TMX file (checked: a malformed file is a DataError)."""
    return _scan(path, os.path.getmtime(path), os.path.getsize(path))[2]


def tmx_pairs(path: str, lines: tuple[int, int] | None = None, given=(None, None)) -> Iterator[tuple[str, str]]:
    """The (source, target) pairs of a TMX file (of the languages `languages(path, given)`), <tu>s
    (start, end] only if `lines` is given."""
    source, target = languages(path, given)
    index = 0
    for line, variants in _units(path):
        if line == 0:
            continue
        index += 1
        if lines is not None and not lines[0] < index <= lines[1]:
            continue
        pair = _match(variants, source), _match(variants, target)
        if pair[0] and pair[1]:
            yield pair
