"""Prometheus metrics of the reward server (prometheus_client, one registry per app).

    prmkit_reward_queue_requests / _queue_completions / _queue_tokens  waiting now (gauges)
    prmkit_reward_batch_completions / _batch_requests / _batch_tokens  per batch (histograms)
    prmkit_reward_batch_seconds                                       forward time per batch
    prmkit_reward_request_seconds{route}                              latency of answered requests
    prmkit_reward_requests_total{route,status}                        every answer, by HTTP status
    prmkit_reward_cancelled_total                                     requests whose client left
    prmkit_reward_connections_closed_total{reason}                    closed by the limits:
        header_timeout, body_timeout, write_timeout, evicted, refused (connections)
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from prmkit.rewards.serving.engine import Observer

SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
TOKEN_BUCKETS = (64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536)
SECOND_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
CONTENT_TYPE = CONTENT_TYPE_LATEST


class ServerMetrics(Observer):
    def __init__(self):
        self.registry = r = CollectorRegistry()
        self.queue_requests = Gauge("prmkit_reward_queue_requests", "Requests waiting", registry=r)
        self.queue_items = Gauge("prmkit_reward_queue_completions", "Completions waiting",
                                 registry=r)
        self.queue_tokens = Gauge("prmkit_reward_queue_tokens",
                                  "Tokens waiting (by their upper bound)", registry=r)
        self.batch_items = Histogram("prmkit_reward_batch_completions", "Completions per batch",
                                     buckets=SIZE_BUCKETS, registry=r)
        self.batch_requests = Histogram("prmkit_reward_batch_requests", "Requests per batch",
                                        buckets=SIZE_BUCKETS, registry=r)
        self.batch_tokens = Histogram("prmkit_reward_batch_tokens", "Tokens per batch",
                                      buckets=TOKEN_BUCKETS, registry=r)
        self.batch_seconds = Histogram("prmkit_reward_batch_seconds", "Scoring time per batch",
                                       buckets=SECOND_BUCKETS, registry=r)
        self.latency = Histogram("prmkit_reward_request_seconds", "Latency of answered requests",
                                 ["route"], buckets=SECOND_BUCKETS, registry=r)
        self.requests = Counter("prmkit_reward_requests", "Answers by route and HTTP status",
                                ["route", "status"], registry=r)
        self.cancelled_requests = Counter("prmkit_reward_cancelled",
                                          "Requests dropped because their client went away",
                                          registry=r)
        self.closed = Counter("prmkit_reward_connections_closed",
                              "Connections closed by the server's limits", ["reason"],
                              registry=r)

    # Observer (called by the engine)
    def queue_changed(self, requests: int, items: int, tokens: int = 0) -> None:
        self.queue_requests.set(requests)
        self.queue_items.set(items)
        self.queue_tokens.set(tokens)

    def batch_done(self, requests: int, items: int, tokens: int, seconds: float) -> None:
        self.batch_requests.observe(requests)
        self.batch_items.observe(items)
        self.batch_tokens.observe(tokens)
        self.batch_seconds.observe(seconds)

    def cancelled(self, requests: int) -> None:
        self.cancelled_requests.inc(requests)

    def connection_closed(self, reason: str) -> None:  # connections.Observer
        self.closed.labels(reason=reason).inc()

    # the routes
    def answered(self, route: str, status: int, seconds: float | None = None) -> None:
        self.requests.labels(route=route, status=str(status)).inc()
        if seconds is not None:
            self.latency.labels(route=route).observe(seconds)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
