"""Markup and placeholders: the spans of a text that its translation must keep exactly (issue 36).

Protected spans (`PATTERNS`, one RE2 expression each, tried leftmost first): inline tags
(HTML/XML, opening with attributes, closing, self-closing), character entities (`&amp;`,
`&#39;`, `&#x27;`), URLs and e-mail addresses, ICU arguments (`{count, plural, one {# file}
other {# files}}`, one level of nested braces; a plain `{name}` is a Python field), Python
format fields (`{name}`, `{0}`, `{:>3}`), printf conversions (`%s`, `%1$d`, `%.2f`,
`%(name)s`) and shell variables (`$HOME`, `${VAR}`).

Design: the spans are taken out of the text before it is translated and put back into the
translation afterwards, where the word alignments say (`markup_restore.py`), instead of being
replaced by placeholder tokens for the model to copy. A model trained on plain text (the Bible
verses; software strings without their markup) has never seen such a token: its SentencePiece
vocabulary splits `<b>` or `%1$d` into pieces that a search may drop, repeat, reorder or
translate, and nothing in beam search guarantees a copy. Taken out, every span comes back byte
for byte, as many times as in the source and in the source's order (so tags stay balanced)
whatever the model does; the model decides only the place, through its cross-attention
alignments (Garg et al., 2019; projecting tags by alignment is one of the methods Hanneman & Dinu,
2020, compare). The cost: the model reads the sentence without the spans ("Delete the attribute
?"), which the benchmark measures as BLEU with and without protection (`bench/quality.py markup`).

Where a span sits in the text without its spans ("plain text", what the model translates) is
what `Spans` records: the words of the plain text before it, whether it is glued to a word on
either side, and whether the source has whitespace around it (kept in the output). All of it
in `tf.strings` ops (RE2), so that `Translator.translate(..., markup=True)` (eagerly) and the
SavedModel's `translate_markup` signature (in its graph) run the same rule.
"""

from __future__ import annotations

from typing import NamedTuple

import tensorflow as tf

_NAME = r"[A-Za-z][\w:.-]*"
_ATTRIBUTE = r"""\s+[\w:.-]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'<>=`]+))?"""
_URL_END = r"""[^\s<>"'.,;:!?)\]]"""  # a URL does not end with sentence punctuation
PATTERNS = {
    "tag": rf"</?{_NAME}(?:{_ATTRIBUTE})*\s*/?>",
    "entity": r"&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#[xX][0-9A-Fa-f]+);",
    "url": rf"""(?:(?:https?|ftp)://|www\.)[^\s<>"']*{_URL_END}""",
    "email": r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}",
    "icu": r"\{\s*\w+\s*,\s*(?:plural|selectordinal|select|number|date|time|spellout|ordinal|duration)\s*"
    r"(?:,(?:[^{}]|\{[^{}]*\})*)?\}",
    "python": r"\{\w*(?:\.[A-Za-z_]\w*|\[[^\]{}]*\])*(?:![rsa])?(?::[^{}]*)?\}",
    "printf": r"%\([A-Za-z_]\w*\)[-+0#]*[0-9]*(?:\.[0-9]+)?[diouxXeEfFgGcrsa]"
    r"|%(?:[0-9]+\$)?[-+0#]*(?:[0-9]+|\*)?(?:\.(?:[0-9]+|\*))?(?:hh|h|ll|l|L|q|j|z|t)?[diouxXeEfFgGaAcspn@]",
    "shell": r"\$\{[A-Za-z_]\w*(?:[:#%/^,][^{}]*)?\}|\$[A-Za-z_]\w*",
}
SPAN = "|".join(f"(?:{pattern})" for pattern in PATTERNS.values())
OPENING_TAG = rf"<{_NAME}(?:{_ATTRIBUTE})*\s*>"
CLOSING_TAG = rf"</{_NAME}\s*>"
_MARK = b"\xff"  # never a byte of UTF-8 text: it cuts a text around its spans


class Spans(NamedTuple):
    """Every protected span of a batch of texts, in text order, flat: [N] each."""

    rows: tf.Tensor  # int64: the text it is in
    text: tf.Tensor  # string: the span, as the source has it
    opening: tf.Tensor  # bool: an opening tag (it goes before the word it precedes)
    closing: tf.Tensor  # bool: a closing tag (it goes after the word it follows)
    space_before: tf.Tensor  # bool: whitespace (or the text's start) before it in the source
    space_after: tf.Tensor  # bool: whitespace (or the text's end) after it in the source
    words_before: tf.Tensor  # int64: plain-text words that start before it
    in_word: tf.Tensor  # bool: the plain text has a word character on both sides of it ("AT&amp;T")
    glued_next: tf.Tensor  # bool: the next plain-text character is a word's, the one before is not
    words: tf.Tensor  # int64: the words of its text's plain text


def _count_words(text):
    """[N] strings -> [N] int64: the whitespace-separated words of each."""
    marks = tf.strings.regex_replace(tf.strings.regex_replace(text, r"\S+", "w"), r"\s+", "")  # one "w" per word
    return tf.cast(tf.strings.length(marks), tf.int64)


def stripped(text):
    """text [B] -> [B]: the text without its spans, whitespace as the source has it."""
    return tf.strings.regex_replace(text, SPAN, "")


@tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
def plain_text(text):
    """text [B] -> [B]: what the model translates: the text without its spans, runs of whitespace
    made one space, none at the ends."""
    return tf.strings.strip(tf.strings.regex_replace(stripped(text), r"\s+", " "))


def has_spans(text):
    """text [B] -> [B] bool: whether each text holds a protected span."""
    return tf.strings.regex_full_match(text, f"(?s).*(?:{SPAN}).*")


def spans(text) -> Spans:
    """text [B] strings (valid UTF-8) -> the `Spans` of every text."""
    pieces = tf.strings.split(tf.strings.regex_replace(text, f"({SPAN})", _MARK + rb"\1" + _MARK), _MARK)
    # pieces [B, (2K + 1)]: text, span, text, ..., text (a span's sides may be empty text)
    rows = pieces.value_rowids()  # [P]
    first = tf.gather(pieces.row_starts(), rows)  # [P]: the row's first piece
    is_span = (tf.range(tf.size(rows, tf.int64), dtype=tf.int64) - first) % 2 == 1  # [P]
    lengths = tf.cast(tf.strings.length(pieces.flat_values), tf.int64)  # [P] bytes

    def row_offsets(values):  # [P] -> [P]: the sum of the values before each within its row
        total = tf.cumsum(values, exclusive=True)
        return total - tf.gather(total, first)

    begin = tf.boolean_mask(row_offsets(lengths), is_span)  # [N]: byte offset in the text
    at = tf.boolean_mask(row_offsets(tf.where(is_span, tf.zeros_like(lengths), lengths)), is_span)  # [N]: in stripped
    span = tf.boolean_mask(pieces.flat_values, is_span)  # [N]
    rows = tf.boolean_mask(rows, is_span)  # [N]
    source = tf.gather(text, rows)  # [N]
    end = begin + tf.cast(tf.strings.length(span), tf.int64)
    before = tf.strings.substr(source, tf.zeros_like(begin), begin)  # [N]
    after = tf.strings.substr(source, end, tf.cast(tf.strings.length(source), tf.int64) - end)  # [N]
    bare = tf.gather(stripped(text), rows)  # [N]
    bare_before = tf.strings.substr(bare, tf.zeros_like(at), at)
    bare_after = tf.strings.substr(bare, at, tf.cast(tf.strings.length(bare), tf.int64) - at)
    word_before = tf.strings.regex_full_match(bare_before, r"(?s).*\S")  # [N]
    word_after = tf.strings.regex_full_match(bare_after, r"(?s)\S.*")  # [N]
    return Spans(
        rows=rows,
        text=span,
        opening=tf.strings.regex_full_match(span, OPENING_TAG),
        closing=tf.strings.regex_full_match(span, CLOSING_TAG),
        space_before=tf.strings.regex_full_match(before, r"(?s)(?:.*\s)?"),
        space_after=tf.strings.regex_full_match(after, r"(?s)(?:\s.*)?"),
        words_before=_count_words(bare_before),
        in_word=word_before & word_after,
        glued_next=word_after & ~word_before,
        words=_count_words(bare),
    )


def span_lists(texts: list[str]) -> list[list[str]]:
    """The spans of each text, in order (eagerly)."""
    found = spans(tf.constant(texts, tf.string))
    lists = [[] for _ in texts]
    for row, span in zip(found.rows.numpy(), found.text.numpy()):
        lists[row].append(span.decode("utf-8"))
    return lists


def stripped_texts(texts: list[str]) -> list[str]:
    """Each text's `plain_text` (eagerly): what BLEU reads of a translation with markup."""
    return [text.decode("utf-8") for text in plain_text(tf.constant(texts, tf.string)).numpy()] if texts else []
