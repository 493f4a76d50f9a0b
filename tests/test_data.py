import gzip
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE

from keras_transformer.config import BIBLE_EN_DE, DataConfig
from keras_transformer.data.batching import SkippedPairs, bucket_batch_sizes, bucket_lengths, make_batches
from keras_transformer.data.errors import DataError, data_errors
from keras_transformer.data.sources import pairs_dataset, read_pairs
from keras_transformer.data.splits import WHOLE, split_source


def test_bucket_lengths_and_batch_sizes():
    assert bucket_lengths(256) == [8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256]
    assert bucket_lengths(100) == [8, 12, 16, 24, 32, 48, 64, 96, 100]
    sizes = bucket_batch_sizes(256, 4096)
    assert sizes[0] == 512 and sizes[-1] == 16
    assert all(b * n <= 4096 for b, n in zip(bucket_lengths(256), sizes))
    assert all(n % 4 == 0 for n in bucket_batch_sizes(256, 4096, batch_multiple=4))


def test_plain_tsv_is_split_in_contiguous_blocks(fixture_pairs):
    sizes = {split: len(read_pairs(str(FIXTURE), split)[0]) for split in ("train", "validation", "test")}
    assert sizes == {"train": 384, "validation": 8, "test": 8}
    sources, targets = read_pairs(str(FIXTURE), "test")
    assert sources == fixture_pairs[0][-8:] and targets == fixture_pairs[1][-8:]
    reversed_sources, _ = read_pairs(str(FIXTURE), "test", reverse=True)
    assert reversed_sources == targets


def test_embedded_bible_is_split_by_whole_books():
    train, validation, test = (read_pairs(BIBLE_EN_DE, s) for s in ("train", "validation", "test"))
    assert (len(train[0]), len(validation[0]), len(test[0])) == (30019, 290, 793)
    assert test[0][0].startswith("It happened in the days when the judges judged")  # Ruth 1:1
    assert not set(test[0]) & set(train[0][:1000])


def test_bible_layout_with_header_from_gzip(tmp_path):
    path = tmp_path / "mini.tsv.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write("book\tchapter\tverse\ten\tde\n1\t1\t1\tIn the beginning\tIm Anfang\n8\t1\t1\tRuth\tRut\n")
    assert read_pairs(str(path), "test") == (["Ruth"], ["Rut"])
    assert read_pairs(str(path), "train") == (["In the beginning"], ["Im Anfang"])


@pytest.mark.parametrize(
    "content, message",
    [
        ("a\tb\nonly one field\n", r"bad.tsv:2: expected 2 tab-separated fields \(source<TAB>target\), found 1"),
        ("a\tb\tc\n", r"bad.tsv:1: expected 2 .* found 3"),
        ("book\tchapter\tverse\ten\tde\nx\t1\t1\ta\tb\n", r"bad.tsv:2: book number 'x' is not an integer"),
    ],
)
def test_malformed_lines_name_the_line(tmp_path, content, message):
    path = tmp_path / "bad.tsv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=message):
        read_pairs(str(path), "train")


def test_missing_empty_and_binary_files(tmp_path):
    with pytest.raises(DataError, match="no such data file"):
        read_pairs(str(tmp_path / "missing.tsv"), "train")
    (tmp_path / "empty.tsv").write_text("\n")
    with pytest.raises(DataError, match="no sentence pairs"):
        read_pairs(str(tmp_path / "empty.tsv"), "train")
    (tmp_path / "binary.tsv").write_bytes(b"\xff\xfe\x00a\tb\n")
    with pytest.raises(DataError, match="not UTF-8"):
        read_pairs(str(tmp_path / "binary.tsv"), "train")
    with pytest.raises(DataError, match="unknown split"):
        read_pairs(str(FIXTURE), "dev")


def test_batches_are_bucketed_within_the_token_budget(tokenizer):
    batches = make_batches(
        pairs_dataset(str(FIXTURE), "train"), tokenizer, max_length=64, batch_tokens=256, training=False
    )
    seen = 0
    for (source, target_in), target_out in batches:
        width = source.shape[1]
        assert width in bucket_lengths(64)
        assert source.shape[0] * width <= 256
        assert target_in.shape == target_out.shape == source.shape
        s, ti, to = source.numpy(), target_in.numpy(), target_out.numpy()
        assert np.all(ti[:, 0] == 1)  # start
        lengths = (s != 0).sum(1)
        assert np.all(s[np.arange(len(s)), lengths - 1] == 2)  # source ends with EOS
        np.testing.assert_array_equal(ti[:, 1:], np.where(to[:, :-1] == 2, 0, to[:, :-1]))  # shifted by one
        seen += len(s)
    assert 300 < seen <= 384  # a few over-long pairs are dropped, nothing else


def test_batches_run_without_autotuning(tokenizer):
    """Its thread can hold up an iterator's destructor for a minute, in every epoch's validation."""
    for training in (False, True):
        batches = make_batches(
            pairs_dataset(str(FIXTURE), "train"), tokenizer, max_length=64, batch_tokens=256, training=training
        )
        assert batches.options().autotune.enabled is False


def test_overlong_pairs_are_dropped(tokenizer):
    pairs = tf.data.Dataset.from_tensor_slices((["short", "long " * 100], ["kurz", "lang"]))
    batches = list(make_batches(pairs, tokenizer, max_length=16, batch_tokens=64, training=False))
    assert sum(b[0][0].shape[0] for b in batches) == 1


def test_training_batches_repeat_with_fixed_shapes(tokenizer):
    batches = make_batches(
        pairs_dataset(str(FIXTURE), "train"), tokenizer, max_length=64, batch_tokens=256, training=True, seed=1
    )
    shapes = {tuple(b[0][0].shape) for b in batches.take(60)}  # more batches than one pass holds
    assert all(shape == (256 // shape[1], shape[1]) for shape in shapes)


def test_tfds_source_with_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=5):
        sources, targets = read_pairs("tfds:ted_hrlr_translate/pt_to_en", "validation", tfds_download=True)
    assert len(sources) == len(targets) == 5 and all(isinstance(s, str) for s in sources)


def test_unknown_tfds_name_is_a_data_error():
    with pytest.raises(DataError, match="cannot load tfds:no_such_dataset_xyz"):
        pairs_dataset("tfds:no_such_dataset_xyz", "train")


def write_tsv(path, pairs, header=None):
    text = "".join(f"{line}\n" for line in ([header] if header else []) + [f"{s}\t{t}" for s, t in pairs])
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(text)
    else:
        path.write_text(text, encoding="utf-8")
    return str(path)


def test_several_files_globs_and_gzip_stream_in_order(tmp_path):
    first = write_tsv(tmp_path / "part-0.tsv", [("a", "A"), ("b", "B")])
    write_tsv(tmp_path / "part-1.tsv.gz", [("c", "C")])
    write_tsv(tmp_path / "part-2.tsv", [("d", "D")])
    assert read_pairs(str(tmp_path / "part-*"), WHOLE) == (["a", "b", "c", "d"], ["A", "B", "C", "D"])
    assert read_pairs(f"{tmp_path}/part-2.tsv, {first}", WHOLE) == (["d", "a", "b"], ["D", "A", "B"])
    shuffled = pairs_dataset(str(tmp_path / "part-*"), WHOLE, shuffle_seed=3)
    passes = [sorted(s.decode() for s, _ in shuffled.as_numpy_iterator()) for _ in range(2)]
    assert passes == [["a", "b", "c", "d"]] * 2  # every pair once per pass, whatever the order of the files
    with pytest.raises(DataError, match=r"no data files match .*/nothing-\*"):
        read_pairs(str(tmp_path / "nothing-*"), WHOLE)
    message = f"{tmp_path}/part-*: several plain TSV files have no implicit train split; "
    message += "name the validation and test data (--valid-data, --test-data)"
    with pytest.raises(DataError, match=re.escape(message)):
        pairs_dataset(str(tmp_path / "part-*"), "train")


def test_the_stream_does_not_hold_the_corpus(tmp_path):
    """The dataset's graph reads the file: it does not embed its lines (as from_tensor_slices did)."""
    small = write_tsv(tmp_path / "small.tsv", [("a", "b")] * 10)
    large = write_tsv(tmp_path / "large.tsv", [(f"source sentence {i}", f"target sentence {i}") for i in range(50_000)])

    def graph_bytes(spec):
        return len(pairs_dataset(spec, "train")._as_serialized_graph().numpy())

    assert graph_bytes(small) < 50_000 and abs(graph_bytes(large) - graph_bytes(small)) < 16  # the line counts' digits
    assert len(read_pairs(large, "train")[0]) == 48_000


def test_invalid_utf8_names_the_file_and_line(tmp_path):
    path = tmp_path / "latin1.tsv"
    path.write_bytes(b"a\tb\n" * 2000 + "caf\u00e9\tCaf\u00e9\n".encode("latin-1") + b"c\td\n")
    with pytest.raises(DataError) as error:
        read_pairs(str(path), WHOLE)
    assert str(error.value) == f"{path}:2001: not UTF-8 text"
    with pytest.raises(DataError, match=re.escape(f"{path}:2001: not UTF-8 text")), data_errors():
        list(pairs_dataset(str(path), WHOLE).as_numpy_iterator())  # as model.fit reads it


def test_blank_lines_are_skipped_and_windows_line_ends_stripped(tmp_path):
    path = tmp_path / "crlf.tsv"
    path.write_bytes(b"a\tb\r\n\r\n  \nc\td\r\n")
    assert read_pairs(str(path), WHOLE) == (["a", "c"], ["b", "d"])


def test_hygiene_skips_and_counts_empty_long_and_lopsided_pairs(tokenizer):
    pairs = [
        ("And God said", "Und Gott sprach"),
        ("", "leer"),  # empty source
        ("empty target", ""),
        ("God " * 40, "Gott " * 40),  # too long for max_length 32
        ("Amen", "Und es geschah in jenen Tagen, dass Gott zu Mose redete"),  # one side many times the other
        ("Jesus wept.", "Jesus weinte."),
    ]
    skipped = SkippedPairs()
    dataset = tf.data.Dataset.from_tensor_slices(tuple(map(list, zip(*pairs))))
    batches = make_batches(
        dataset, tokenizer, max_length=32, batch_tokens=256, training=False, max_length_ratio=4.0, skipped=skipped
    )
    kept = sorted(tokenizer.detokenize(source).numpy()[0].decode() for (source, _), _ in batches.unbatch().batch(1))
    assert kept == ["And God said", "Jesus wept."]
    summary = "read 6 pairs, skipped 4: 2 with an empty side, 1 longer than 32 tokens, 1 with a length ratio above 4"
    assert skipped.summary(32, 4.0) == summary


def test_explicit_and_implicit_splits(tmp_path):
    plain = write_tsv(tmp_path / "plain.tsv", [("a", "b")])
    newstest = write_tsv(tmp_path / "newstest.tsv", [("c", "d")])
    bible = write_tsv(tmp_path / "bible.tsv", [("1\t1\t1\tx", "y")], header="book\tchapter\tverse\ten\tde")
    splits = lambda data: [split_source(data, s) for s in ("train", "validation", "test")]
    assert splits(DataConfig(plain)) == [(plain, "train"), (plain, "validation"), (plain, "test")]  # 96/2/2 blocks
    assert splits(DataConfig(plain, valid_data=newstest)) == [(plain, WHOLE), (newstest, WHOLE), None]
    assert splits(DataConfig(plain, valid_data=newstest, test_data=newstest))[2] == (newstest, WHOLE)
    assert splits(DataConfig(bible, valid_data=newstest)) == [(bible, "train"), (newstest, WHOLE), (bible, "test")]
    assert splits(DataConfig("tfds:wmt14_translate/de-en", test_data=bible)) == [
        ("tfds:wmt14_translate/de-en", "train"),
        ("tfds:wmt14_translate/de-en", "validation"),
        (bible, "test"),  # a Bible-layout file keeps its books' splits
    ]


def test_partial_evaluation_batches_split_evenly_across_replicas(tokenizer):
    """Rows of pad fill a partial batch up to a multiple of the replicas (an uneven first batch
    crashes Keras' symbolic build under tf.distribute)."""
    sources, targets = ["And God said", "Jesus wept.", "Amen"], ["Und Gott sprach", "Jesus weinte.", "Amen"]
    pairs = tf.data.Dataset.from_tensor_slices((sources, targets))
    batches = list(make_batches(pairs, tokenizer, max_length=32, batch_tokens=256, training=False, batch_multiple=4))
    assert all(source.shape[0] % 4 == 0 for (source, _), _ in batches)
    rows = np.concatenate([source.numpy() for (source, _), _ in batches])
    targets = np.concatenate([target_out.numpy() for _, target_out in batches])
    assert (rows.any(axis=1).sum(), targets.any(axis=1).sum()) == (3, 3)  # the other rows are all pad
