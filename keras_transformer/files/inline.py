"""Mixed XML content (text with inline elements: XLIFF's `<g>`/`<x/>`/`<pc>`, TMX's `<bpt>`, HTML's
`<b>`, a DOCX paragraph's runs) as one text for the translator, and back.

Each inline element becomes a tag of our own that `translation/markup.py` protects: a paired one
(its content is translated: `<g>`, `<pc>`, `<b>`) `<kN>...</kN>`, an opaque one (kept whole with its
content: `<x/>`, `<ph>`, `<bpt>`, `<code>`) `<kN/>`. The markup path copies every such tag into the
translation exactly once, in the source's order, placed by the word alignment (Hanneman & Dinu, 2020,
compare this projection with others), so every inline code comes back with its id, once, balanced.
`decode` then rebuilds the element's content from the translation: copies of the inline elements
(their tag, attributes and, for an opaque one, content), the translated text between them.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable

_TAG = re.compile(r"<(/?)k(\d+)(/?)>")


def encode(element, paired: Callable, opaque: Callable, text=None) -> tuple[str, list]:
    """The content of `element` as a text with `<kN>` tags, and the list of its inline elements (N
    indexes it). `paired(child)`/`opaque(child)` say how a child is carried (neither: paired).
    `text(node)`: a node's text (default its `.text`)."""
    codes = []

    def walk(node) -> str:
        out = node.text or ""
        for child in node:
            if not isinstance(child.tag, str):  # a comment or processing instruction: carried whole
                codes.append(child)
                out += f"<k{len(codes) - 1}/>"
            elif opaque(child) or not paired(child):
                codes.append(child)
                out += f"<k{len(codes) - 1}/>"
            else:
                codes.append(child)
                n = len(codes) - 1
                out += f"<k{n}>{walk(child)}</k{n}>"
            out += child.tail or ""
        return out

    return walk(element), codes


def decode(translation: str, codes: list, into) -> None:
    """Replace the content of `into` (its text and children; attributes stay) by `translation`,
    whose `<kN>` tags name `codes` (as `encode` made them)."""
    for child in list(into):
        into.remove(child)
    into.text = None
    stack = [into]
    last = {id(into): None}  # the last child appended to each open element, for tails

    def add_text(value: str) -> None:
        parent = stack[-1]
        previous = last[id(parent)]
        if previous is None:
            parent.text = (parent.text or "") + value
        else:
            previous.tail = (previous.tail or "") + value

    position = 0
    for match in _TAG.finditer(translation):
        add_text(translation[position : match.start()])
        position = match.end()
        closing, n, empty = match.group(1), int(match.group(2)), match.group(3)
        if closing:
            if len(stack) > 1:
                stack.pop()
            continue
        original = codes[n]
        if empty:
            node = copy.deepcopy(original)
        else:
            node = original.makeelement(original.tag, original.attrib)
        node.tail = None
        stack[-1].append(node)
        last[id(stack[-1])] = node
        if not empty:
            stack.append(node)
            last[id(node)] = None
    add_text(translation[position:])
