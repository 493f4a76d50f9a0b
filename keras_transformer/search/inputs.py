"""What one search reads besides its sources, in one structure from the entry point to the loop.

`SearchInputs` holds a call's tensors (a target prefix, constraint phrases, a vocabulary
shortlist's arrays); `beam_search` and `sample` trace one search per set of inputs given, with
the structure itself as the traced function's input (absent inputs are `()`, no tensors), and the
search turns it into its modifiers (`modifiers`): the inputs' (`Prefix`, `Constraints`), the
settings' controls (`controls.py`), then the user's own (`search.Modifier` instances, constants
of the traced graph). `limits` gives the search's four length settings, read in one place.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow as tf

from keras_transformer.config import DecodingConfig
from keras_transformer.data.shortlist import Shortlist
from keras_transformer.search.constraints import CONSTRAINTS_SPEC, Constraints, check_constraints
from keras_transformer.search.controls import controls
from keras_transformer.search.prefix import PREFIX_SPEC, Prefix, check_prefix
from keras_transformer.search.search import Modifier
from keras_transformer.search.shortlist import FREQUENT_SPEC, TABLE_SPEC


class SearchInputs(NamedTuple):
    """A search's per-call tensors, each None when not given: `target_prefix` [B, P] int32
    (`prefix.py`), `constraints` [B, C, T] int32 (`constraints.py`), `shortlist` a
    `data.shortlist.Shortlist` (`shortlist.py`)."""

    target_prefix: Any = None
    constraints: Any = None
    shortlist: Any = None

    def checked(self, batch: int) -> SearchInputs:
        """Eagerly: the prefix and phrases checked against a batch of `batch` sentences (a ValueError
        for a wrong shape or a reserved id); in a graph, as they are."""
        if not tf.executing_eagerly():
            return self
        prefix, constraints = self.target_prefix, self.constraints
        return self._replace(
            target_prefix=None if prefix is None else check_prefix(prefix, batch),
            constraints=None if constraints is None else check_constraints(constraints, batch),
        )

    def given(self) -> bool:
        return any(value is not None for value in self)

    def structure(self) -> SearchInputs:
        """The tensors of a traced search's input: () where absent, a shortlist as (table, frequent)."""
        shortlist = () if self.shortlist is None else (self.shortlist.table, self.shortlist.frequent)
        return SearchInputs(*(() if value is None else value for value in self[:2]), shortlist)

    def spec(self) -> SearchInputs:
        """The `tf.TensorSpec`s of `structure`."""
        specs = (PREFIX_SPEC, CONSTRAINTS_SPEC, (TABLE_SPEC, FREQUENT_SPEC))
        return SearchInputs(*(() if value is None else spec for value, spec in zip(self, specs)))

    @classmethod
    def of(cls, structure: SearchInputs) -> SearchInputs:
        """The inputs of a `structure` (inside the traced search)."""
        prefix, constraints, shortlist = (
            None if isinstance(value, tuple) and not value else value for value in structure
        )
        return cls(prefix, constraints, None if shortlist is None else Shortlist(*shortlist))

    def modifiers(self, decoding: DecodingConfig, suppress_ids=(), user: tuple = ()) -> tuple[Modifier, ...]:
        """The search's modifiers: the inputs', the settings' controls (`suppress_ids`: the
        suppressed sequences as ids), then `user`'s."""
        given = []
        if self.target_prefix is not None:
            given.append(Prefix(self.target_prefix))
        if self.constraints is not None:
            given.append(Constraints(self.constraints))
        return (*given, *controls(decoding.search, suppress_ids), *user)


def limits(decoding: DecodingConfig) -> dict:
    """`search.search`'s length settings of `decoding`: the per-sentence limit a |x| + b, its cap
    `max_decoding_length` and the static output length `max_decode_length`."""
    settings = decoding.search
    return dict(
        length_a=settings.length_a,
        length_b=settings.length_b,
        max_decoding_length=settings.max_decoding_length,
        max_decode_length=decoding.runtime.max_decode_length,
    )


def user_modifiers(modifiers) -> tuple[Modifier, ...]:
    """`modifiers` as a tuple of `search.Modifier` instances, or a one-line ValueError."""
    modifiers = tuple(modifiers or ())
    for modifier in modifiers:
        if not isinstance(modifier, Modifier):
            raise ValueError(f"a modifier must be a keras_transformer.Modifier instance, got {modifier!r}")
    return modifiers
