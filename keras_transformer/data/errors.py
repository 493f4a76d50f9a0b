"""`DataError`, and the checks of the stream that raise it with a file and line number."""

from __future__ import annotations

import codecs
import contextlib
import re

import tensorflow as tf

CHECK_MARK = "DataError: "  # starts the message of every check of the stream, so `data_errors` knows its own


_ASSERTION = re.compile(r"assertion failed: \[" + re.escape(CHECK_MARK) + r"(.*?)\]\n", re.S)


class DataError(ValueError):
    """Parallel text that cannot be read: a missing file, a malformed line, an unknown split."""


@contextlib.contextmanager
def data_errors():
    """Re-raises a failed check of the stream (a malformed line, invalid UTF-8) as a `DataError`
    with its file and line; wrap whatever iterates a `pairs_dataset` (`read_pairs`, `model.fit`)."""
    try:
        yield
    except tf.errors.InvalidArgumentError as error:
        match = _ASSERTION.search(error.message)
        if match is None:
            raise
        # tf.debugging.Assert prints strings C-escaped
        raise DataError(codecs.escape_decode(match.group(1).encode("utf-8"))[0].decode("utf-8", "replace")) from None
