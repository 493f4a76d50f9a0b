"""Dropout by the steps a run makes (`TrainingConfig.dropout_from_steps`). Dropout (Vaswani et al.,
2017, §5.4: P_drop on each sub-layer's output and on the embedding sums) pays once a model has seen
its data often enough to overfit it; in fewer steps it only slows learning
(bench/RESULTS.md, "The 30-minute recipe re-fitted: dropout by the steps a budget buys").

Where the steps are known before the model is built (`max_steps`, no time budget),
`dropout_for_steps` settles the model's rate. On a time budget they are known once the first steps
are timed (`callbacks.budget.TimeBudget`'s estimate): `dropout_off_below` hears it and turns the
built model's dropout off where it falls short.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import keras

from keras_transformer.config import TrainingConfig, TransformerConfig


def dropout_for_steps(
    config: TransformerConfig, training: TrainingConfig, log: Callable[[str], None]
) -> TransformerConfig:
    """`config` without dropout where a run with no time budget makes fewer steps in all
    (`max_steps`) than `training.dropout_from_steps`; else `config`."""
    if training.time_budget_s is None and config.dropout and training.max_steps < training.dropout_from_steps:
        steps, below = training.max_steps, training.dropout_from_steps
        log(f"dropout 0, not {config.dropout}: max_steps {steps} < dropout_from_steps {below}")
        return dataclasses.replace(config, dropout=0.0)
    return config


def dropout_off_below(model: keras.Model, from_steps: int, log: Callable[[str], None]) -> Callable[[float], None]:
    """`TimeBudget`'s `on_estimate` for `model`: below `from_steps` steps in all, no dropout for the
    rest of the run (`without_dropout`)."""

    def on_estimate(steps: float) -> None:
        rates = {layer.rate for layer in _dropout_layers(model)} - {0.0}
        if rates and steps < from_steps:
            log(f"dropout 0, not {max(rates)}: the budget buys ~{steps:.0f} steps < dropout_from_steps {from_steps}")
            without_dropout(model)

    return on_estimate


def without_dropout(model: keras.Model) -> None:
    """Sets every dropout layer of `model` to rate 0 and traces its training step again: the traced
    step holds the rates it was traced with, and `fit` calls `model.train_function` afresh at each
    step. The layers keep their seed generators (made for a rate above 0), so the model's variables,
    and its checkpoints, stay the same."""
    for layer in _dropout_layers(model):
        layer.rate = 0.0
    model.make_train_function(force=True)


def _dropout_layers(model: keras.Model) -> list[keras.layers.Dropout]:
    # Keras' walk over nested layers (private; keras is pinned in pyproject.toml).
    return [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.Dropout)]
