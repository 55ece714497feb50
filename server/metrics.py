"""Prometheus metrics (cs1_*), in a registry of their own so several apps can live in one process (tests)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    def __init__(self):
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter("cs1_requests", "HTTP requests by route, status and error type",
                                ["route", "status", "error_type"], registry=r)
        self.total_seconds = Histogram("cs1_request_seconds", "Time from request start to response (decide route)",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.queue_seconds = Histogram("cs1_queue_seconds", "Time admitted requests waited for the GPU thread",
                                       buckets=LATENCY_BUCKETS, registry=r)
        self.gpu_seconds = Histogram("cs1_gpu_seconds", "Engine time per request (render, tokenize, forward, "
                                     "read-out)", buckets=LATENCY_BUCKETS, registry=r)
        self.queue_depth = Gauge("cs1_queue_depth", "Admitted requests waiting for the GPU thread", registry=r)
        self.in_flight = Gauge("cs1_in_flight", "Requests running on the GPU thread (0 or 1)", registry=r)
        self.admitted = Gauge("cs1_admitted", "Admitted requests (in flight + queued)", registry=r)
        self.input_tokens = Counter("cs1_input_tokens", "Prompt tokens of answered requests", registry=r)
        self.questions = Counter("cs1_questions", "Questions of answered requests", registry=r)
        self.rejected = Counter("cs1_rejected", "Requests refused by admission control (429)", registry=r)
        self.ready = Gauge("cs1_ready", "1 when the model is loaded, self-tested and not draining", registry=r)

    def render(self) -> bytes:
        return generate_latest(self.registry)
