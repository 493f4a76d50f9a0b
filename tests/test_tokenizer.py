import numpy as np
import pytest
import tensorflow as tf

from keras_transformer.tokenizer import EOS_ID, PAD_ID, START_ID, UNK_ID, SubwordTokenizer, TokenizerError


def test_round_trip_on_corpus_text(tokenizer, fixture_pairs):
    texts = fixture_pairs[0][:20] + fixture_pairs[1][:20]
    ids = tokenizer.tokenize(texts)
    assert ids.dtype == tf.int32
    decoded = [t.decode("utf-8") for t in tokenizer.detokenize(ids.to_tensor()).numpy()]
    assert decoded == texts  # spaces and punctuation restored exactly


def test_reserved_ids_are_never_produced(tokenizer, fixture_pairs):
    flat = tokenizer.tokenize(fixture_pairs[1]).flat_values.numpy()
    assert not np.isin(flat, [PAD_ID, START_ID, EOS_ID]).any()


def test_empty_unknown_and_very_long_inputs(tokenizer):
    ids = tokenizer.tokenize(["", "🦜 ∑ 日本語", "and " * 5000])
    assert ids.row_lengths().numpy()[0] == 0
    assert UNK_ID in ids[1].numpy()  # unseen characters map to the unknown id...
    assert tokenizer.detokenize(ids[1:2].to_tensor()).numpy()[0] == b""  # ...which decoding drops
    assert ids.row_lengths().numpy()[2] >= 5000
    assert tokenizer.detokenize(ids[2:3].to_tensor()).numpy()[0].decode().startswith("and and")


def test_detokenize_stops_at_eos_and_drops_start_and_pad(tokenizer):
    ids = tokenizer.tokenize(["And God said"]).to_tensor().numpy()[0]
    row = np.concatenate([[START_ID], ids, [EOS_ID], ids, [PAD_ID]])[None].astype(np.int32)
    assert tokenizer.detokenize(row).numpy()[0] == b"And God said"


def test_save_and_load(tokenizer, tmp_path):
    path = str(tmp_path / "tokenizer.model")
    tokenizer.save(path)
    loaded = SubwordTokenizer.load(path)
    assert loaded.vocab_size == tokenizer.vocab_size
    np.testing.assert_array_equal(loaded.tokenize(["Jesus wept."]).flat_values, tokenizer.tokenize(["Jesus wept."]).flat_values)


def test_bad_files_get_clear_errors(tmp_path):
    with pytest.raises(TokenizerError, match="cannot read tokenizer"):
        SubwordTokenizer.load(str(tmp_path / "missing.model"))
    corrupt = tmp_path / "corrupt.model"
    corrupt.write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="not a SentencePiece model"):
        SubwordTokenizer.load(str(corrupt))


def test_tokenizer_runs_inside_a_graph(tokenizer):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(texts):
        return tokenizer.detokenize(tokenizer.tokenize(texts).to_tensor())

    assert round_trip(tf.constant(["Jesus wept."])).numpy()[0] == b"Jesus wept."
