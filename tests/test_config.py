import dataclasses
import inspect
import re

import pytest

from keras_transformer import DecodingConfig, TrainingConfig, TransformerConfig
from keras_transformer.config import RuntimeSettings, SamplingSettings, SearchSettings


def test_presets_follow_table_3():
    base, big = TransformerConfig.base(), TransformerConfig.big()
    assert (base.num_layers, base.d_model, base.d_ff, base.num_heads, base.dropout) == (6, 512, 2048, 8, 0.1)
    assert (big.num_layers, big.d_model, big.d_ff, big.num_heads, big.dropout) == (6, 1024, 4096, 16, 0.3)
    assert TrainingConfig.preset("base").label_smoothing == TrainingConfig.preset("big").label_smoothing == 0.1
    assert base.d_k == big.d_k == 64


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
        ({"max_length": 1}, "max_length"),
        ({"num_encoder_layers": 0}, re.escape("num_encoder_layers must be >= 1 (or None: num_layers), got 0")),
        ({"num_decoder_layers": 0}, re.escape("num_decoder_layers must be >= 1 (or None: num_layers), got 0")),
        ({"ffn_activation": "gelu"}, "ffn_activation must be one of relu, swish, got 'gelu'"),
        (
            {"sinusoid_layout": "sin-cos"},
            "sinusoid_layout must be one of interleaved, halves, tensor2tensor, got 'sin-cos'",
        ),
        (
            {"sinusoid_layout": "tensor2tensor", "d_model": 2, "num_heads": 1},
            re.escape("sinusoid_layout tensor2tensor needs d_model >= 4 (two frequencies), got 2"),
        ),
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


def test_a_config_of_0_1_0_with_the_reserved_ids_and_label_smoothing_loads():
    legacy = {**TransformerConfig.tiny().to_dict(), "pad_id": 0, "start_id": 1, "eos_id": 2, "label_smoothing": 0.2}
    assert TransformerConfig.from_dict(legacy) == TransformerConfig.tiny()
    message = re.escape("(pad_id, start_id, eos_id) must be the tokenizer's reserved ids (0, 1, 2), got (3, 1, 2)")
    with pytest.raises(ValueError, match=message):
        TransformerConfig.from_dict({**legacy, "pad_id": 3})


def test_the_depths_default_to_num_layers():
    config = TransformerConfig.tiny(num_layers=2)
    assert (config.encoder_depth, config.decoder_depth) == (2, 2)
    deep_shallow = TransformerConfig.tiny(num_layers=2, num_encoder_layers=3, num_decoder_layers=1)
    assert (deep_shallow.encoder_depth, deep_shallow.decoder_depth) == (3, 1)
    assert dataclasses.replace(config, num_layers=4).encoder_depth == 4  # unset: follows num_layers


def test_a_config_without_the_architecture_options_loads_with_the_papers_defaults():
    """config.json and `.keras` files written before the options existed."""
    options = ("num_encoder_layers", "num_decoder_layers", "ffn_activation", "sinusoid_layout", "output_bias")
    old = {
        k: v for k, v in TransformerConfig.tiny().to_dict().items() if k not in {*options, "start_from_zero_embedding"}
    }
    config = TransformerConfig.from_dict(old)
    assert config == TransformerConfig.tiny()
    assert (config.ffn_activation, config.sinusoid_layout, config.output_bias) == ("relu", "interleaved", False)
    assert not config.start_from_zero_embedding and config.encoder_depth == config.decoder_depth == 2


def test_the_architecture_is_every_field_but_dropout():
    assert TransformerConfig.tiny(dropout=0.3).architecture() == TransformerConfig.tiny().architecture()
    assert TransformerConfig.tiny(d_ff=64).architecture() != TransformerConfig.tiny().architecture()
    assert set(TransformerConfig.tiny().architecture()) == set(TransformerConfig.tiny().to_dict()) - {"dropout"}
    unset = TransformerConfig.tiny(num_layers=2)
    assert TransformerConfig.tiny(num_layers=2, num_encoder_layers=2, num_decoder_layers=2).architecture() == (
        unset.architecture()
    )  # the same stacks
    assert TransformerConfig.tiny(num_layers=2, num_decoder_layers=1).architecture() != unset.architecture()
    for option in ({"ffn_activation": "swish"}, {"sinusoid_layout": "halves"}, {"output_bias": True}):
        assert TransformerConfig.tiny(**option).architecture() != TransformerConfig.tiny().architecture(), option
    assert TransformerConfig.tiny(start_from_zero_embedding=True).architecture() != unset.architecture()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"beam_size": 0}, "beam_size must be >= 1, got 0"),
        ({"alpha": -1.0}, "alpha must be >= 0, got -1.0"),
        ({"beam_size": 2, "nbest": 3}, "nbest must be between 1 and the beam size 2, got 3"),
        ({"beam_size": 4, "nbest": 1, "patience": 0.1}, re.escape("round(patience x beam_size) >= 1, got 0.1")),
        ({"beam_size": 4, "nbest": 3, "patience": 0.5}, re.escape("round(patience x beam_size) >= 3, got 0.5")),
        ({"max_decode_length": 0}, "max_decode_length must be >= 1, got 0"),
        ({"dtype": "float16"}, "dtype must be one of float32, bfloat16, got 'float16'"),
        ({"batch_size": 0}, "batch_size must be >= 1, got 0"),
        ({"length_b": 0}, "length_b must be >= 1, got 0"),
    ],
)
def test_invalid_decoding_configs_are_refused(overrides, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(**overrides)


@pytest.mark.parametrize(
    "bad",
    [
        {"beam_size": 0},
        {"alpha": -1.0},
        {"alpha": float("nan")},
        {"max_decoding_length": 0},
        {"min_decoding_length": -1},
        {"min_decoding_length": 5, "max_decoding_length": 5},
        {"repetition_penalty": 0.0},
        {"no_repeat_ngram_size": -1},
    ],
)
def test_an_exports_options_are_refused_with_the_python_settings_message(bad):
    """The ranges are stated once (`config.search_ranges`): a SavedModel's `translate_with_options`
    refuses a text's settings with the line `SearchSettings` raises, less its ", got" values."""
    import tensorflow as tf

    from keras_transformer.exporters.signatures import OPTIONS_SPECS, options_errors

    served = {"beam_size": 4, "alpha": 0.6, "max_decoding_length": 100, "min_decoding_length": 0,
              "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, **bad}  # fmt: skip
    per_text = [tf.constant([served[spec.name]], spec.dtype) for spec in OPTIONS_SPECS]
    error = options_errors(*per_text).numpy()[0].decode()  # [1]
    with pytest.raises(ValueError) as refused:
        SearchSettings(**bad)
    assert error and str(refused.value).startswith(f"{error}, got ")


def test_decoding_defaults_are_the_papers():
    decoding = DecodingConfig()  # §6.1
    search = decoding.search
    assert (search.beam_size, search.alpha, search.length_a, search.length_b) == (4, 0.6, 1.0, 50)
    assert DecodingConfig.greedy() == DecodingConfig(beam_size=1, alpha=0.0)
    assert DecodingConfig().replace(beam_size=2).search.beam_size == 2


def test_each_decoding_setting_has_one_owner_and_a_flat_name():
    """`DecodingConfig` is search, sampling (or none) and runtime settings; flat names route to
    their owner, and `to_dict` / `from_dict` keep translator.json's flat layout."""
    decoding = DecodingConfig(beam_size=2, sampling_topk=0, num_samples=3, dtype="bfloat16", repetition_penalty=1.2)
    assert decoding.search == SearchSettings(beam_size=2, repetition_penalty=1.2)
    assert decoding.sampling == SamplingSettings(sampling_topk=0, num_samples=3)
    assert decoding.runtime == RuntimeSettings(dtype="bfloat16")
    flat = decoding.to_dict()
    assert flat["beam_size"] == 2 and flat["num_samples"] == 3 and flat["dtype"] == "bfloat16"
    assert DecodingConfig.from_dict({**flat, "model_dirs": ["ignored"]}) == decoding
    assert DecodingConfig().sampling is None and DecodingConfig(sampling_topk=1).sampling is None
    assert DecodingConfig().to_dict()["sampling_topk"] == 1  # today's translator.json: sampling off
    assert decoding.replace(sampling_topk=1, num_samples=1).sampling is None
    with pytest.raises(ValueError, match="num_samples need sampling"):
        DecodingConfig(num_samples=2)
    with pytest.raises(ValueError, match="unknown decoding settings: beam"):
        DecodingConfig(beam=2)


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
