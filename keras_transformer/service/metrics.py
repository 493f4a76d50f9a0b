"""The service's Prometheus metrics (`GET /metrics`, the text exposition format), in a registry of
their own per app (two apps in one process do not share counters)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Metrics:
    """requests and errors by route and status, items per batch, estimated tokens per batch, request
    latency, and the items waiting in the batching queue."""

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("kt_requests", "HTTP requests", ["route", "status"], registry=self.registry)
        self.errors = Counter(
            "kt_errors", "HTTP requests answered with an error", ["route", "status"], registry=self.registry
        )
        self.latency = Histogram(
            "kt_request_latency_seconds",
            "request latency",
            ["route"],
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "kt_batch_size", "texts per model batch", buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256), registry=self.registry
        )
        self.batch_tokens = Histogram(
            "kt_batch_tokens",
            "source tokens per model batch",
            buckets=(16, 64, 256, 1024, 4096, 16384),
            registry=self.registry,
        )
        self.queue_depth = Gauge("kt_queue_depth", "texts waiting for the model", registry=self.registry)

    def observe(self, route: str, status: int, seconds: float) -> None:
        self.requests.labels(route, str(status)).inc()
        if status >= 400:
            self.errors.labels(route, str(status)).inc()
        self.latency.labels(route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
