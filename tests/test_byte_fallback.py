"""Unknown characters (issue 36 item 5): a vocabulary learned with SentencePiece's byte fallback
spells a character absent from its training text as UTF-8 byte pieces, and every path gives it
back: the tokenizer eagerly, in a graph, in tf.data and in a SavedModel, the Translator, the
CTranslate2 vocabulary; a vocabulary without it (every model dir of 0.1.x) drops it as before."""

import numpy as np
import pytest
import sentencepiece
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.data.tokenizer import BYTE_FALLBACK_MIN_VOCAB, SubwordTokenizer, TokenizerError
from keras_transformer.exporters.ctranslate2 import vocabulary
from keras_transformer.exporters.tensorflow import export_tensorflow
from keras_transformer.special_tokens import UNK_ID
from keras_transformer.translation.translator import Translator

# An emoji, a CJK name, rare symbols: none in the fixture's English and German verses.
UNSEEN = ["Jesus 🦜 wept.", "Der Name 山田太郎 steht hier.", "∑ ☃ ♞ ✓", "🦜"]


@pytest.fixture(scope="module")
def byte_tokenizer(fixture_pairs):
    sources, targets = fixture_pairs
    return SubwordTokenizer.train(sources + targets, BYTE_FALLBACK_MIN_VOCAB)


def texts(strings) -> list[str]:
    return [s.decode("utf-8") for s in strings.numpy()]


def test_a_vocabulary_of_1000_pieces_has_byte_fallback_and_a_smaller_one_not(byte_tokenizer, tokenizer, fixture_pairs):
    assert byte_tokenizer.byte_fallback and not tokenizer.byte_fallback  # the fixture's: 400 pieces
    pieces = [byte_tokenizer.piece(i) for i in range(byte_tokenizer.vocab_size)]
    assert [f"<0x{b:02X}>" in pieces for b in range(256)] == [True] * 256
    with pytest.raises(TokenizerError, match="byte fallback takes 256 pieces: it needs a vocab_size of 1000 or more"):
        SubwordTokenizer.train(fixture_pairs[0], 400, byte_fallback=True)


def test_unseen_characters_round_trip_eagerly_in_a_graph_and_in_tf_data(byte_tokenizer):
    ids = byte_tokenizer.tokenize(UNSEEN)  # [N, (n)]
    assert UNK_ID not in ids.flat_values.numpy()
    assert texts(byte_tokenizer.detokenize(ids.to_tensor())) == UNSEEN
    round_trip = tf.function(lambda s: byte_tokenizer.detokenize(byte_tokenizer.tokenize(s).to_tensor()))
    assert texts(round_trip(tf.constant(UNSEEN))) == UNSEEN
    batches = tf.data.Dataset.from_tensor_slices(UNSEEN).batch(2).map(byte_tokenizer.tokenize_source)
    assert [row for batch in batches for row in batch.to_list()] == byte_tokenizer.tokenize_source(UNSEEN).to_list()


@pytest.mark.slow
def test_unseen_characters_round_trip_through_the_exported_saved_model(byte_tokenizer, tmp_path):
    """The export (`export_tensorflow`, what `keras-transformer export` writes), reloaded from disk:
    its `translate_with_prefix` gives the unseen characters back at the start of each translation
    (the prefix tokenized in the graph into byte pieces, forced, detokenized with the continuation
    that an untrained model adds; an <unk> would be dropped)."""
    model = Transformer(TransformerConfig.tiny(vocab_size=byte_tokenizer.vocab_size, num_layers=1, max_length=32))
    model.build()
    paths = export_tensorflow(model, byte_tokenizer, str(tmp_path / "export"), log=lambda line: None, tflite=False)
    loaded = tf.saved_model.load(paths["saved_model"])
    sources = tf.constant(["Jesus wept."] * len(UNSEEN))
    continued = loaded.signatures["translate_with_prefix"](text=sources, prefix=tf.constant(UNSEEN))
    translations = texts(continued["translation"])
    assert [t[: len(u)] for t, u in zip(translations, UNSEEN)] == UNSEEN, translations


class Copier(Translator):
    """A translator whose search returns its source: what reaches the model comes back out."""

    def decode(self, source_ids, n=None, **_):
        source_ids = tf.convert_to_tensor(source_ids)  # [B, S]
        return tf.tile(source_ids[:, None, :], [1, n, 1]), tf.zeros([tf.shape(source_ids)[0], n])


def test_the_byte_pieces_reach_the_model_and_the_detokenizer_restores_them(byte_tokenizer, tokenizer):
    """A model that copies its source keeps the emoji (a tiny model trained here does not learn to
    copy byte pieces it never saw, so the search is scripted: `Copier`)."""
    model = Transformer(TransformerConfig.tiny(vocab_size=byte_tokenizer.vocab_size, max_length=32))
    copier = Copier(model, byte_tokenizer)
    source = copier.source_ids(["Jesus 🦜 wept."])[0]
    assert [byte_tokenizer.piece(i) for i in source if byte_tokenizer.piece(i).startswith("<0x")] == [
        "<0xF0>", "<0x9F>", "<0xA6>", "<0x9C>"
    ]  # fmt: skip
    assert copier.translate(UNSEEN) == UNSEEN
    old = Copier(Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, max_length=32)), tokenizer)
    assert old.translate("Jesus 🦜 wept.") == "Jesus wept."  # without byte fallback: <unk>, dropped, as before


def test_ctranslate2_and_sentencepiece_spell_and_restore_the_bytes(byte_tokenizer):
    """CTranslate2 works on piece strings: SentencePiece's byte pieces are tokens of its vocabulary."""
    processor = sentencepiece.SentencePieceProcessor(model_proto=byte_tokenizer.model_proto)
    tokens = set(vocabulary(byte_tokenizer, None))
    for text in UNSEEN:
        pieces = processor.encode(text, out_type=str)
        assert set(pieces) <= tokens and processor.decode(pieces) == text


def test_the_text_tflite_path_has_no_byte_fallback(byte_tokenizer):
    """tensorflow-text's fast tokenizer (the TFLite text model's) maps unseen characters to <unk>
    (translator.json says so); the other paths spell them as bytes."""
    lite, _ = byte_tokenizer.source_ids(["🦜"], 16, lite=True)
    full, _ = byte_tokenizer.source_ids(["🦜"], 16)
    assert UNK_ID in lite.numpy()[0] and UNK_ID not in full.numpy()[0]
    np.testing.assert_array_equal(
        byte_tokenizer.source_ids(["Jesus wept."], 16, lite=True)[0], byte_tokenizer.source_ids(["Jesus wept."], 16)[0]
    )
