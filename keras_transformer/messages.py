"""One line per error or warning: what reaches the user's terminal (the command line's contract,
`cli/main.py`), shared by the modules that say it."""

from __future__ import annotations

import sys


def first_line(error: BaseException) -> str:
    """The first line of `error`'s message (a TensorFlow error's may run to pages), or its type's
    name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def warn(line: str) -> None:
    """`line` on stderr, as a warning."""
    print(f"warning: {line}", file=sys.stderr)
