"""A quiet command line: TensorFlow's log lines kept out of the output, set up before TensorFlow
is imported.

TensorFlow 2.21 writes its C++ log lines (`I0000 ... oneDNN custom operations are on`,
`E0000 ... failed call to cuInit`, `WARNING: All log messages before absl::InitializeLog() ...`)
through absl before any setting takes effect, so `TF_CPP_MIN_LOG_LEVEL` does not stop them.
`filter_native_logs` routes the process's file descriptor 2 through a pipe whose reader drops
info, warning and error log messages and passes everything else on (fatal log lines, crash
reports); Python's own `sys.stderr` writes straight to the terminal, never through the pipe.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import sys
import threading
import warnings

# absl's log prefix: severity, MMDD, time, thread id, file:line], e.g.
# `I0000 00:00:1796064463.972890    4678 port.cc:153] `; and absl's notice before its set-up.
_NATIVE_LOG = re.compile(
    rb"^(?:[IWE]\d{4} \d\d:\d\d:\d+\.\d+ +\d+ [^\]\s]+:\d+\] |WARNING: All log messages before absl::)"
)
_FATAL_LOG = re.compile(rb"^F\d{4} ")
_filter: threading.Thread | None = None


def quiet_python_logs() -> None:
    """TensorFlow's and absl's Python loggers at errors only; Keras' and TensorFlow's Python
    warnings off. Also the C++ log level, for the lines logged after absl's set-up."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    logging.getLogger("absl").setLevel(logging.ERROR)
    for module in ("keras", "tensorflow", "tf_keras", "absl"):
        warnings.filterwarnings("ignore", module=rf"{module}(\.|$)")


def drop_native_logs(chunk: bytes, dropping: bool = False) -> tuple[bytes, bool]:
    """The lines of `chunk` (whole lines that one read of fd 2 returned) that are not native log
    messages, and whether its last line belonged to one. A message is its prefixed first line and
    the lines that came with it (absl writes a message in one piece); `dropping` carries a message
    over from the previous chunk. Fatal messages (`F0000 ...`) are kept."""
    kept = []
    for line in chunk.splitlines(keepends=True):
        if _NATIVE_LOG.match(line):
            dropping = True
        elif not dropping or _FATAL_LOG.match(line):
            dropping = False
            kept.append(line)
    return b"".join(kept), dropping


def _forward(read_fd: int, terminal_fd: int) -> None:
    """Copy the pipe to the terminal, without native log messages, until the pipe closes."""
    pending, dropping = b"", False
    while data := os.read(read_fd, 65536):
        lines, newline, pending = (pending + data).rpartition(b"\n")
        if newline:
            kept, dropping = drop_native_logs(lines + newline, dropping)
            os.write(terminal_fd, kept)
        dropping = dropping and bool(pending)  # a message ends with its chunk, unless mid-line
    os.write(terminal_fd, drop_native_logs(pending, dropping)[0])
    os.close(read_fd)


def filter_native_logs() -> None:
    """Drop native log messages from this process's stderr from now on (idempotent). Call it
    before TensorFlow is imported, and only where this process owns its stderr (a command, not a
    library call)."""
    global _filter
    if _filter is not None:
        return
    sys.stderr.flush()
    terminal = os.dup(2)
    read_fd, write_fd = os.pipe()
    os.dup2(write_fd, 2)
    os.close(write_fd)
    encoding = sys.stderr.encoding or "utf-8"
    sys.stderr = open(terminal, "w", buffering=1, encoding=encoding, errors="backslashreplace", closefd=False)  # noqa: SIM115
    _filter = threading.Thread(target=_forward, args=(read_fd, terminal), name="native-log-filter", daemon=True)
    _filter.start()

    def restore():
        os.dup2(terminal, 2)  # closes the pipe's last write end: the reader sees its end
        _filter.join(timeout=1)

    atexit.register(restore)
