"""`held_out`: the one reader of a model dir's held-out pairs (evaluate, export --check, bench/)."""

import dataclasses
import json

import pytest

from keras_transformer.config import DataConfig, TransformerConfig
from keras_transformer.data.errors import DataError
from keras_transformer.data.sources import read_pairs
from keras_transformer.model_dir.held_out import held_out


def model_dir(tmp_path, **data) -> str:
    """A model dir's config.json alone: what `held_out` reads."""
    values = {
        "model": TransformerConfig(vocab_size=64, d_model=8, num_heads=2, d_ff=16, num_layers=1).to_dict(),
        "training": {},
        "data_config": dataclasses.asdict(DataConfig(**data)),
    }
    (tmp_path / "config.json").write_text(json.dumps(values))
    return str(tmp_path)


def test_weighted_sources_read_the_first_sources_split(tmp_path):
    """`bible-en-de:0.3,...` is no file name: the first source's test split, as `read_pairs` reads it."""
    pairs = held_out(model_dir(tmp_path, data="bible-en-de:0.3,software-en-de:0.7"), "test", 5)
    assert (pairs.sources, pairs.references) == read_pairs("bible-en-de", "test", limit=5)
    assert (pairs.spec, pairs.split, pairs.target_lang) == ("bible-en-de", "test", None)


def test_a_reversed_model_reads_its_own_direction(tmp_path):
    forward = read_pairs("bible-en-de", "validation", limit=3)
    pairs = held_out(model_dir(tmp_path, data="bible-en-de", reverse=True), "validation", 3)
    assert (pairs.sources, pairs.references) == (forward[1], forward[0])


def test_a_multilingual_model_reads_the_source_of_its_target_language(tmp_path):
    directory = model_dir(tmp_path, data="bible-en-de,bible-en-fr")
    german, french = held_out(directory, limit=3), held_out(directory, limit=3, target_lang="fr")
    assert german.target_lang == "de" and german.references == read_pairs("bible-en-de", "test", limit=3)[1]
    assert french.target_lang == "fr" and french.references == read_pairs("bible-en-fr", "test", limit=3)[1]
    assert french.sources == german.sources  # the same English verses


def test_a_source_without_a_test_split_says_what_to_pass(tmp_path):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("a\tb\n")
    directory = tmp_path / "model"
    directory.mkdir()
    with pytest.raises(DataError, match="without --test-data: pass --data"):
        held_out(model_dir(directory, data=str(tsv), valid_data=str(tsv)), "test")
    assert held_out(str(directory), "validation").sources == ["a"]
