"""Casing and noise at training time (issue 36 item 4): a share of the training pairs is presented
in ALL CAPS and another in Title Case, on both sides alike, and (optionally) every source gets
light character noise. Marian's `--all-caps-every` and OpenNMT-py's `uppercase` transform do the
same for the same reason: such input is rare in the training text, and a model that never saw it
translates it badly.

Everything runs in the tf.data graph on the raw strings, before tokenization, in batches of
pairs. One uniform draw per pair picks its casing: below `uppercase_share` ALL CAPS, then up to
`uppercase_share + titlecase_share` Title Case, else as it is. The draws come from
`tf.data.Dataset.random(seed, rerandomize_each_iteration=True)`, one per batch of pairs, which
seeds the batch's stateless draws: the same seed gives the same stream, and every pass over a
finite split (`make_batches` repeats it) draws anew, so that a pair is not always presented alike.

Casing is Unicode's (`tf.strings.upper`/`lower` with the UTF-8 encoding: "ä" -> "Ä", "é" -> "É";
without it TensorFlow changes ASCII letters only). Title Case (`title_case`): in each word (a run
of characters between whitespace) the first cased letter is upper-cased when no letter or digit
precedes it in the word, every other letter lower-cased: "the LORD's (holy) day 1st" ->
"The Lord's (Holy) Day 1st" (Python's `str.title` gives "Lord'S" and "1St"); a letter whose upper
case is two ("ß" -> "SS", "ﬁ" -> "FI") starts its word with the first of them alone upper-cased.
"""

from __future__ import annotations

import tensorflow as tf

from keras_transformer.config import DataConfig

SETTINGS = ("uppercase_share", "titlecase_share", "source_noise")  # `DataConfig`'s fields of this module
PAIRS_PER_DRAW = 256  # pairs transformed together, one random seed per batch of them
_SPACE = r"[\s\p{Z}]"  # whitespace, Unicode's separators included (U+00A0, U+2009, ...)
_WORD_CHARACTER = r"[\p{L}\p{N}]"  # letters and digits of every script


def _shifted(values: tf.Tensor, first) -> tf.Tensor:
    """[T] -> [T]: each position holds its predecessor's value, the first `first` (also for T = 0)."""
    return tf.concat([[first], values], axis=0)[:-1]


def upper_case(texts: tf.Tensor) -> tf.Tensor:
    """ALL CAPS of UTF-8 strings (any shape), every script's letters."""
    return tf.strings.upper(texts, encoding="utf-8")


def title_case(texts: tf.Tensor) -> tf.Tensor:
    """Title Case of the UTF-8 strings `texts` [N] (see the module docstring), computed on their
    characters: word starts and letter counts as cumulative sums over the batch's characters."""
    characters = tf.strings.unicode_split(texts, "UTF-8")  # [N, (C)]
    flat = characters.flat_values  # [T]
    upper, lower = upper_case(flat), tf.strings.lower(flat, encoding="utf-8")  # [T]
    cased = tf.not_equal(upper, lower)  # a letter with an upper and a lower case
    space = tf.strings.regex_full_match(flat, _SPACE)  # [T]
    word_character = tf.cast(tf.strings.regex_full_match(flat, _WORD_CHARACTER), tf.int64)  # [T]
    position = tf.range(tf.size(flat, out_type=tf.int64))  # [T]
    row_start = tf.equal(position, tf.gather(characters.row_starts(), characters.value_rowids()))  # [T]
    after_space = _shifted(space, True)  # [T]
    word_start = tf.logical_not(space) & (row_start | after_space)  # [T]
    word = tf.cumsum(tf.cast(word_start, tf.int64))  # [T]: 1 for the first word, 0 before it
    before = tf.cumsum(word_character, exclusive=True)  # [T]: letters and digits before, in the batch
    at_word_start = tf.concat([[0], tf.boolean_mask(before, word_start)], axis=0)  # [W + 1]
    first = cased & tf.equal(before - tf.gather(at_word_start, word), 0)  # none before it in its word
    rest = tf.strings.lower(tf.strings.substr(upper, 1, 3, unit="UTF8_CHAR"), encoding="utf-8")  # "SS" of ß: "s"
    title = tf.strings.join([tf.strings.substr(upper, 0, 1, unit="UTF8_CHAR"), rest])  # [T]: "Ss", "Fi" of "ﬁ"
    return tf.strings.reduce_join(characters.with_flat_values(tf.where(first, title, lower)), axis=1)  # [N]


def drop_and_swap(texts: tf.Tensor, rate: float, seed: tf.Tensor) -> tf.Tensor:
    """Character noise on the UTF-8 strings `texts` [N]: each character is swapped with the next one
    of its text with probability rate / 2 (never two overlapping swaps), then dropped with
    probability rate / 2; `seed` [2] seeds the stateless draws."""
    characters = tf.strings.unicode_split(texts, "UTF-8")  # [N, (C)]
    flat = characters.flat_values  # [T]
    position = tf.range(tf.size(flat, out_type=tf.int64))  # [T]
    last = tf.equal(position, tf.gather(characters.row_limits(), characters.value_rowids()) - 1)  # [T]
    draws = tf.random.stateless_uniform([tf.size(flat), 2], seed)  # [T, 2]: swap, drop
    wants = (draws[:, 0] < rate / 2) & tf.logical_not(last)  # [T]: swap with the next character
    swap = wants & tf.logical_not(_shifted(wants, False))  # not when the one before swaps
    swapped = _shifted(swap, False)  # [T]: the one before swaps with it
    flat = tf.gather(flat, position + tf.cast(swap, tf.int64) - tf.cast(swapped, tf.int64))  # [T]
    kept = tf.ragged.boolean_mask(
        characters.with_flat_values(flat), characters.with_flat_values(draws[:, 1] >= rate / 2)
    )
    return tf.strings.reduce_join(kept, axis=1)  # [N]


def augment_pairs(
    sources: tf.Tensor,
    targets: tf.Tensor,
    seed: tf.Tensor,
    *,
    uppercase_share: float,
    titlecase_share: float,
    source_noise: float,
) -> tuple[tf.Tensor, tf.Tensor]:
    """(sources, targets) [N] with a share of the pairs in ALL CAPS and in Title Case on both sides,
    and the sources noised (`drop_and_swap`) at `source_noise`; `seed` [2] seeds the draws."""
    draw = tf.random.stateless_uniform(tf.shape(sources), seed)  # [N]: one per pair, both sides alike
    upper = draw < uppercase_share
    title = tf.logical_not(upper) & (draw < uppercase_share + titlecase_share)

    def cased(texts):  # [N]
        if uppercase_share:
            texts = tf.where(upper, upper_case(texts), texts)
        if titlecase_share:
            texts = tf.where(title, title_case(texts), texts)
        return texts

    sources, targets = cased(sources), cased(targets)
    if source_noise:
        sources = drop_and_swap(sources, source_noise, seed + tf.constant([0, 1], seed.dtype))
    return sources, targets


def augmented(pairs: tf.data.Dataset, data: DataConfig, seed: int) -> tf.data.Dataset:
    """The (source, target) stream `pairs` with `data`'s casing and noise (`uppercase_share`,
    `titlecase_share`, `source_noise`), seeded by `seed`; `pairs` itself when they are all off."""
    shares = {name: getattr(data, name) for name in SETTINGS}
    if not any(shares.values()):
        return pairs
    draws = tf.data.Dataset.random(seed=seed, rerandomize_each_iteration=True)  # one int64 per batch of pairs
    batches = tf.data.Dataset.zip(pairs.batch(PAIRS_PER_DRAW), draws)
    return batches.map(
        lambda batch, draw: augment_pairs(*batch, tf.stack([draw, tf.constant(seed, tf.int64)]), **shares)
    ).unbatch()
