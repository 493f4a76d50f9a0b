import gzip

import numpy as np
import pytest
import tensorflow as tf

from conftest import FIXTURE
from keras_transformer.data import (
    BIBLE_EN_DE,
    DataError,
    bucket_batch_sizes,
    bucket_lengths,
    make_batches,
    pairs_dataset,
    read_pairs,
)


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
        batches = make_batches(pairs_dataset(str(FIXTURE), "train"), tokenizer, max_length=64, batch_tokens=256, training=training)
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
        sources, targets = read_pairs("tfds:ted_hrlr_translate/pt_to_en", "validation")
    assert len(sources) == len(targets) == 5 and all(isinstance(s, str) for s in sources)


def test_unknown_tfds_name_is_a_data_error():
    with pytest.raises(DataError, match="cannot load tfds:no_such_dataset_xyz"):
        pairs_dataset("tfds:no_such_dataset_xyz", "train")
