"""Markup and placeholders put back into a translation, by its word alignment (issue 36).

`markup.py` takes a text's protected spans out (tags, entities, placeholders, URLs, e-mail
addresses; with a model's `span_rule`, the characters its vocabulary cannot write); the model
translates the plain text, with its word alignment (`alignment.py`: the cross-attention of
`alignment_layer`, Garg et al., 2019); `restore` puts every span back:

- A span is attached to a word of the plain text: an opening tag, or a span glued to the word
  that follows it ("{name}?"), to the word after it; a closing tag and any other span to the
  word before it (the word it is inside, for "AT&amp;T"). With no word on its preferred side it
  takes the other; a text with no words at all gives its spans in order.
- In the translation, a span attached before source word i goes before the first target word
  aligned to i, one attached after i after the last such word.
- A span whose word no target word aligns to (dropped by the translation, or an empty one) goes
  to the end of the sentence: never lost.
- Spans keep the source's order: each goes no earlier than the span before it (a running
  maximum of the places). So the tags come out in the order, and with the nesting, of the
  source: balanced wherever the source is. A translation that reorders two tagged words keeps
  the tags in source order, around what falls between them.
- Each span keeps the source's spacing: glued to the word it is attached to where the source
  glues them ("<b>word", "word</b>", "''%s" for "'%s'"), to a span beside it where both were
  side by side ("<b><i>"), a space elsewhere.

Every span of the source is in the output exactly once per occurrence, byte for byte: it is
copied, never generated; a span the model writes itself (a `{}` or `%s` learned from the
training data's strings) is taken out of the translation's words first: only the source's come
out. A text without spans keeps its translation unchanged. In `tf.strings`
and tensor ops only, so that `Translator.translate(..., markup=True)` (eagerly) and the
SavedModel's `translate_markup` signature run one rule: `pipeline.Pipeline.translate`'s.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.translation.markup import SPAN, has_spans, per_rule, spans

_FAR = tf.int64.max


def _pairs(pharaoh):
    """Pharaoh strings [B] ("0-0 2-1") -> (source words [B, P], target words [B, P]) int64, -1 padded."""
    pairs = tf.strings.split(pharaoh)  # [B, (P)] "i-j"
    source = tf.strings.to_number(tf.strings.regex_replace(pairs.flat_values, "-.*", ""), tf.int64)
    target = tf.strings.to_number(tf.strings.regex_replace(pairs.flat_values, ".*-", ""), tf.int64)
    return pairs.with_flat_values(source).to_tensor(-1), pairs.with_flat_values(target).to_tensor(-1)


def _previous(values, fill):
    """[T] -> [T]: each value's predecessor, `fill` for the first."""
    return tf.concat([[fill], values], axis=0)[:-1]


def _without_spans(values, span):
    """[N] strings -> [N]: every span taken out, until none is left (taking "$num" out of
    "{$num}" leaves the span "{}")."""
    return tf.while_loop(
        lambda values: tf.reduce_any(has_spans(values, span)),
        lambda values: (tf.strings.regex_replace(values, span, ""),),
        (values,),
    )[0]


@per_rule
def restore(text, translation, pharaoh, span=SPAN):
    """text [B] (the sources, with their spans), translation [B] (of each `plain_text(text, span=span)`),
    pharaoh [B] (each translation's word alignment to its plain text) -> [B]: the translations
    with every span of their source (of the rule `span`) put back (see the module docstring)."""
    found = spans(text, span)  # [N] each
    words = tf.strings.split(tf.strings.regex_replace(translation, r"\s+", " "))  # [B, (J)] target words
    words = words.with_flat_values(_without_spans(words.flat_values, span))  # the model's own spans out
    target_words = words.row_lengths()  # [B]
    # The source word each span is attached to, and on which side.
    has_next = found.words_before - tf.cast(found.in_word, tf.int64) < found.words  # a word from it on
    has_previous = found.words_before > 0
    wants_next = found.opening | (~found.closing & found.glued_next)
    before = (wants_next & has_next) | ~has_previous  # [N]
    anchor = tf.where(before, found.words_before - tf.cast(found.in_word, tf.int64), found.words_before - 1)  # [N]
    # Its place in the translation: a slot k in [0, J], before target word k (J: the end).
    source_of, target_of = (tf.gather(pairs, found.rows) for pairs in _pairs(pharaoh))  # [N, P] each
    aligned = source_of == anchor[:, None]  # [N, P]
    first = tf.reduce_min(tf.where(aligned, target_of, _FAR), axis=1)  # [N]
    last = tf.reduce_max(tf.where(aligned, target_of, -1), axis=1)  # [N]
    end = tf.gather(target_words, found.rows)  # [N]
    placed = tf.reduce_any(aligned, axis=1)  # [N]
    slot = tf.minimum(tf.where(placed, tf.where(before, first, last + 1), end), end)  # [N]
    before &= placed  # one at the end follows what precedes it
    # In source order: a running maximum within each text (rows ascend, so one over the batch).
    width = tf.reduce_max(tf.concat([target_words, tf.zeros([1], tf.int64)], axis=0)) + 1
    keys = found.rows * width + slot  # [N]
    slot = tf.scan(tf.maximum, keys, initializer=tf.constant(-1, tf.int64)) - found.rows * width  # [N]
    # Words at 2j + 1, spans of slot k at 2k: one order; spans of one slot in source order (stable).
    word_rows = words.value_rowids()  # [W]
    word_index = tf.range(tf.size(word_rows, tf.int64), dtype=tf.int64) - tf.gather(words.row_starts(), word_rows)
    rows = tf.concat([word_rows, found.rows], axis=0)  # [T]
    order = tf.argsort(rows * 2 * width + tf.concat([2 * word_index + 1, 2 * slot], axis=0), stable=True)  # [T]
    words_false = tf.zeros_like(word_rows, tf.bool)  # [W]
    is_span = tf.gather(tf.concat([words_false, tf.ones_like(found.rows, tf.bool)], 0), order)  # [T]
    no_space_before = tf.gather(tf.concat([words_false, ~found.space_before], 0), order)  # [T]
    no_space_after = tf.gather(tf.concat([words_false, ~found.space_after], 0), order)  # [T]
    attached_before = tf.gather(tf.concat([words_false, before], 0), order)  # [T]
    emptied = tf.gather(tf.concat([tf.equal(words.flat_values, ""), tf.zeros_like(found.rows, tf.bool)], 0), order)
    tokens = tf.gather(tf.concat([words.flat_values, found.text], axis=0), order)  # [T]
    rows = tf.gather(rows, order)  # [T], ascending
    batch = tf.shape(text, out_type=tf.int64)[0]
    position = tf.range(tf.size(rows, tf.int64), dtype=tf.int64)  # [T]
    starts_row = position == tf.gather(tf.math.unsorted_segment_min(position, rows, batch), rows)  # [T]
    # No space between two tokens where the source has none: a span and the word it is attached to
    # on that side, or two spans that agree they were side by side.
    after_span = _previous(is_span, False)  # [T]
    two_spans = after_span & is_span & _previous(no_space_after, False) & no_space_before
    span_word = after_span & ~is_span & _previous(no_space_after & attached_before, False)
    word_span = ~after_span & is_span & no_space_before & ~attached_before
    glued = starts_row | two_spans | span_word | word_span | emptied  # [T]: no space before the token
    joined = tf.strings.unsorted_segment_join(tf.where(glued, "", " ") + tokens, rows, batch)  # [B]
    joined = tf.strings.strip(joined)  # a translation's first word, emptied, left the next one's space
    has_spans = tf.math.unsorted_segment_max(tf.ones_like(found.rows), found.rows, batch) > 0  # [B]
    return tf.where(has_spans, joined, translation)
