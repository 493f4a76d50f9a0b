import dataclasses
import re

import pytest

from keras_transformer import TrainingConfig, TransformerConfig


def test_presets_follow_table_3():
    base, big = TransformerConfig.base(), TransformerConfig.big()
    assert (base.num_layers, base.d_model, base.d_ff, base.num_heads, base.dropout) == (6, 512, 2048, 8, 0.1)
    assert (big.num_layers, big.d_model, big.d_ff, big.num_heads, big.dropout) == (6, 1024, 4096, 16, 0.3)
    assert base.label_smoothing == big.label_smoothing == 0.1
    assert base.d_k == big.d_k == 64
    assert (base.pad_id, base.start_id, base.eos_id) == (0, 1, 2)


def test_overrides_and_named_presets():
    assert TransformerConfig.base(vocab_size=37000).vocab_size == 37000
    assert TransformerConfig.preset("small", dropout=0.2) == TransformerConfig.small(dropout=0.2)
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        TransformerConfig.preset("huge")


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"d_model": 100, "num_heads": 8}, "divisible by num_heads"),
        ({"dropout": 1.0}, "dropout"),
        ({"vocab_size": 4}, re.escape("vocab_size must exceed the 4 reserved ids (pad, start, EOS, unknown), got 4")),
        ({"eos_id": 0}, re.escape("must be the tokenizer's reserved ids (0, 1, 2), got (0, 1, 0)")),
        (
            {"pad_id": 3},
            re.escape("(pad_id, start_id, eos_id) must be the tokenizer's reserved ids (0, 1, 2), got (3, 1, 2)"),
        ),
        ({"max_length": 1}, "max_length"),
    ],
)
def test_invalid_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerConfig.base(**overrides)


def test_dict_round_trip_and_unknown_fields():
    config = TransformerConfig.tiny()
    assert TransformerConfig.from_dict(config.to_dict()) == config
    with pytest.raises(ValueError, match="unknown TransformerConfig fields: colour"):
        TransformerConfig.from_dict({**config.to_dict(), "colour": "red"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 3


def test_training_config_validation():
    assert TrainingConfig().warmup_steps == 4000
    with pytest.raises(ValueError, match="batch_tokens"):
        TrainingConfig(batch_tokens=0)


def test_training_presets_paper_for_base_and_big_cpu_recipe_for_small():
    assert (
        TrainingConfig.preset("base")
        == TrainingConfig.preset("big")
        == TrainingConfig.preset("tiny")
        == TrainingConfig()
    )
    assert not TrainingConfig.preset("base").fits_schedule_to_budget  # Eq. 3 with warmup_steps 4000
    small = TrainingConfig.preset("small")
    assert small.fits_schedule_to_budget and small.batch_tokens < TrainingConfig().batch_tokens
    assert TrainingConfig.preset("small", batch_tokens=4096).batch_tokens == 4096  # overrides win
    assert (
        TransformerConfig.small().norm_first and not TransformerConfig.base().norm_first
    )  # the paper's post-LN by default
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        TrainingConfig.preset("huge")
