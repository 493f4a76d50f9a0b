"""Boolean attention masks (True = may attend) and the fill value for masked logits (§3.2.3)."""

from __future__ import annotations

import ml_dtypes
from keras import ops


def masked_fill_value(dtype) -> float:
    """The most negative finite value of `dtype`: exp() of it underflows to 0 in that dtype.

    A literal such as -1e9 is not finite in float16; this is.
    """
    return float(ml_dtypes.finfo(dtype).min)  # ml_dtypes' finfo also knows bfloat16


def padding_mask(ids, pad_id: int):
    """[B, L] bool, True at real tokens."""
    return ops.not_equal(ids, pad_id)


def causal_mask(length):
    """[1, T, T] bool, True where query position i may attend to key position j <= i (§3.2.3)."""
    positions = ops.arange(length)
    return ops.expand_dims(ops.greater_equal(positions[:, None], positions[None, :]), axis=0)


def key_mask(key_padding):
    """[B, 1, S] bool from a [B, S] key padding mask: every query sees the same keys."""
    return ops.expand_dims(key_padding, axis=1)
