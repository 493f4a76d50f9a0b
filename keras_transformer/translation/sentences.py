"""Documents as sentences: a text split into its sentences and the whitespace between them, the
sentences translated as one batch, the translations joined back with that whitespace, in order.

    sentences, separators = split(["Jesus wept. Then he said: \"Lazarus, come forth!\"\n\nAmen."])
    # sentences  [[b"Jesus wept.", b'Then he said: "Lazarus, come forth!"', b"Amen."]]
    # separators [[b" ", b"\n\n", b""]]  (a text = sentence 0 + separator 0 + sentence 1 + ...)
    join(translations, separators)  # -> [D] texts

The rule (`split`) is RE2 regular expressions run by tf.strings ops. A sentence ends
- after terminal punctuation (. ! ? …, and runs such as "?!" or "..."), with the closing quotes and
  brackets after it, where whitespace follows and the next character is not a lowercase letter
  ("He left... then came back" stays one sentence; a number's point, "3.14", has no space after it);
- but not after an abbreviation of `ABBREVIATIONS` ("Mr.", "Dr.", "e.g.") or an initial, one
  capital letter ("J. S. Bach"; so "in the U.S. Then" stays one sentence too);
- after a CJK full stop, exclamation or question mark (。！？, closing brackets after), whatever follows;
- at every line break.
Text without such an end is one sentence. The whitespace at a text's start and end and between
its sentences is kept as separators (an empty first sentence holds a text's leading whitespace).

With a tokenizer (`split(texts, tokenizer, max_length)`), a sentence of more source tokens than
a translation keeps (max_length - 1, EOS after them) is cut further (`_fit`), into pieces of at most
max_length - 2 tokens (one spare: a piece alone can take one token more than inside its sentence,
SentencePiece's dummy prefix), each cut at the best boundary of the tokens the piece may hold: the
last clause boundary (, ; : before a word; CJK ，；：、) past the window's first quarter, else the last
word boundary (a piece that starts with "▁"), else the last token boundary that is not inside a
character's UTF-8 bytes (byte-fallback pieces). No character is dropped: a text's sentences and
separators concatenate to it.

Why not a well-kept splitter: the one that runs in a TensorFlow graph, and so in the SavedModel,
is tensorflow-text's `StateBasedSentenceBreaker`, which breaks after every abbreviation and
initial ("Mr." | "Smith went", "Use e." | "g." | "this one.") and inside numbers and words ("It cost
3." | "14 dollars.", "Hello..." | "foo"), and takes no list of exceptions (tensorflow-text 2.21.1);
pySBD, NLTK's Punkt, spaCy and ICU's BreakIterator run in Python only (and none is installed).
One RE2 rule serves every path: `Translator.translate(..., split=True)` and the CLI run these ops
eagerly, the SavedModel's `translate_document` signature in its graph (tests/test_sentences.py
compares the two on the same texts).
"""

from __future__ import annotations

import tensorflow as tf

# Bytes that never occur in UTF-8 text (Python's str; the SavedModel repairs its input first):
# markers of a break between pieces, and of an abbreviation's point that ends no sentence.
_BREAK = b"\xff"
_KEEP = b"\xfe"
ABBREVIATIONS = ("Mr", "Mrs", "Ms", "Dr", "Prof", "Rev", "Sr", "Jr", "St", "Mt", "Gen", "Col", "Capt", "Lt", "Sgt")
ABBREVIATIONS += ("vs", "cf", "e.g", "i.e", "approx", "Fig", "No", "Nr", "Vol", "p", "pp")
_WS = r"[\s\p{Z}]"  # whitespace, Unicode's too (RE2's \s is ASCII)
_CLOSE = r"[\"'”’»」』）)\]}]"  # closing quotes and brackets after a sentence's end
_ABBREVIATION = rf"(^|[^\pL\pN_])((?:{'|'.join(a.replace('.', '[.]') for a in ABBREVIATIONS)}|\p{{Lu}})[.])"
_END = (  # groups 1-3: terminal punctuation, whitespace, the next character; 4-5: CJK; 6: a line break
    rf"([.!?…]+{_CLOSE}*)({_WS}+)([^\p{{Ll}}\s\p{{Z}}])"
    rf"|([。！？]+{_CLOSE}*)({_WS}*)"
    rf"|({_WS}*\n{_WS}*)"
)
_CLAUSE = r"(?s).*[,;:]"  # a piece that ends a clause (before a word)
_CJK_CLAUSE = r"(?s).*[，；：、。！？]"  # one that ends a CJK clause (no space after it)
_CONTINUATION = r"<0x[89AB][0-9A-F]>"  # a byte piece inside a character's UTF-8 bytes


def split(texts, tokenizer=None, max_length: int | None = None):
    """texts [D] strings -> (sentences [D, (k)], separators [D, (k)]) ragged strings, by the rule of
    the module docstring; with `tokenizer` (a `SubwordTokenizer`) and `max_length`, a sentence that a
    translation would truncate is cut further (`_fit`). Eager or in a graph."""
    texts = tf.convert_to_tensor(texts, tf.string)  # [D]
    marked = tf.strings.regex_replace(texts, _ABBREVIATION, b"\\1\\2" + _KEEP)
    marked = tf.strings.regex_replace(marked, _END, b"\\1\\4" + _BREAK + b"\\2\\5\\6" + _BREAK + b"\\3")
    marked = tf.strings.regex_replace(marked, f"^({_WS}+)", _BREAK + b"\\1" + _BREAK)  # leading whitespace
    marked = tf.strings.regex_replace(marked, f"({_WS}+)$", _BREAK + b"\\1" + _BREAK)  # trailing whitespace
    pieces = tf.strings.split(tf.strings.join([marked, _BREAK]), sep=_BREAK)  # [D, (2k)]: sentence, separator, ...
    values = tf.strings.reduce_join(tf.strings.split(pieces.flat_values, sep=_KEEP), axis=1)  # [2N]: points back
    values = tf.reshape(values, [-1, 2])  # [N, 2]
    rows = pieces.row_lengths() // 2  # [D]
    pairs = tf.RaggedTensor.from_row_lengths(values, rows)  # [D, (k), 2]
    pairs = tf.ragged.boolean_mask(pairs, tf.reduce_any(pairs != "", axis=-1))  # no empty sentence with nothing after
    sentences, separators = pairs[:, :, 0], pairs[:, :, 1]  # [D, (k)] each
    if tokenizer is None:
        return sentences, separators
    limit = max_length - 1 - (1 if tokenizer.target_langs else 0)  # tokens kept; a language's piece is one
    return _fit(sentences, separators, tokenizer, limit)


def join(translations, separators):
    """translations [N] (or [D, (k)]) of `split`'s sentences and its separators [D, (k)] -> [D] texts:
    each sentence's translation, then the separator after it."""
    if isinstance(translations, tf.RaggedTensor):
        translations = translations.flat_values
    pieces = tf.strings.join([tf.convert_to_tensor(translations, tf.string), separators.flat_values])  # [N]
    return tf.strings.reduce_join(separators.with_flat_values(pieces), axis=1)  # [D]


def _priorities(ids, starts, tokenizer):
    """ids, starts [N, (n)] -> [N, L] int32, how good a cut before each token is: 2 at a clause
    boundary, 1 at a word boundary, 0 between pieces of a word, -1 where no cut may go (a row's first
    token, padding, inside a character's bytes, a token that starts where the one before it does)."""
    pieces = tf.gather(tf.constant([tokenizer.piece(i) for i in range(tokenizer.vocab_size)]), ids)  # [N, (n)]
    flags = lambda pattern: pieces.with_flat_values(tf.strings.regex_full_match(pieces.flat_values, pattern))
    word = flags("▁(?s:.*)").to_tensor(False)  # [N, L]
    clause = flags(_CLAUSE).to_tensor(False)  # [N, L]
    cjk_clause = flags(_CJK_CLAUSE).to_tensor(False)  # [N, L]
    inside = flags(_CONTINUATION).to_tensor(False)  # [N, L]
    starts = starts.to_tensor(-1)  # [N, L]
    before = lambda x, fill: tf.pad(x[:, :-1], [[0, 0], [1, 0]], constant_values=fill)  # [N, L]: the token before's
    priority = tf.where((word & before(clause, False)) | before(cjk_clause, False), 2, tf.where(word, 1, 0))
    allowed = (starts > before(starts, tf.constant(-1, starts.dtype))) & ~inside & (starts > 0)
    return tf.where(allowed, priority, -1)  # [N, L]


def _cuts(priority, counts, limit: int, piece: int):
    """priority [N, L] (`_priorities`), counts [N] tokens -> [N, L] bool, the tokens before which a
    row of more than `limit` tokens is cut: while more than `piece` tokens remain after the last cut `p`
    (0 at first), the next cut goes to the best j in (p, p + piece] (see the module docstring), the
    latest of equals."""
    length = tf.shape(priority)[1]
    j = tf.range(length)[None, :]  # [1, L]

    def step(position, cut):  # [N], [N, L]
        active = (counts > limit) & (counts - position > piece)  # [N]
        offset = j - position[:, None]  # [N, L]
        window = (offset > 0) & (offset <= piece) & (priority >= 0)  # [N, L]
        early = (priority == 2) & (4 * offset < piece)  # a clause boundary in the window's first quarter: a word's
        score = tf.where(window, tf.where(early, 1, priority) * (length + 1) + j, -1)  # [N, L]
        best = tf.argmax(score, axis=1, output_type=tf.int32)  # [N]
        best = tf.where(tf.reduce_max(score, axis=1) >= 0, best, position + piece)  # no boundary at all: a forced cut
        best = tf.where(active, best, position)
        chosen = tf.one_hot(best, length, on_value=True, off_value=False, dtype=tf.bool) & active[:, None]
        return best, cut | chosen

    position = tf.zeros_like(counts)  # [N]
    cut = tf.zeros(tf.shape(priority), tf.bool)  # [N, L]
    _, cut = tf.while_loop(
        lambda position, _: tf.reduce_any((counts > limit) & (counts - position > piece)),
        step,
        [position, cut],
        parallel_iterations=1,
    )
    return cut


def _fit(sentences, separators, tokenizer, limit: int):
    """`split`'s (sentences, separators) with each sentence of more than `limit` source tokens cut into
    pieces of at most `limit - 1` (`_cuts`); the whitespace at a cut becomes the separator between
    its pieces. Eagerly, where no sentence is too long, they are returned as they are, without the
    cutting's ops (which would leave them so; run one by one, they took ~80% of a split of the
    793 held-out verses five to a line: issue 36)."""
    text = sentences.flat_values  # [N]
    ids, starts = tokenizer.source_offsets(text)  # [N, (n)] each
    counts = tf.cast(ids.row_lengths(), tf.int32)  # [N]
    if tf.executing_eagerly() and not tf.reduce_any(counts > limit):
        return sentences, separators
    cut = _cuts(_priorities(ids, starts, tokenizer), counts, limit, limit - 1)  # [N, L]
    dense_starts = starts.to_tensor(0)  # [N, L]
    at = tf.ragged.boolean_mask(dense_starts, cut)  # [N, (c)] bytes where a piece begins
    length = tf.cast(tf.strings.length(text), at.dtype)[:, None]  # [N, 1]
    column = lambda x: tf.RaggedTensor.from_tensor(x, row_splits_dtype=at.row_splits.dtype)
    begin = tf.concat([column(tf.zeros_like(length)), at], axis=1)  # [N, (c + 1)]
    end = tf.concat([at, column(length)], axis=1)  # [N, (c + 1)]
    row = begin.value_rowids()  # [M]: each piece's sentence
    piece = tf.strings.substr(tf.gather(text, row), begin.flat_values, end.flat_values - begin.flat_values)  # [M]
    lead = tf.strings.regex_replace(piece, rf"^({_WS}*)(?s:.*)$", r"\1")  # [M]
    trail = tf.strings.regex_replace(piece, rf"^(?s:.*?)({_WS}*)$", r"\1")  # [M]
    core = tf.strings.regex_replace(piece, rf"^{_WS}+|{_WS}+$", "")  # [M]
    next_row = tf.concat([row[1:], tf.constant([-1], row.dtype)], axis=0)[: tf.size(row)]  # [M]: the next's sentence
    following = tf.concat([lead[1:], [""]], axis=0)[: tf.size(row)]  # [M]: the next piece's leading whitespace
    separator = tf.gather(separators.flat_values, row)  # [M]: the sentence's own
    fits = tf.gather(counts, row) <= limit  # [M]: a sentence that fits stays as it is
    after = tf.where(fits, separator, tf.strings.join([trail, tf.where(next_row == row, following, separator)]))
    kept = tf.where(fits, piece, core)  # [M]
    per_text = sentences.with_flat_values(begin.row_lengths())  # [D, (k)]: pieces per sentence
    rows = tf.reduce_sum(per_text, axis=1)  # [D]
    return tf.RaggedTensor.from_row_lengths(kept, rows), tf.RaggedTensor.from_row_lengths(after, rows)
