"""Markup and placeholders: the spans of a text that its translation must keep exactly (issue 36).

Protected spans (`PATTERNS`, one RE2 expression each, tried leftmost first): inline tags
(HTML/XML, opening with attributes, closing, self-closing), character entities (`&amp;`,
`&#39;`, `&#x27;`), URLs and e-mail addresses, ICU arguments (`{count, plural, one {# file}
other {# files}}`, one level of nested braces; a plain `{name}` is a Python field), Python
format fields (`{name}`, `{0}`, `{:>3}`), printf conversions (`%s`, `%1$d`, `%.2f`,
`%(name)s`) and shell variables (`$HOME`, `${VAR}`). That fixed rule is `SPAN`; a model's own rule,
`span_rule(tokenizer)`, adds its unknown characters.

Unknown characters (issue 36 item 5): a run of characters that the model's vocabulary cannot write
as pieces and that are neither ASCII nor letters of the Latin script (an emoji, ZWJ sequences and
skin tones included; a CJK name; a symbol like "⚖") is a span too: taken out and put back, never
written by the model. Byte fallback alone does not keep them: `bench/quality.py unknown` on the
`make demo` model (2026-12-04) kept 0 of 30 inserted characters (the source ids held their byte
pieces, the search's best never did: its training targets hold 654 byte tokens of 4 distinct bytes),
and the bytes derailed the rest of the sentence (BLEU 23.59 on those verses without the items, 17.43
with); protected by this rule, 30 of 30 are kept, at BLEU 22.58. Latin letters are left to the
model: in that model "Q" and "Ö" are no pieces but frequent in training (bytes it did learn), and a
span would split "Quartus". A vocabulary without byte fallback gains too: there such a character is
the unknown id, dropped.

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

import functools
import unicodedata
from typing import NamedTuple

import sentencepiece
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
_STRING = tf.TensorSpec([None], tf.string)
_MARK = b"\xff"  # never a byte of UTF-8 text: it cuts a text around its spans


def _class(characters) -> str:
    """The RE2 class body of `characters`: runs of consecutive code points as ranges, each end
    an escape (\\x{...}) unless a letter or digit."""
    points = sorted(map(ord, characters))
    runs = [[points[0], points[0]]] if points else []
    for point in points[1:]:
        if point == runs[-1][1] + 1:
            runs[-1][1] = point
        else:
            runs.append([point, point])
    write = lambda point: chr(point) if chr(point).isalnum() else f"\\x{{{point:X}}}"
    return "".join(write(a) if a == b else f"{write(a)}-{write(b)}" for a, b in runs)


@functools.cache
def _nfkc_changed() -> tuple[str, ...]:
    """Every character that NFKC changes ("…" -> "...", "ﬁ" -> "fi"): about 5,000, found in ~0.1 s."""
    points = (chr(i) for i in range(0x110000) if not 0xD800 <= i < 0xE000)
    return tuple(c for c in points if not unicodedata.is_normalized("NFKC", c))


def vocabulary_characters(tokenizer) -> set[str]:
    """Every character of a `SubwordTokenizer`'s pieces that the model can write: not of a reserved
    piece (pad, start, EOS, unknown), a byte piece ("<0xF0>"), a target language's ("<2fr>"), nor
    SentencePiece's word-start marker "▁"; and every character that NFKC, the normalisation our
    tokenizers learn with (SentencePiece's `nmt_nfkc`), makes characters of those ("…" is read as
    "...", so it is no unknown character)."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    meta = lambda i: processor.IsControl(i) or processor.IsUnknown(i) or processor.IsByte(i) or processor.IsUnused(i)
    languages = set(tokenizer.lang_ids.values())
    pieces = (processor.id_to_piece(i) for i in range(processor.get_piece_size()) if not meta(i) and i not in languages)
    known = set("".join(pieces)) - {"\u2581"}
    readable = known | {" "}
    return known | {c for c in _nfkc_changed() if set(unicodedata.normalize("NFKC", c)) <= readable}


def span_rule(tokenizer) -> str:
    """`SPAN` or a run of the tokenizer's unknown characters (the module docstring): characters
    outside `vocabulary_characters`, not ASCII, not Latin letters, not Unicode separators (which
    SentencePiece makes spaces). ASCII is the markup's own syntax, which `SPAN` reads: a run that
    took an unknown "'" or "%" would cut the "%s" of "'%s'" (every `SPAN` match starts with an
    ASCII character, so a run of others never reaches into one). A run does not start with a
    combining mark or a format character, so that those stay with a Latin letter before them
    ("e" + U+0301, a soft hyphen); inside a run they keep an emoji sequence whole (U+FE0F, the
    ZWJ U+200D)."""
    beyond_ascii = (character for character in vocabulary_characters(tokenizer) if ord(character) > 0x7F)
    known = _class(beyond_ascii) + r"\x{0}-\x{7F}\p{Latin}\p{Z}"
    return f"{SPAN}|(?:[^{known}\\p{{M}}\\p{{Cf}}][^{known}]*)"


def per_rule(function):
    """`function(*texts, span)` ([B] strings each) called as `function(*texts, span=SPAN)`: one
    tf.function per span rule and number of texts, traced once for every batch (a rule is a
    constant of the graph, compiled once by RE2)."""

    @functools.cache
    def traced(span, count):
        return tf.function(functools.partial(function, span=span), input_signature=[_STRING] * count)

    @functools.wraps(function)
    def call(*texts, span=SPAN):
        return traced(span, len(texts))(*texts)

    return call


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


def stripped(text, span=SPAN):
    """text [B] -> [B]: the text without its spans (of the rule `span`: `SPAN` or a `span_rule`),
    whitespace as the source has it."""
    return tf.strings.regex_replace(text, span, "")


@per_rule
def plain_text(text, span=SPAN):
    """text [B] -> [B]: what the model translates: the text without its spans, runs of whitespace
    made one space, none at the ends."""
    return tf.strings.strip(tf.strings.regex_replace(stripped(text, span), r"\s+", " "))


def has_spans(text, span=SPAN):
    """text [B] -> [B] bool: whether each text holds a protected span."""
    return tf.strings.regex_full_match(text, f"(?s).*(?:{span}).*")


def spans(text, span=SPAN) -> Spans:
    """text [B] strings (valid UTF-8) -> the `Spans` of every text."""
    pieces = tf.strings.split(tf.strings.regex_replace(text, f"({span})", _MARK + rb"\1" + _MARK), _MARK)
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
    found = tf.boolean_mask(pieces.flat_values, is_span)  # [N]
    rows = tf.boolean_mask(rows, is_span)  # [N]
    source = tf.gather(text, rows)  # [N]
    end = begin + tf.cast(tf.strings.length(found), tf.int64)
    before = tf.strings.substr(source, tf.zeros_like(begin), begin)  # [N]
    after = tf.strings.substr(source, end, tf.cast(tf.strings.length(source), tf.int64) - end)  # [N]
    bare = tf.gather(stripped(text, span), rows)  # [N]
    bare_before = tf.strings.substr(bare, tf.zeros_like(at), at)
    bare_after = tf.strings.substr(bare, at, tf.cast(tf.strings.length(bare), tf.int64) - at)
    word_before = tf.strings.regex_full_match(bare_before, r"(?s).*\S")  # [N]
    word_after = tf.strings.regex_full_match(bare_after, r"(?s)\S.*")  # [N]
    return Spans(
        rows=rows,
        text=found,
        opening=tf.strings.regex_full_match(found, OPENING_TAG),
        closing=tf.strings.regex_full_match(found, CLOSING_TAG),
        space_before=tf.strings.regex_full_match(before, r"(?s)(?:.*\s)?"),
        space_after=tf.strings.regex_full_match(after, r"(?s)(?:\s.*)?"),
        words_before=_count_words(bare_before),
        in_word=word_before & word_after,
        glued_next=word_after & ~word_before,
        words=_count_words(bare),
    )


def span_lists(texts: list[str], span: str = SPAN) -> list[list[str]]:
    """The spans of each text, in order (eagerly)."""
    found = spans(tf.constant(texts, tf.string), span)
    lists = [[] for _ in texts]
    for row, span in zip(found.rows.numpy(), found.text.numpy()):
        lists[row].append(span.decode("utf-8"))
    return lists


def stripped_texts(texts: list[str], span: str = SPAN) -> list[str]:
    """Each text's `plain_text` (eagerly): what BLEU reads of a translation with markup."""
    if not texts:
        return []
    return [text.decode("utf-8") for text in plain_text(tf.constant(texts, tf.string), span=span).numpy()]
