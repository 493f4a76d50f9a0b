import re

import numpy as np
import pytest
import tensorflow as tf

from keras_transformer import Transformer, TransformerConfig
from keras_transformer.data.tokenizer import SubwordTokenizer, TokenizerError
from keras_transformer.plots.visualize import attention_maps, token_pieces
from keras_transformer.special_tokens import EOS_ID, PAD_ID, RESERVED_IDS, START_ID, UNK_ID
from keras_transformer.translation.translator import Translator

LONG = "In the beginning God created the heavens and the earth."


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
    np.testing.assert_array_equal(
        loaded.tokenize(["Jesus wept."]).flat_values, tokenizer.tokenize(["Jesus wept."]).flat_values
    )


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


def test_source_ids_keep_the_first_max_length_minus_1_tokens_then_eos(tokenizer):
    texts = tf.constant([LONG, "", "Jesus wept."])
    ids, counts = tokenizer.source_ids(texts, max_length=6)
    full = tokenizer.tokenize(texts)
    np.testing.assert_array_equal(counts.numpy(), full.row_lengths().numpy())  # before the cut; 0: empty
    ids = ids.numpy()
    assert ids.shape[1] == 6  # 5 tokens (max_length - 1), then EOS
    np.testing.assert_array_equal(ids[0], [*full[0][:5].numpy(), EOS_ID])
    np.testing.assert_array_equal(ids[1], [EOS_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID, PAD_ID])
    n = len(full[2])
    np.testing.assert_array_equal(ids[2, : n + 1], [*full[2].numpy(), EOS_ID])
    assert not ids[2, n + 1 :].any()


def test_translator_and_attention_maps_cut_a_long_source_alike(tokenizer):
    model = Transformer(TransformerConfig.tiny(vocab_size=tokenizer.vocab_size, max_length=6))
    model.build()
    first = [*tokenizer.tokenize([LONG])[0][:5].numpy(), EOS_ID]  # the first max_length - 1 tokens, then EOS
    assert Translator(model, tokenizer).source_ids([LONG])[0].tolist() == first
    assert attention_maps(model, tokenizer, LONG, target="Am Anfang").source_tokens == token_pieces(tokenizer, first)


def test_the_vocabulary_is_learned_from_a_uniform_sample_of_the_whole_stream():
    """A corpus whose head and tail use different letters: a sample of its head alone would never
    see the tail's, so they would map to the unknown id."""
    head = [f"alpha beta gamma delta {i}" for i in range(3000)]
    tail = [f"zulu yankee xray whisky {i}" for i in range(3000)]
    streamed = iter(head + tail)  # a generator: nothing but the sample is kept
    tokenizer = SubwordTokenizer.train(streamed, 60, sample_sentences=300, seed=1)
    assert UNK_ID not in tokenizer.tokenize(["zulu yankee", "alpha beta"]).flat_values.numpy()
    assert next(streamed, None) is None  # it read the whole stream


def test_an_error_of_the_stream_is_raised_as_it_is():
    def broken():
        yield "a sentence"
        raise ValueError("corpus.tsv:2: not UTF-8 text")

    with pytest.raises(ValueError, match="^corpus.tsv:2: not UTF-8 text$"):
        SubwordTokenizer.train(broken(), 50)


def test_an_existing_sentencepiece_model_with_other_reserved_ids_is_refused(tmp_path, fixture_pairs):
    import io

    import sentencepiece

    model = io.BytesIO()  # SentencePiece's defaults: unk 0, bos 1, eos 2, no pad
    texts = iter(fixture_pairs[0])
    sentencepiece.SentencePieceTrainer.train(sentence_iterator=texts, model_writer=model, vocab_size=100, minloglevel=2)
    path = tmp_path / "theirs.model"
    path.write_bytes(model.getvalue())
    message = "tokenizer reserves ids (pad, start, eos, unk) = (-1, 1, 2, 0), expected (0, 1, 2, 3)"
    with pytest.raises(TokenizerError, match=f"^{re.escape(message)}$"):
        SubwordTokenizer.load(str(path))


def test_subword_sampling_varies_the_segmentation_and_keeps_the_text(tokenizer, fixture_pairs):
    """Kudo (2018): each call samples a segmentation; every one detokenizes to the same text, and
    alpha 0 is the deterministic (most probable) one that inference uses."""
    sentence = tf.constant([fixture_pairs[0][0]])
    best = tokenizer.tokenize(sentence).to_list()[0]
    assert tokenizer.tokenize(sentence, alpha=0.0).to_list()[0] == best
    samples = [tuple(tokenizer.tokenize(sentence, alpha=0.1).to_list()[0]) for _ in range(20)]
    assert len(set(samples)) > 1 and any(list(sample) != best for sample in samples)
    for sample in set(samples):
        assert (
            tokenizer.detokenize(tf.constant([sample])).numpy()[0]
            == tokenizer.detokenize(tf.constant([best])).numpy()[0]
        )


def test_only_training_batches_sample_segmentations(tokenizer, fixture_pairs):
    from keras_transformer.data.batching import make_batches

    sources, targets = fixture_pairs
    pairs = tf.data.Dataset.from_tensor_slices((sources[:8], targets[:8]))
    best = {tuple(tokenizer.tokenize([s]).to_list()[0]) + (EOS_ID,): s for s in sources[:8]}

    def rows(training: bool, batches: int | None = None) -> list[tuple]:
        settings = dict(max_length=128, batch_tokens=256, shuffle_buffer=8, subword_alpha=0.1)
        stream = make_batches(pairs, tokenizer, training=training, **settings)
        stream = stream.take(batches) if batches else stream
        return [tuple(row[row != PAD_ID]) for (source, _), _ in stream.as_numpy_iterator() for row in source]

    assert sorted(rows(training=False)) == sorted(best)  # validation: the most probable segmentation
    sampled = rows(training=True, batches=12)
    assert len(sampled) >= 16 and any(row not in best for row in sampled)  # training: sampled anew
    texts = tokenizer.detokenize(tf.ragged.constant(sampled).to_tensor()).numpy()
    assert {text.decode() for text in texts} <= set(sources[:8])  # every sample is one of the sentences


@pytest.fixture(scope="module")
def two_models(fixture_pairs):
    """A tokenizer of two SentencePiece models over one vocabulary (OPUS-MT's layout, as the Marian
    import lays it out): English sources, German targets; and the two models it was made of."""
    from keras_transformer.importers.common import vocabulary

    sides = [SubwordTokenizer.train(texts, 200) for texts in fixture_pairs]
    pieces = ["</s>", "<unk>"]  # Marian's rows 0 and 1, then every other piece of either side
    for side in sides:
        pieces += [p for p in map(side.piece, range(len(RESERVED_IDS), side.vocab_size)) if p not in pieces]
    vocab = vocabulary(pieces, [(side.model_proto, f"{name}.spm") for side, name in zip(sides, ("source", "target"))])
    return SubwordTokenizer(vocab.model_proto, vocab.target_proto), sides


def test_two_models_tokenize_sources_with_the_source_pieces_and_targets_with_the_target_pieces(
    two_models, fixture_pairs, tmp_path
):
    """Each side segments as its own SentencePiece model (the same pieces, as ids of the one
    vocabulary); the target side decodes every piece, the source side's too; saved as two files."""
    tokenizer, (source, target) = two_models
    sources, targets = fixture_pairs[0][:50], fixture_pairs[1][:50]

    def pieces(rows, side=tokenizer):
        return [[side.piece(i) for i in row] for row in rows]

    def own(side, texts):  # as that side's SentencePiece model alone segments them
        return pieces(side.tokenize(texts).to_list(), side)

    assert pieces(tokenizer.tokenize_source(sources).to_list()) == own(source, sources)
    assert pieces(tokenizer.tokenize(targets).to_list()) == own(target, targets)
    assert own(source, targets) != own(target, targets)  # the two models segment apart
    ids, counts = tokenizer.source_ids(sources, max_length=512)
    assert pieces(row[:n] for row, n in zip(ids.numpy().tolist(), counts.numpy())) == own(source, sources)
    for texts, rows in ((targets, tokenizer.tokenize(targets)), (sources, tokenizer.tokenize_source(sources))):
        assert [text.decode() for text in tokenizer.detokenize(rows.to_tensor()).numpy()] == texts
    path = str(tmp_path / "tokenizer.model")
    assert tokenizer.save(path) == {"tokenizer": path, "target_tokenizer": str(tmp_path / "tokenizer.target.model")}
    loaded = SubwordTokenizer.load(path)
    assert (loaded.model_proto, loaded.target_proto) == (tokenizer.model_proto, tokenizer.target_proto)
    assert loaded.tokenize(targets).to_list() == tokenizer.tokenize(targets).to_list()
    assert source.save(path) == {"tokenizer": path}  # one model: the other file goes
    assert SubwordTokenizer.load(path).target_proto is None


def test_two_models_must_have_the_same_pieces(two_models):
    _, (source, target) = two_models
    with pytest.raises(TokenizerError, match="^the target side's SentencePiece model has other pieces"):
        SubwordTokenizer(source.model_proto, target.model_proto)
