"""Word documents (DOCX), read and written by python-docx.

The same paragraphs (of the body, tables, headers and footers) with the same runs: a paragraph is
translated as one text, each of its text runs a paired code (as `inline.py` makes them) around its words, so bold,
italic and any other run formatting stay on the corresponding words; a run that holds more than text
(a tab, a break, a picture, a field) and any other element (a hyperlink, a bookmark) are carried
whole. Everything that is not text (styles, numbering, images, sections) is unchanged.
"""

from __future__ import annotations

import re
import zipfile

from docx.oxml.ns import qn

from keras_transformer.files import FileFormatError

_RUN, _TEXT, _PROPERTIES, _PARAGRAPH_PROPERTIES = qn("w:r"), qn("w:t"), qn("w:rPr"), qn("w:pPr")


def _text_run(element) -> bool:
    """A run holding only its properties and one text."""
    return element.tag == _RUN and [child.tag for child in element if child.tag != _PROPERTIES] == [_TEXT]


def _paragraphs(document):
    """Every paragraph's XML element: the body's, its tables' (nested too), headers' and footers'."""
    parts = [document.element.body]
    for section in document.sections:
        for part in (section.header, section.footer, section.first_page_header, section.first_page_footer):
            if not part.is_linked_to_previous:
                parts.append(part._element)
    seen = set()
    for part in parts:
        for paragraph in part.iter(qn("w:p")):
            if id(paragraph) not in seen:
                seen.add(id(paragraph))
                yield paragraph


def _encode(paragraph) -> tuple[str, list]:
    """A paragraph as a text with a `<kN>...</kN>` per text run, `<kN/>` per other child."""
    codes, out = [], ""
    for child in paragraph:
        if child.tag == _PARAGRAPH_PROPERTIES:
            continue
        codes.append(child)
        n = len(codes) - 1
        out += f"<k{n}>{child.find(_TEXT).text or ''}</k{n}>" if _text_run(child) else f"<k{n}/>"
    return out, codes


def _decode(translation: str, codes: list) -> None:
    """Each text run's <w:t> from the translation's `<kN>` tags; text outside every run joins the
    run before it (or the first text run)."""
    texts = {n: "" for n, code in enumerate(codes) if _text_run(code)}
    current = None
    for piece in re.split(r"(<k\d+/?>|</k\d+>)", translation):
        tag = re.fullmatch(r"<(/?)k(\d+)(/?)>", piece)
        if tag:
            n = int(tag.group(2))
            current = n if not tag.group(1) and not tag.group(3) and n in texts else current
            continue
        if piece:
            target = current if current is not None else next(iter(texts), None)
            if target is not None:
                texts[target] += piece
    for n, text in texts.items():
        t = codes[n].find(_TEXT)
        t.text = text
        t.set(qn("xml:space"), "preserve")


def translate(path: str, out: str, translate, options) -> None:
    import docx
    from docx.opc.exceptions import PackageNotFoundError

    from keras_transformer.files.units import translate_texts

    try:
        document = docx.Document(path)
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError) as error:
        raise FileFormatError(f"{path}: not a DOCX document ({error or type(error).__name__})") from None
    paragraphs = [p for p in _paragraphs(document) if any(_text_run(child) for child in p)]
    encoded = [_encode(paragraph) for paragraph in paragraphs]
    translations = translate_texts(translate, [text for text, _ in encoded], options.name, by_line=False)
    for (_, codes), translation in zip(encoded, translations):
        _decode(translation, codes)
    document.save(out)
