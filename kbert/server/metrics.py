"""Prometheus metrics of a `kbert serve` replica, at `GET /metrics` (prometheus_client's text
format): per model and route, requests by status code and their latency; per model and method,
the batches (requests and inputs in each, inference time, queue wait); the queue depth.
"""

from __future__ import annotations

from kbert.server.batcher import BatchStats

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)


class Metrics:
    """The replica's metrics, in a registry of their own (two servers in one process, as in
    the tests, do not mix)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
        self.registry = r = CollectorRegistry()
        self.requests = Counter("kbert_requests", "HTTP requests answered",
                                ["model", "route", "code"], registry=r)
        self.latency = Histogram("kbert_request_duration_seconds",
                                 "time from a request read to its answer",
                                 ["model", "route"], buckets=LATENCY_BUCKETS, registry=r)
        self.batch_requests = Histogram("kbert_batch_requests", "requests merged in one batch",
                                        ["model", "method"], buckets=SIZE_BUCKETS, registry=r)
        self.batch_inputs = Histogram("kbert_batch_inputs", "inputs (texts, pairs) in one batch",
                                      ["model", "method"], buckets=SIZE_BUCKETS, registry=r)
        self.inference = Histogram("kbert_batch_duration_seconds", "time one batch ran",
                                   ["model", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self.wait = Histogram("kbert_queue_wait_seconds", "time a request waited for its batch",
                              ["model", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self.queue = Gauge("kbert_queue_inputs", "inputs waiting for a batch", registry=r)

    def request(self, model: str, route: str, code: int, seconds: float) -> None:
        self.requests.labels(model, route, str(code)).inc()
        self.latency.labels(model, route).observe(seconds)

    def batch(self, stats: BatchStats) -> None:
        model, method = stats.key[0], stats.key[1]
        self.batch_requests.labels(model, method).observe(stats.jobs)
        self.batch_inputs.labels(model, method).observe(stats.items)
        self.inference.labels(model, method).observe(stats.seconds)
        for waited in stats.waited:
            self.wait.labels(model, method).observe(waited)

    def render(self, queued: int) -> tuple[bytes, str]:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
        self.queue.set(queued)
        return generate_latest(self.registry), CONTENT_TYPE_LATEST


__all__ = ["LATENCY_BUCKETS", "Metrics"]
