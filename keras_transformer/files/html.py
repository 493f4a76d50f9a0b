"""HTML pages, read and written by lxml.html.

The element tree stays as it is (tags, attributes, order); what is translated: each block's text,
its inline elements (`b`, `i`, `a`, `span`, `em`, ...) carried around the right words through the
markup path (`inline.py`), and the `alt`, `title` and `placeholder` attributes. Left untouched:
`script`, `style`, `pre`, `code`, `textarea` and any element with `translate="no"` (HTML's attribute
for it), with their content. A block's own text beside its block children (a list item's text
before its nested list) is a text of its own, the children carried in it whole.
"""

from __future__ import annotations

import re

from lxml import etree
from lxml import html as lxml_html

from keras_transformer.files import FileFormatError, inline, read_text

UNTOUCHED = {"script", "style", "pre", "code", "textarea", "kbd", "samp", "var", "svg", "math", "template"}
INLINE = {
    "a", "abbr", "b", "bdi", "bdo", "cite", "data", "dfn", "em", "font", "i", "label", "mark", "q", "s", "small",
    "span", "strong", "sub", "sup", "time", "u", "del", "ins",
}  # fmt: skip
VOID = {"br", "img", "wbr"}  # inline elements without content
ATTRIBUTES = ("alt", "title", "placeholder")


def _untouched(element) -> bool:
    return not isinstance(element.tag, str) or element.tag in UNTOUCHED or element.get("translate") == "no"


def _segments(root):
    """The elements whose content is one text to translate, parents before their children: one with
    text of its own (beside or inside inline elements); its block children ("Item" of
    `<li>Item <ul>...</ul></li>`) are carried in it whole, as opaque codes, and walked into."""
    found = []

    def walk(element):
        if _untouched(element):
            return
        children = [child for child in element if isinstance(child.tag, str)]
        inline = [child for child in children if child.tag in INLINE or _untouched(child) or child.tag in VOID]
        blocks = [child for child in children if child not in inline]
        loose = [element.text, *(child.tail for child in children), *(child.text_content() for child in inline)]
        if any((text or "").strip() for text in loose):
            found.append(element)
        for child in blocks:
            walk(child)

    walk(root)
    return found


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import translate_texts

    text = read_text(path)
    if not text.strip():
        raise FileFormatError(f"{path}:1: an empty HTML file")
    try:
        document = lxml_html.document_fromstring(text)
    except (etree.ParserError, ValueError) as error:
        raise FileFormatError(f"{path}: not HTML ({error})") from None
    holders = [
        (element, name)
        for element in document.iter()
        if isinstance(element.tag, str) and not any(_untouched(e) for e in (element, *element.iterancestors()))
        for name in ATTRIBUTES
        if element.get(name, "").strip()
    ]
    values = translate_texts(translate, [element.get(name) for element, name in holders], options.name, by_line=False)
    for (element, name), value in zip(holders, values):
        element.set(name, value)
    body = document.find("body") if document.find("body") is not None else document
    segments = _segments(body)
    title = document.find("head/title")
    if title is not None:
        segments.insert(0, title)
    paired = lambda child: child.tag in INLINE and not _untouched(child)
    encoded = [inline.encode(element, paired, lambda child: not paired(child)) for element in segments]
    translations = translate_texts(translate, [text for text, _ in encoded], options.name, by_line=False)
    # children first: a parent's decode copies its block children, translated by then
    for element, (_, codes), translation in reversed(list(zip(segments, encoded, translations))):
        inline.decode(translation, codes, element)
    declared = re.match(r"\s*<!doctype", text, re.I)  # else libxml2 reports an implied HTML 4 one
    doctype = document.getroottree().docinfo.doctype if declared else None
    with open(out, "w", encoding="utf-8") as f:
        f.write(lxml_html.tostring(document, encoding="unicode", doctype=doctype or None))
        f.write("\n")
