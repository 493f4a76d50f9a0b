"""Command-line flags generated from the config dataclasses, for every command and bench/.

Every field gets a flag named after it (`--d-model` for `d_model`; or its `metadata["flag"]`),
whose help is the field's `metadata["help"]` (`config.setting`) and whose default is unset, so
that the config's (or the preset's) value stands unless the flag is given. A boolean field gives
a pair (`--norm-first` / `--no-norm-first`); a field in seconds (`time_budget_s`) drops the
suffix and takes a duration (`--time-budget 30m`); a field's metadata may name its `parse`
function (text -> value), `choices` and `metavar`. A new field gets its flag with no edit here.

No TensorFlow here: the command line's help and argument errors come before TensorFlow starts.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import typing

from keras_transformer.config import (
    ALIGNMENT_LAYER_HELP,
    DECODING_PARTS,
    DataConfig,
    DecodingConfig,
    TrainingConfig,
    TransformerConfig,
    preset,
)
from keras_transformer.cpu import tensorflow_bfloat16_unit

SECONDS = "_s"  # the suffix of fields in seconds
METAVARS = {int: "N", float: "X", str: "TEXT"}
_DURATION = re.compile(r"^(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?(?:(\d+(?:\.\d+)?)s?)?$")


def parse_duration(text: str) -> float:
    """Seconds in "90", "90s", "30m", "2h" or "1h30m"."""
    match = _DURATION.match(text.strip().lower())
    if not text.strip() or not match or not any(match.groups()):
        raise ValueError(f"invalid duration {text!r}; use e.g. 90s, 30m, 2h or 1h30m")
    hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise ValueError(f"duration must be positive, got {text!r}")
    return total


def flag_name(field: str) -> str:
    """`d_model` -> `--d-model`; `time_budget_s` -> `--time-budget`."""
    return "--" + field.removesuffix(SECONDS).replace("_", "-")


def _checked(parse):
    """An argparse type that checks the text with `parse` and keeps the text (`overrides` parses it)."""

    def check(text: str) -> str:
        try:
            parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return text

    return check


def add_config_flags(parser: argparse.ArgumentParser, config_class, title: str, exclude: tuple[str, ...] = ()) -> None:
    """One flag per field of the dataclass `config_class` (but those in `exclude`), in an argument
    group called `title`."""
    group = parser.add_argument_group(title)
    hints = typing.get_type_hints(config_class)
    for field in dataclasses.fields(config_class):
        if field.name in exclude:
            continue
        value_type = next(t for t in (*typing.get_args(hints[field.name]), hints[field.name]) if t is not type(None))
        help_text = field.metadata["help"].replace("%", "%%")  # config.setting
        options = {"dest": field.name, "default": None}
        if "parse" in field.metadata:
            options.update(
                type=_checked(field.metadata["parse"]), metavar=field.metadata.get("metavar"), help=help_text
            )
        elif "choices" in field.metadata:
            options.update(choices=field.metadata["choices"], help=help_text)
        elif field.name.endswith(SECONDS):
            options.update(metavar="DURATION", help=f"{help_text}; e.g. 90s, 30m, 2h")
        elif typing.get_origin(hints[field.name]) is tuple:  # repeatable: one value each time
            options.update(action="append", metavar=field.metadata.get("metavar"), help=f"{help_text} (repeatable)")
        elif value_type is bool:
            options.update(action=argparse.BooleanOptionalAction, help=help_text)
        else:
            options.update(type=value_type, metavar=METAVARS.get(value_type), help=help_text)
        group.add_argument(field.metadata.get("flag") or flag_name(field.name), **options)


def overrides(args: argparse.Namespace, config_class) -> dict[str, typing.Any]:
    """The fields of `config_class` that the parsed `args` set (durations in seconds)."""
    values = {}
    for field in dataclasses.fields(config_class):
        value = getattr(args, field.name, None)
        if value is None:
            continue
        if "parse" in field.metadata:
            value = field.metadata["parse"](value)
        elif field.name.endswith(SECONDS):
            value = parse_duration(value)
        elif isinstance(value, list):  # a repeatable flag's values
            value = tuple(value)
        values[field.name] = value
    return values


def add_train_flags(parser: argparse.ArgumentParser) -> None:
    """The flags of every field of the model and training configs."""
    add_config_flags(parser, TransformerConfig, "model (TransformerConfig; default: the preset's)")
    add_config_flags(parser, TrainingConfig, "training (TrainingConfig; default: the preset's)")


RECIPE_CLASSES = (TransformerConfig, TrainingConfig, DataConfig)  # the settings a recipe file holds


def _recipe_value(field: dataclasses.Field, value):
    """A recipe's value for `field`: text parsed as its flag's would be (durations, `parse`)."""
    if isinstance(value, str) and "parse" in field.metadata:
        return field.metadata["parse"](value)
    if isinstance(value, str) and field.name.endswith(SECONDS):
        return parse_duration(value)
    return value


def read_recipe(path: str) -> dict[str, typing.Any]:
    """The settings of a recipe file, by field name (`train --config`): a YAML (.yaml, .yml) or
    JSON mapping whose keys are the `train` flags' names without dashes (`max_steps` or
    `max-steps`, `time_budget: 30m`, `preset: small`), or a model dir's config.json (its model,
    training and data settings, with the vocabulary size it asked for). Unknown keys are refused."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as error:
        raise ValueError(f"cannot read recipe {path}: {error.strerror}") from None
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml

            values = yaml.safe_load(text)
        else:
            values = json.loads(text)
    except Exception as error:  # yaml.YAMLError, json.JSONDecodeError
        raise ValueError(
            f"{path} is not valid {'YAML' if path.endswith(('.yaml', '.yml')) else 'JSON'}: "
            f"{str(error).splitlines()[0]}"
        ) from None
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a recipe is a mapping of settings, got {type(values).__name__}")
    if {"model", "training", "data_config"} <= set(values):  # a model dir's config.json
        model = dict(values["model"])
        model["vocab_size"] = values.get("requested_vocab_size", model.get("vocab_size"))
        values = {**model, **values["training"], **values["data_config"]}
    fields = {f.name: f for config_class in RECIPE_CLASSES for f in dataclasses.fields(config_class)}
    names = {flag_name(name)[2:].replace("-", "_"): name for name in fields} | {name: name for name in fields}
    settings, unknown = {}, []
    for key, value in values.items():
        name = names.get(str(key).replace("-", "_"))
        if key == "preset":
            settings["preset"] = value
        elif name is None:
            unknown.append(str(key))
        else:
            settings[name] = _recipe_value(fields[name], value)
    if unknown:
        raise ValueError(f"{path}: unknown settings: {', '.join(sorted(unknown))}")
    return settings


def recipe_settings(args: argparse.Namespace, config_class, recipe: dict[str, typing.Any]) -> dict[str, typing.Any]:
    """The fields of `config_class` that `recipe` sets, overridden by the flags given in `args`."""
    names = {f.name for f in dataclasses.fields(config_class)}
    return {**{k: v for k, v in recipe.items() if k in names}, **overrides(args, config_class)}


def configs(
    args: argparse.Namespace,
    preset_name: str,
    recipe: dict[str, typing.Any] | None = None,
    log: typing.Callable[[str], None] | None = None,
) -> tuple[TransformerConfig, TrainingConfig]:
    """The model and training settings of `preset_name` for this run (`Preset.budget_fit`: its time
    budget, and which CPU unit, if any, runs TensorFlow's bfloat16 here), overridden by `recipe`
    (`read_recipe`), then by the flags given in `args`. A dropout given is the run's whatever its
    steps (no `dropout_from_steps` but one given). `log` hears what the run's budget changed."""
    recipe = recipe or {}
    model, training = recipe_settings(args, TransformerConfig, recipe), recipe_settings(args, TrainingConfig, recipe)
    if "dropout" in model:
        training.setdefault("dropout_from_steps", 0)
    named = preset(preset_name)
    unit = tensorflow_bfloat16() if named.budget_fits else None
    fit = named.budget_fit(training.get("time_budget_s"), unit)
    chosen = named.with_fit(fit)
    if fit is not None and log is not None:
        given = {**model, **training}
        taken = [f"{name}={value}" for name, value in {**fit.model, **fit.training}.items() if name not in given]
        if taken:
            budget = f"a budget of {fit.min_budget_s / 60:g} minutes or more"
            budget += f" with {unit.upper()}" if unit else ""
            log(f"preset {preset_name}, {budget}: {', '.join(taken)}")
    return TransformerConfig(**{**chosen.model, **model}), TrainingConfig(**{**chosen.training, **training})


def tensorflow_bfloat16() -> str | None:
    """The CPU flag of the unit that runs this run's bfloat16 matmuls where it trains on TensorFlow
    (`keras_transformer.cpu`); None on other backends or where no unit does."""
    import keras

    return tensorflow_bfloat16_unit() if keras.backend.backend() == "tensorflow" else None


def parent_model_settings(model_dir: str) -> dict[str, typing.Any]:
    """The model settings of the model dir `model_dir` (its config.json), none where it has no
    config.json (fine-tuning then refuses it, naming what is missing)."""
    path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(path):
        return {}
    names = {f.name for f in dataclasses.fields(TransformerConfig)}
    return {name: value for name, value in read_recipe(path).items() if name in names}


def train_configs(
    args: argparse.Namespace, default_preset: str, log: typing.Callable[[str], None] | None = None
) -> tuple[TransformerConfig, TrainingConfig, DataConfig]:
    """`train`'s settings: `--preset` (else the recipe's, else `default_preset`), overridden by the
    `--config` recipe, then by the other flags given. Fine-tuning (`--init-from DIR`), the model's
    settings start from DIR's own (its config.json), so that a parent of any architecture (an
    import's) needs no flags to repeat it; a flag or recipe that asks for another is refused."""
    recipe = read_recipe(args.config) if args.config else {}
    init_from = overrides(args, TrainingConfig).get("init_from") or recipe.get("init_from")
    if init_from:
        recipe = {**parent_model_settings(init_from), **recipe}
    config, training = configs(args, args.preset or recipe.get("preset", default_preset), recipe, log)
    return config, training, DataConfig(**recipe_settings(args, DataConfig, recipe))


def add_decoding_flags(parser: argparse.ArgumentParser, exclude: tuple[str, ...] = ()) -> None:
    """The flags of every setting of `DecodingConfig`'s parts (but those in `exclude`), one group per part."""
    for name, part in DECODING_PARTS.items():
        add_config_flags(parser, part, f"decoding: {name} ({part.__name__}; the README's Decoding)", exclude)
    if "alignment_layer" not in exclude:
        parser.add_argument("--alignment-layer", type=int, metavar="N", help=ALIGNMENT_LAYER_HELP)


def decoding(args: argparse.Namespace) -> DecodingConfig:
    """The decoding settings, overridden by the flags given in `args`."""
    given = {name: value for part in DECODING_PARTS.values() for name, value in overrides(args, part).items()}
    if getattr(args, "alignment_layer", None) is not None:
        given["alignment_layer"] = args.alignment_layer
    return DecodingConfig(**given)
