"""Who may translate, how often and how much: API keys, requests per minute, characters per request.

As LibreTranslate's `--api-keys`, `--req-limit` and `--char-limit`: with keys, every translation
request names one (`api_key`); the rate is counted per key, else per client address, in fixed
one-minute windows (memory: one counter per client seen in the current window).
"""

from __future__ import annotations

import math
import threading
import time


class LimitError(Exception):
    """A request refused by a limit: its HTTP `status`, one-line message and `retry_after` seconds (or None)."""

    def __init__(self, status: int, message: str, retry_after: int | None = None):
        super().__init__(message)
        self.status, self.retry_after = status, retry_after


def read_api_keys(path: str) -> frozenset[str]:
    """The keys of a file, one per line (blank lines and `#` comments skipped); ValueError if it holds none."""
    with open(path, encoding="utf-8") as f:
        keys = frozenset(line.split("#", 1)[0].strip() for line in f) - {""}
    if not keys:
        raise ValueError(f"{path} holds no API key (one per line)")
    return keys


def check_key(keys: frozenset[str] | None, key: str | None) -> None:
    """LimitError 403 when `keys` are required and `key` is missing or not one of them."""
    if keys is None:
        return
    if not key:
        raise LimitError(403, "an API key is required: pass api_key")
    if key not in keys:
        raise LimitError(403, "invalid API key")


def check_chars(texts: list[str], limit: int | None) -> None:
    """LimitError 400 naming the limit when `texts` hold more than `limit` characters together."""
    total = sum(map(len, texts))
    if limit is not None and total > limit:
        raise LimitError(400, f"{total} characters exceed the limit of {limit} per request (--char-limit)")


class RateLimiter:
    """At most `per_minute` requests per client in each one-minute window (None: no limit)."""

    WINDOW_S = 60.0

    def __init__(self, per_minute: int | None, clock=time.monotonic):
        self.per_minute, self.clock = per_minute, clock
        self._window, self._counts = -1, {}
        self._lock = threading.Lock()

    def check(self, client: str) -> None:
        """Count a request of `client`; LimitError 429 with the seconds to the next window when over."""
        if self.per_minute is None:
            return
        now = self.clock()
        window = int(now // self.WINDOW_S)
        with self._lock:
            if window != self._window:  # a new window: forget the last one's clients
                self._window, self._counts = window, {}
            count = self._counts.get(client, 0) + 1
            self._counts[client] = count
        if count > self.per_minute:
            retry = max(1, math.ceil((window + 1) * self.WINDOW_S - now))
            raise LimitError(429, f"more than {self.per_minute} requests per minute (--req-limit)", retry)
