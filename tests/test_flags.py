"""The train flags come from the config dataclasses: one per field, today's names, unset by
default so that a preset's value stands, and no TensorFlow needed to parse them."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys

import pytest

from keras_transformer import config as config_module
from keras_transformer.cli.flags import add_config_flags, add_train_flags, configs, flag_name, overrides
from keras_transformer.config import Preset, TrainingConfig, TransformerConfig, setting

OLD_FLAGS = [
    "--max-steps", "7", "--steps-per-epoch", "5", "--batch-tokens", "512", "--warmup-steps", "10",
    "--learning-rate-scale", "3", "--time-budget", "1h30m", "--warmup-fraction", "0.2", "--cooldown-fraction", "0.3",
    "--seed", "9", "--num-layers", "2", "--d-model", "96", "--d-ff", "384", "--num-heads", "3", "--vocab-size", "500",
    "--max-length", "64", "--dropout", "0.2", "--label-smoothing", "0.05", "--no-norm-first", "--checkpoint-every", "4",
    "--grad-accumulation", "2", "--mixed-precision", "--jit-compile", "--bleu-every-epochs", "3",
]  # fmt: skip


def parse(*argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="small")
    add_train_flags(parser)
    args = parser.parse_args(argv)
    return configs(args, args.preset)


def test_every_config_field_has_a_flag():
    parser = argparse.ArgumentParser()
    add_train_flags(parser)
    flags = {option: action.dest for action in parser._actions for option in action.option_strings}
    for config_class in (TransformerConfig, TrainingConfig):
        for field in dataclasses.fields(config_class):
            assert flags[flag_name(field.name)] == field.name


def test_todays_flag_names_parse_and_override_the_preset():
    model, training = parse(*OLD_FLAGS)
    assert model == TransformerConfig.small(
        num_layers=2, d_model=96, d_ff=384, num_heads=3, vocab_size=500, max_length=64, dropout=0.2, norm_first=False,
    )  # fmt: skip
    assert training == TrainingConfig.preset(
        "small", max_steps=7, steps_per_epoch=5, batch_tokens=512, warmup_steps=10, learning_rate_scale=3.0,
        time_budget_s=5400.0, warmup_fraction=0.2, cooldown_fraction=0.3, seed=9, checkpoint_every=4,
        grad_accumulation=2, mixed_precision=True, jit_compile=True, bleu_every_epochs=3, label_smoothing=0.05,
    )  # fmt: skip


def test_the_architecture_options_parse_from_their_flags():
    model, _ = parse(
        "--num-layers", "2", "--num-encoder-layers", "3", "--num-decoder-layers", "1", "--ffn-activation", "swish",
        "--sinusoid-layout", "tensor2tensor", "--output-bias", "--start-from-zero-embedding",
    )  # fmt: skip
    assert model == TransformerConfig.small(
        num_layers=2, num_encoder_layers=3, num_decoder_layers=1, ffn_activation="swish",
        sinusoid_layout="tensor2tensor", output_bias=True, start_from_zero_embedding=True,
    )  # fmt: skip
    assert (model.encoder_depth, model.decoder_depth) == (3, 1)
    assert parse()[0].num_encoder_layers is None and not parse()[0].output_bias  # unset: the preset's
    with pytest.raises(SystemExit):
        parse("--ffn-activation", "gelu")  # argparse: invalid choice


def test_a_presets_value_stands_when_its_flag_is_not_given(monkeypatch):
    # The four flags that had defaults of their own (and so overrode every preset) included.
    recipe = dict(max_steps=70, seed=5, checkpoint_every=3, grad_accumulation=2, batch_tokens=256)
    monkeypatch.setitem(config_module.PRESETS, "custom", Preset(model=dict(d_model=32, num_heads=2), training=recipe))
    model, training = parse("--preset", "custom")
    assert model == TransformerConfig(d_model=32, num_heads=2) and training == TrainingConfig(**recipe)
    model, training = parse("--preset", "custom", "--seed", "6", "--d-model", "64")
    assert model.d_model == 64 and training == TrainingConfig(**{**recipe, "seed": 6})
    assert parse("--preset", "small") == (TransformerConfig.small(), TrainingConfig.preset("small"))


def test_a_new_field_gets_its_flag_with_no_edit():
    @dataclasses.dataclass(frozen=True)
    class Extra:
        valid_data: str | None = setting(None, "validation pairs")
        valid_pairs: int = setting(3000, "pairs scored, at most")
        wait_s: float = setting(1.0, "how long to wait")

    parser = argparse.ArgumentParser()
    add_config_flags(parser, Extra, "extra")
    assert "validation pairs" in parser.format_help()
    args = parser.parse_args(["--valid-data", "valid.tsv", "--wait", "2m"])
    assert overrides(args, Extra) == {"valid_data": "valid.tsv", "wait_s": 120.0}
    with pytest.raises(SystemExit):
        parser.parse_args(["--valid-pairs", "many"])


def test_the_flags_need_no_tensorflow():
    package = os.path.join(os.path.dirname(__file__), "..", "keras_transformer")
    code = (
        "import sys, types\n"
        # the package without its __init__, which imports the model
        f"package = types.ModuleType('keras_transformer'); package.__path__ = [{package!r}]\n"
        "sys.modules['keras_transformer'] = package\n"
        "import keras_transformer.cli.flags\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'keras')], 'imports TensorFlow'\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr


def test_every_flag_of_every_command_says_what_it_does():
    """Help text lives in the config fields' metadata (`config.setting`), where no formatter can
    erase it: no flag of any subcommand has an empty help or one that only repeats its name."""
    from keras_transformer.cli.main import parser

    subparsers = next(action for action in parser()._actions if isinstance(action, argparse._SubParsersAction))
    checked = 0
    for command, subparser in subparsers.choices.items():
        for action in subparser._actions:
            if not action.option_strings or action.help == argparse.SUPPRESS or action.dest == "help":
                continue
            name = action.option_strings[-1].lstrip("-").replace("-", " ")
            words = (action.help or "").lower().replace("_", " ").strip(" .")
            assert words and words != name and len(words.split()) >= 3, (
                f"{command} {action.option_strings}: {action.help!r}"
            )
            checked += 1
    assert checked > 100
    help_text = subparsers.choices["translate"].format_help()
    assert "--patience P|exact" in help_text and "round(P x K)" in help_text
    assert "--suppress-sequence TEXT" in help_text and "--no-repeat-ngram-size" in help_text


def test_an_export_never_generates_unk_unless_told_to():
    """New exports serve `disable_unk` (it cost no BLEU on the held-out verses); the flag's
    negation keeps `<unk>` a candidate, and translate keeps the Python default."""
    from keras_transformer.cli.export import export_decoding
    from keras_transformer.cli.main import parser

    args = parser().parse_args(["export", "--model-dir", "m", "--out", "o"])
    assert export_decoding(args).search.disable_unk is True
    args = parser().parse_args(["export", "--model-dir", "m", "--out", "o", "--no-disable-unk", "--beam-size", "2"])
    assert export_decoding(args).search.disable_unk is False and export_decoding(args).search.beam_size == 2
    assert parser().parse_args(["translate", "--model-dir", "m"]).disable_unk is None


@pytest.mark.parametrize(
    "backend, unit, wide",
    [("tensorflow", "amx_bf16", True), ("tensorflow", "avx512_bf16", True), ("tensorflow", None, False)]
    + [("jax", "amx_bf16", False)],  # the bfloat16 unit is TensorFlow's (oneDNN's)
)
def test_from_30_minutes_small_takes_dropout_by_steps_and_widens_where_tensorflow_runs_bfloat16_on_a_cpu(
    monkeypatch, backend, unit, wide
):
    import keras

    monkeypatch.setattr("keras_transformer.cli.flags.tensorflow_bfloat16_unit", lambda: unit)
    monkeypatch.setattr(keras.backend, "backend", lambda: backend)
    heard = []
    args = argparse.ArgumentParser()
    add_train_flags(args)
    model, training = configs(args.parse_args(["--time-budget", "30m"]), "small", log=heard.append)
    assert (model.d_model, model.d_ff, model.d_k, training.mixed_precision) == (
        (256, 1024, 64, True) if wide else (128, 512, 32, False)
    )
    assert (model.dropout, training.dropout_from_steps) == (0.1, 9000)  # dropout where the budget buys the steps
    assert (model.num_layers, training.batch_tokens, training.time_budget_s) == (3, 1024, 1800.0)
    where = f" with {unit.upper()}" if wide else ""
    taken = "dropout=0.1, d_model=256, d_ff=1024, dropout_from_steps=9000, mixed_precision=True"
    taken = taken if wide else "dropout=0.1, dropout_from_steps=9000"
    assert heard == [f"preset small, a budget of 30 minutes or more{where}: {taken}"]


@pytest.mark.parametrize("unit", ["amx_bf16", "avx512_bf16"])
def test_small_keeps_its_width_below_30_minutes_without_a_bfloat16_unit_and_where_a_flag_says(monkeypatch, unit):
    units = [unit]
    monkeypatch.setattr("keras_transformer.cli.flags.tensorflow_bfloat16", lambda: units[0])
    assert parse("--time-budget", "29m")[0] == TransformerConfig.small()  # `make demo`'s 6 minutes too
    assert parse("--max-steps", "100000") == (
        TransformerConfig.small(),
        TrainingConfig.preset("small", max_steps=100000),
    )
    assert parse("--time-budget", "2h")[0].d_model == 256
    model, training = parse("--time-budget", "2h", "--d-model", "192", "--no-mixed-precision", "--dropout", "0.2")
    assert (model.d_model, model.d_ff, model.dropout, training.mixed_precision) == (192, 1024, 0.2, False)  # flags win
    assert training.dropout_from_steps == 0  # a dropout given is the run's, whatever its steps
    units[0] = None
    assert parse("--time-budget", "2h") == (
        TransformerConfig.small(dropout=0.1),
        TrainingConfig.preset("small", time_budget_s=7200.0, dropout_from_steps=9000),
    )
    assert parse("--time-budget", "2h", "--dropout-from-steps", "20000")[1].dropout_from_steps == 20000
    assert parse("--preset", "tiny", "--time-budget", "2h")[0] == TransformerConfig.tiny()  # a preset without one
