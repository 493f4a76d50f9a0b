"""Markdown documents: their block structure parsed by markdown-it-py (CommonMark), only the
text of paragraphs and headings translated, line by line in place.

Untouched: front matter (a leading `---` block), fenced and indented code blocks, HTML blocks,
thematic breaks, and the lines' block markers (`#`, `>`, list bullets, indentation). In a
paragraph's or heading's inline text, code spans, link and image targets (`](...)`), the `[` that
opens a link, emphasis markers (`*`, `**`, `_`) are opaque codes that the markup path keeps, in the
source's order, beside the words they were next to; inline HTML, autolinks and URLs are markup it
keeps anyway. A paragraph is translated as one text and rewrapped to its number of lines.
"""

from __future__ import annotations

import re

from markdown_it import MarkdownIt

from keras_transformer.files import read_text

_CODES = re.compile(r"(`+).+?\1|!?\[|\]\((?:[^()]|\([^()]*\))*\)|\]\[[^\]]*\]|\*\*|__|\*|(?<!\w)_|_(?!\w)")
_OURS = re.compile(r"<k(\d+)/>")


def _front_matter(lines: list[str]) -> int:
    """The number of lines of a leading `---` ... `---` (or `...`) block, 0 if none."""
    if lines and lines[0].rstrip() == "---":
        for i, line in enumerate(lines[1:], 1):
            if line.rstrip() in ("---", "..."):
                return i + 1
    return 0


def _encode(content: str) -> tuple[str, list[str]]:
    codes = []

    def code(match):
        codes.append(match.group(0))
        return f"<k{len(codes) - 1}/>"

    return _CODES.sub(code, content), codes


def translate(path: str, out: str, translate, options) -> None:
    from keras_transformer.files.units import rewrap, translate_texts

    text = read_text(path)
    lines = text.split("\n")
    skip = _front_matter(lines)
    tokens = MarkdownIt("commonmark").parse("\n".join(lines[skip:]))
    units = []  # (first line, content lines, codes, text)
    for previous, token in zip(tokens, tokens[1:]):
        if token.type == "inline" and token.map and previous.type in ("paragraph_open", "heading_open"):
            encoded, codes = _encode(token.content)
            units.append((skip + token.map[0], token.content.split("\n"), codes, encoded))
    translations = translate_texts(translate, [unit[3] for unit in units], options.name, by_line=False)
    for (first, content, codes, _), translation in zip(reversed(units), reversed(translations)):
        restored = _OURS.sub(lambda match, codes=codes: codes[int(match.group(1))], translation)
        wrapped = rewrap(restored, content).split("\n")
        places = [lines[first + j].find(part) for j, part in enumerate(content)]
        if min(places) < 0:  # a line that markdown-it changed (a tab expanded): the paragraph kept
            continue
        lines[first : first + len(content)] = [
            lines[first + j][:at] + wrapped[j] + lines[first + j][at + len(content[j]) :]
            for j, at in enumerate(places)
            if j < len(wrapped)
        ]
    with open(out, "w", encoding="utf-8", newline="") as f:
        f.write("\n".join(lines))
