"""Prometheus metrics of one coordinator app, in their own registry (tests build many apps)."""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from swarmhub.status import RunStatus


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.runs = Gauge("swarmhub_runs", "Runs by status", ["status"], registry=self.registry)
        self.peers_connected = Gauge(
            "swarmhub_peers_connected", "Peers with an open control channel", registry=self.registry
        )
        self.heartbeats = Counter(
            "swarmhub_heartbeats_total", "Peer heartbeats received", registry=self.registry
        )
        self.http_requests = Counter(
            "swarmhub_http_requests_total",
            "HTTP requests by route template",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.http_duration = Histogram(
            "swarmhub_http_request_duration_seconds",
            "HTTP request latency by route template",
            ["method", "route"],
            registry=self.registry,
        )

    def set_run_counts(self, counts: dict[RunStatus, int]) -> None:
        for status in RunStatus:
            self.runs.labels(status=status).set(counts.get(status, 0))


def route_template(scope: Scope) -> str:
    """The matched route's path template; raw paths would give one time series per id."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    if not isinstance(path, str):
        return "unmatched"
    return path or "/"


class HttpMetricsMiddleware:
    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def send_and_record_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_record_status)
        finally:
            route, method = route_template(scope), scope["method"]
            self.metrics.http_requests.labels(method=method, route=route, status=str(status)).inc()
            self.metrics.http_duration.labels(method=method, route=route).observe(
                time.perf_counter() - started
            )
