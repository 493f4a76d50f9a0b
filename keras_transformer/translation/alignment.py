"""Word alignments from the decoder's cross-attention (Garg et al., 2019), in Pharaoh format.

Each output token y_t aligns to the source token that the cross-attention of one decoder layer,
averaged over its h heads (§3.2.2), weighs most at the step that produces y_t (its row of
`Transformer.attention_weights` in a teacher-forced pass of the chosen hypothesis, which equals
the search's cached steps; an ensemble's rows are the mean of its models': the decoding
protocol's `cross_attention`). Garg et al. (2019)
found the penultimate layer's attention the best aligner: `DecodingConfig.alignment_layer`
-2 by default; negative layers count from the top and stop at the first layer, so that a
one-layer model aligns by its only layer.

Words are the whitespace-separated words of the detokenized texts. A subword whose
SentencePiece piece begins with the word-start marker "▁" starts a word, the others continue
the one before; reserved ids (EOS, pad, unknown) belong to no word, and a word that shows no
character (the bare marker, or unknown characters only: detokenized to nothing) is not counted.
A target word aligns to the source word that the most of its subwords point at (a tie: its first
subword's), never to a source EOS.

Pharaoh format: "i-j" for every target word j, in target order, with i its source word, both
counted from 0 and separated by spaces ("0-0 2-1 1-2"). All in TensorFlow ops, so that
`Translator.translate_with_alignments` and the SavedModel's `translate_with_alignments`
signature run the same graph.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import sentencepiece
import tensorflow as tf

from keras_transformer.special_tokens import RESERVED_IDS, START_ID

WORD_START = "\u2581"  # SentencePiece's "▁"


class Pieces(NamedTuple):
    """Per vocabulary id, [V] bool: what the word mapping reads of a piece."""

    starts: np.ndarray  # begins a word (its piece begins with "▁")
    visible: np.ndarray  # shows a character in the detokenized text (not reserved, not the bare "▁")
    reserved: np.ndarray  # a reserved id (pad, start, EOS, unknown): in no word


def pieces(tokenizer) -> Pieces:
    """The `Pieces` of a `SubwordTokenizer`'s vocabulary."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=tokenizer.model_proto)
    texts = [processor.id_to_piece(i) for i in range(processor.get_piece_size())]
    reserved = np.isin(np.arange(len(texts)), RESERVED_IDS)
    starts = np.array([text.startswith(WORD_START) for text in texts]) & ~reserved
    visible = np.array([text.strip(WORD_START) != "" for text in texts]) & ~reserved
    return Pieces(starts, visible, reserved)


def token_words(ids, table: Pieces):
    """ids [B, L] -> (the word of every token [B, L] int32, -1 for none; the words of each row [B])."""
    ids = tf.cast(ids, tf.int32)  # [B, L]
    batch, length = tf.shape(ids)[0], tf.shape(ids)[1]
    starts = tf.gather(tf.constant(table.starts), ids)  # [B, L]
    # Every token's word slot: the count of word starts up to it (a continuation before any start joins the first).
    slot = tf.maximum(tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1, 0)  # [B, L]
    shows = tf.cast(tf.gather(tf.constant(table.visible), ids), tf.int32)  # [B, L]
    flat_slot = slot + tf.range(batch)[:, None] * length  # [B, L], unique across rows
    counted = tf.maximum(tf.math.unsorted_segment_max(shows, flat_slot, batch * length), 0)  # [B * L]
    counted = tf.reshape(counted, [batch, length])  # [B, L]: 1 where slot k holds a word that shows
    rank = tf.cumsum(counted, axis=1, exclusive=True)  # [B, L]: slot k's word number
    in_word = ~tf.gather(tf.constant(table.reserved), ids) & (tf.gather(counted, slot, batch_dims=1) > 0)  # [B, L]
    return tf.where(in_word, tf.gather(rank, slot, batch_dims=1), -1), tf.reduce_sum(counted, axis=1)


def align_words(attention, source_ids, target_ids, table: Pieces):
    """attention [B, T, S] (row t: the step producing target_ids[:, t]), source_ids [B, S],
    target_ids [B, T] -> Pharaoh strings [B] over the words of source and target."""
    source_word, source_words = token_words(source_ids, table)  # [B, S], [B]
    target_word, target_words = token_words(target_ids, table)  # [B, T], [B]
    length, width = tf.shape(target_ids)[1], tf.shape(source_ids)[1]
    scores = tf.where(source_word[:, None, :] >= 0, attention, float("-inf"))  # [B, T, S]: source words only
    points = tf.gather(source_word, tf.argmax(scores, axis=-1, output_type=tf.int32), batch_dims=1)  # [B, T]
    members = tf.one_hot(target_word, length)  # [B, T, J]: token t is in target word j (none for -1)
    votes = tf.one_hot(points, width)  # [B, T, I]: token t points at source word i
    counts = tf.einsum("btj,bti->bji", members, votes)  # [B, J, I]
    first = tf.argmax(members, axis=1, output_type=tf.int32)  # [B, J]: each word's first subword
    tie_break = 0.5 * tf.gather(votes, first, batch_dims=1)  # [B, J, I], less than one vote
    source_of = tf.argmax(counts + tie_break, axis=-1, output_type=tf.int32)  # [B, J]
    pairs = tf.strings.as_string(source_of) + "-" + tf.strings.as_string(tf.range(length))  # [B, J]
    aligned = tf.where(source_words > 0, target_words, 0)  # [B]: a source of no word aligns nothing
    kept = tf.ragged.boolean_mask(pairs, tf.sequence_mask(aligned, length))  # [B, (words)]
    return tf.strings.reduce_join(kept, axis=1, separator=" ")  # [B]


def alignments(model, source_ids, target_ids, table: Pieces, layer: int):
    """source_ids [B, S] and one hypothesis per source, target_ids [B, T] (tokens, EOS, pads as the
    search returns them) -> Pharaoh strings [B], by the cross-attention of decoder layer `layer`."""
    target_ids = tf.cast(target_ids, tf.int32)  # [B, T]
    start = tf.fill([tf.shape(target_ids)[0], 1], START_ID)  # [B, 1]
    target_in_ids = tf.concat([start, target_ids[:, :-1]], axis=1)  # [B, T], shifted right
    attention = model.cross_attention(source_ids, target_in_ids, layer)  # [B, T, S], the decoding protocol
    return align_words(attention, source_ids, target_ids, table)


def parse_pharaoh(text: str) -> list[tuple[int, int]]:
    """ "0-0 2-1" -> [(0, 0), (2, 1)]: (source word, target word) pairs."""
    return [tuple(int(index) for index in pair.split("-")) for pair in text.split()]


def format_pharaoh(pairs) -> str:
    """[(0, 0), (2, 1)] -> "0-0 2-1"."""
    return " ".join(f"{i}-{j}" for i, j in pairs)
