"""Casing and noise at training time (issue 36 item 4; `keras_transformer/data/augmentation.py`)."""

import dataclasses
import json
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import FIXTURE

from keras_transformer.config import DataConfig, TrainingConfig
from keras_transformer.data.augmentation import augmented, drop_and_swap, title_case, upper_case
from keras_transformer.data.batching import make_batches
from keras_transformer.data.mixing import training_pairs
from keras_transformer.data.sources import read_pairs

SHARES = ("uppercase_share", "titlecase_share", "source_noise")


def texts(tensor) -> list[str]:
    return [text.decode("utf-8") for text in tensor.numpy()]


def test_title_case_and_all_caps_of_every_script():
    assert texts(
        title_case(
            tf.constant(
                [
                    "the LORD's (holy) day, 1st of well-known",
                    "ärger über éTé ôter",
                    "  two  spaces\tand\u00a0a no-break space ",
                    "",
                    "中文 text «ÉCOLE»",
                ]
            )
        )
    ) == [
        "The Lord's (Holy) Day, 1st Of Well-known",
        "Ärger Über Été Ôter",
        "  Two  Spaces\tAnd\u00a0A No-break Space ",
        "",
        "中文 Text «École»",
    ]
    assert texts(title_case(tf.constant(["", ""]))) == ["", ""]
    assert texts(title_case(tf.constant(["ßtraße ﬁsh"]))) == ["Sstraße Fish"]
    assert texts(upper_case(tf.constant(["ärger über été, Ôter", "中文 text"]))) == [
        "ÄRGER ÜBER ÉTÉ, ÔTER",
        "中文 TEXT",
    ]


def train_pairs(**shares) -> tf.data.Dataset:
    return training_pairs(DataConfig(data=str(FIXTURE), **shares), seed=7, shuffle_buffer=10)


@pytest.fixture(scope="module")
def cased_tokenizer():
    """A vocabulary of the fixture's verses as they are, in ALL CAPS and in Title Case: every
    character of the pipeline's output is a piece, none is lost as unknown."""
    from keras_transformer.data.tokenizer import SubwordTokenizer

    sources, targets = read_pairs(str(FIXTURE), "train")
    plain = sources + targets
    cased = texts(upper_case(tf.constant(plain))) + texts(title_case(tf.constant(plain)))
    return SubwordTokenizer.train(plain + cased, 500)


@pytest.mark.parametrize("share, case", [("uppercase_share", upper_case), ("titlecase_share", title_case)])
def test_the_pipeline_with_share_1_cases_every_pair_on_both_sides(share, case, cased_tokenizer):
    """Through `training_pairs` and `make_batches` (the trainer's pipeline) to token ids, decoded back:
    every pair of the training split, each side cased."""
    sources, targets = read_pairs(str(FIXTURE), "train")
    batches = make_batches(
        train_pairs(**{share: 1.0}), cased_tokenizer, max_length=512, batch_tokens=4096, training=False
    )
    decoded = []
    for (source_ids, target_in), _ in batches:
        decoded += zip(texts(cased_tokenizer.detokenize(source_ids)), texts(cased_tokenizer.detokenize(target_in)))
    round_trip = lambda side: texts(cased_tokenizer.detokenize(cased_tokenizer.tokenize(case(side)).to_tensor()))  # noqa: E731
    expected = list(zip(round_trip(sources), round_trip(targets)))  # as the vocabulary spells them (no „: unknown)
    assert len(decoded) == len(sources) == 384
    assert sorted(decoded) == sorted(expected)
    assert sorted(decoded) != sorted(zip(sources, targets))


def pairs_of(stream) -> list[tuple[str, str]]:
    """The (source, target) pairs of `stream`, read in batches (a pair at a time costs ~1 ms each)."""
    batches = stream.batch(1000).as_numpy_iterator()
    return [(s.decode("utf-8"), t.decode("utf-8")) for sources, targets in batches for s, t in zip(sources, targets)]


def test_shares_are_drawn_per_pair_seeded_and_anew_every_pass():
    """3000 pairs at shares 0.3 and 0.3: about 30% of them in ALL CAPS and 30% in Title Case, source
    and target alike (3.5 standard deviations: 0.03); the same seed gives the same stream, another
    seed another, and the second pass over the split draws anew."""
    sources = [f"word{i} and ärger {i}" for i in range(3000)]
    targets = [f"wort{i} und ärger {i}" for i in range(3000)]
    pairs = tf.data.Dataset.from_tensor_slices((sources, targets))
    config = DataConfig(uppercase_share=0.3, titlecase_share=0.3)
    first, second = (pairs_of(augmented(pairs, config, seed=5).repeat(2).skip(n * 3000).take(3000)) for n in (0, 1))
    upper = [s == s.upper() and t == t.upper() for s, t in first]
    title = [s.startswith("Word") and t.startswith("Wort") and "Ärger" in s + t and s != s.upper() for s, t in first]
    originals = set(zip(sources, targets))
    plain = [(s, t) in originals for s, t in first]
    assert abs(np.mean(upper) - 0.3) < 0.03 and abs(np.mean(title) - 0.3) < 0.03
    assert sum(upper) + sum(title) + sum(plain) == 3000  # each pair one way, both sides alike
    assert [s.lower() for s, _ in first] == [s.lower() for s in sources]  # in order, nothing else changed
    assert first == pairs_of(augmented(pairs, config, seed=5))
    assert first != pairs_of(augmented(pairs, config, seed=6))
    assert first != second and [s.lower() for s, _ in second] == [s.lower() for s in sources]


def test_source_noise_drops_and_swaps_source_characters_only():
    """Rate 0.2 over 400 sources of 50 characters: ~10% of the characters dropped (within 2%),
    the rest the source's, neighbours swapped here and there; the targets as they are."""
    sources = ["".join(chr(0x61 + (i * 7 + j) % 26) for j in range(48)) + "äé" for i in range(400)]
    noised = texts(drop_and_swap(tf.constant(sources), 0.2, tf.constant([3, 4])))
    kept = sum(map(len, noised)) / sum(map(len, sources))
    assert abs(kept - 0.9) < 0.02
    assert all(set(out) <= set(source) for out, source in zip(noised, sources))
    assert sum(out != source for out, source in zip(noised, sources)) > 390
    assert any(not re.fullmatch(".*".join(map(re.escape, out)), source) for out, source in zip(noised, sources))
    assert noised == texts(drop_and_swap(tf.constant(sources), 0.2, tf.constant([3, 4])))
    assert texts(drop_and_swap(tf.constant(sources), 0.0, tf.constant([3, 4]))) == sources
    assert texts(drop_and_swap(tf.constant(["", ""]), 0.5, tf.constant([3, 4]))) == ["", ""]
    pairs = tf.data.Dataset.from_tensor_slices((sources, sources))
    noisy_pairs = pairs_of(augmented(pairs, DataConfig(source_noise=0.2), seed=1))
    assert [t for _, t in noisy_pairs] == sources and sum(s != t for s, t in noisy_pairs) > 390


def test_training_pairs_are_the_files_when_every_option_is_off():
    assert pairs_of(train_pairs()) == list(zip(*read_pairs(str(FIXTURE), "train")))


@pytest.mark.parametrize(
    "shares, message",
    [
        ({"uppercase_share": -0.1}, "uppercase_share must be in [0, 1], got -0.1"),
        ({"titlecase_share": 1.5}, "titlecase_share must be in [0, 1], got 1.5"),
        ({"uppercase_share": float("nan")}, "uppercase_share must be in [0, 1], got nan"),
        (
            {"uppercase_share": 0.7, "titlecase_share": 0.4},
            "uppercase_share + titlecase_share must be <= 1 (the shares of one draw), got 1.1",
        ),
        ({"source_noise": 1.0}, "source_noise must be in [0, 1), got 1.0"),
        ({"source_noise": -0.01}, "source_noise must be in [0, 1), got -0.01"),
    ],
)
def test_nonsense_shares_are_refused(shares, message, capsys, tmp_path):
    from keras_transformer.cli.main import main

    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        DataConfig(**shares)
    flags = [item for name, value in shares.items() for item in ("--" + name.replace("_", "-"), str(value))]
    assert main(["train", "--model-dir", str(tmp_path / "m"), *flags]) == 2
    assert capsys.readouterr().err.strip() == f"keras-transformer: error: {message}"
    assert not (tmp_path / "m").exists()


def test_the_flags_reach_the_data_config_and_config_json(tmp_path, tokenizer):
    """`train --uppercase-share 0.05 --titlecase-share 0.05 --source-noise 0.02` -> `DataConfig` ->
    config.json -> `ModelDir.read` and a `--config` recipe; a config.json without them (written
    before them) reads with them off; a resume that changes one says so."""
    from keras_transformer.cli.flags import read_recipe, train_configs
    from keras_transformer.cli.main import parser
    from keras_transformer.model_dir import ModelDir
    from keras_transformer.training.preparation import prepare_model_dir

    flags = ["--uppercase-share", "0.05", "--titlecase-share", "0.05", "--source-noise", "0.02"]
    args = parser().parse_args(["train", "--model-dir", str(tmp_path / "m"), *flags])
    config, training, data = train_configs(args, "tiny")
    assert {name: getattr(data, name) for name in SHARES} == dict(zip(SHARES, (0.05, 0.05, 0.02)))
    directory = ModelDir(str(tmp_path / "m"))
    config = dataclasses.replace(config, vocab_size=tokenizer.vocab_size)
    directory.write(config, training, data, tokenizer)
    assert directory.read()["data_config"] == data
    assert {name: read_recipe(directory.config_path)[name] for name in SHARES} == dict(zip(SHARES, (0.05, 0.05, 0.02)))
    stored = json.loads(open(directory.config_path, encoding="utf-8").read())
    assert {name: stored["data_config"][name] for name in SHARES} == dict(zip(SHARES, (0.05, 0.05, 0.02)))

    logged = []
    asked = dict(config=config, training=TrainingConfig(), log=logged.append)
    prepare_model_dir(directory, data=DataConfig(uppercase_share=0.1, titlecase_share=0.05, source_noise=0.02), **asked)
    assert logged == ["uppercase_share 0.1 (config.json, the first run's: 0.05)"]

    for name in SHARES:  # config.json as written before the options
        stored["data_config"].pop(name)
    with open(directory.config_path, "w", encoding="utf-8") as f:
        json.dump(stored, f)
    assert all(getattr(directory.read()["data_config"], name) == 0.0 for name in SHARES)
