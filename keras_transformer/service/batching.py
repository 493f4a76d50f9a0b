"""Dynamic batching: texts of concurrent requests merged into one model call, then split back.

The model runs on one thread of its own (TensorFlow releases the GIL while it computes), so the
event loop never blocks on it. A request's texts join a bounded queue (`queue_limit` texts; a full
queue refuses the request at once, 503, instead of growing memory: LibreTranslate#545, #693). The
model thread takes the oldest text, then more until the batch holds `max_batch_tokens` source
tokens or `timeout_s` has passed since the first (the policy of TF Serving's batching scheduler,
`max_batch_size` and `batch_timeout_micros`, and of CTranslate2's `max_batch_size` in tokens);
texts of equal options (format, target language, ...) go to the model together, and each result
returns to its request's future, in the request's order.
"""

from __future__ import annotations

import asyncio
import dataclasses
import queue
import threading
import time
from collections.abc import Callable, Hashable, Sequence

from keras_transformer.service.limits import LimitError

_STOP = object()


@dataclasses.dataclass
class _Item:
    options: Hashable
    text: str
    tokens: int
    future: asyncio.Future
    loop: asyncio.AbstractEventLoop


def _settle(future: asyncio.Future, result=None, error: BaseException | None = None) -> None:
    if future.done():  # its request was cancelled (the client went away)
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)


class Batcher:
    """`run(options, texts) -> results` (one per text, on the model thread only) over batches merged
    from every `submit`; `count_tokens(text)` estimates a text's source tokens; `metrics` (a
    `service.metrics.Metrics`) records batch sizes and the queue's depth."""

    def __init__(
        self,
        run: Callable[[Hashable, list[str]], Sequence],
        count_tokens: Callable[[str], int],
        *,
        max_batch_tokens: int = 4096,
        timeout_s: float = 0.005,
        queue_limit: int = 1024,
        metrics=None,
    ):
        if max_batch_tokens < 1 or queue_limit < 1 or timeout_s < 0:
            raise ValueError("max_batch_tokens and queue_limit must be >= 1, timeout_s >= 0")
        self.run, self.count_tokens, self.metrics = run, count_tokens, metrics
        self.max_batch_tokens, self.timeout_s, self.queue_limit = max_batch_tokens, timeout_s, queue_limit
        self._queue: queue.Queue = queue.Queue()
        self._pending = 0  # texts queued or in the model, at most queue_limit
        self._lock = threading.Lock()
        self._carried: _Item | None = None  # taken but over the last batch's budget: first of the next
        self._thread = threading.Thread(target=self._work, name="model", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Finish every text queued so far, then end the model thread."""
        if self._thread.is_alive():
            self._queue.put(_STOP)
            self._thread.join()

    @property
    def pending(self) -> int:
        return self._pending

    async def submit(self, options: Hashable, texts: Sequence[str]) -> list:
        """The results of `texts` (all with `options`), in order; LimitError 503 with Retry-After when
        the queue has no room for them all; a `run` error is raised here."""
        if not texts:
            return []
        with self._lock:
            if self._pending + len(texts) > self.queue_limit:
                raise LimitError(503, f"the translation queue is full ({self.queue_limit} texts): retry later", 1)
            self._pending += len(texts)
        self._gauge()
        loop = asyncio.get_running_loop()
        futures = []
        for text in texts:
            future = loop.create_future()
            self._queue.put(_Item(options, text, max(1, self.count_tokens(text)), future, loop))
            futures.append(future)
        return list(await asyncio.gather(*futures))

    def _gauge(self) -> None:
        if self.metrics is not None:
            self.metrics.queue_depth.set(self._pending)

    def _next_batch(self) -> list[_Item] | None:
        """The next batch (None: stop): the oldest text, then more until the token budget or the timeout."""
        first = self._carried or self._queue.get()
        self._carried = None
        if first is _STOP:
            return None
        batch, tokens = [first], first.tokens
        deadline = time.monotonic() + self.timeout_s
        while tokens < self.max_batch_tokens:
            try:
                item = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                break
            if item is _STOP or tokens + item.tokens > self.max_batch_tokens:
                self._carried = item
                break
            batch.append(item)
            tokens += item.tokens
        if self.metrics is not None:
            self.metrics.batch_size.observe(len(batch))
            self.metrics.batch_tokens.observe(tokens)
        return batch

    def _work(self) -> None:
        while (batch := self._next_batch()) is not None:
            groups: dict[Hashable, list[_Item]] = {}
            for item in batch:
                groups.setdefault(item.options, []).append(item)
            for options, items in groups.items():
                try:
                    results = self.run(options, [item.text for item in items])
                    settled = [(item, {"result": result}) for item, result in zip(items, results)]
                except Exception as error:  # the request that asked gets it, the server goes on
                    settled = [(item, {"error": error}) for item in items]
                for item, outcome in settled:
                    item.loop.call_soon_threadsafe(lambda f=item.future, o=outcome: _settle(f, **o))
            with self._lock:
                self._pending -= len(batch)
            self._gauge()
