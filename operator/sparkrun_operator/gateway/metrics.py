"""Prometheus metrics of the gateway, in a registry owned by one app instance.

=====================================================  ===========================================
``sparkrun_gateway_requests_total``                    requests by ``model``, ``route``, ``code``
``sparkrun_gateway_request_duration_seconds``          whole request, by ``model``, ``route``
``sparkrun_gateway_time_to_first_byte_seconds``        request start to first upstream body byte
``sparkrun_gateway_tokens_total``                      tokens from upstream ``usage``, ``direction``
                                                       ``in`` (prompt) or ``out`` (completion)
``sparkrun_gateway_in_flight``                         requests in flight per ``backend``
``sparkrun_gateway_backend_ejections_total``           passive-health ejections per ``backend``
``sparkrun_gateway_upstream_errors_total``             by ``backend`` and ``kind`` (connect, timeout,
                                                       read, status)
``sparkrun_gateway_wakes_total``                       wakes by ``workload`` and ``outcome``
                                                       (started, ready, failed)
=====================================================  ===========================================

``model`` is the requested name when it is known to the routing table, else ``unknown`` (so
clients cannot blow up the label cardinality).

With several workers (``--workers``, :mod:`.workers`) every worker writes its samples to the
directory in ``PROMETHEUS_MULTIPROC_DIR`` and :meth:`GatewayMetrics.render` sums all of them, so
any worker's ``/metrics`` shows the whole gateway (``in_flight``: the sum over live workers).
"""

from __future__ import annotations

import os

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

_LATENCY_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0,
)  # fmt: skip


class GatewayMetrics:
    """The gateway's metric families."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        #: The shared sample directory of several workers (``None``: this process's own values).
        self.shared_dir = os.environ.get("PROMETHEUS_MULTIPROC_DIR") or None
        r = self.registry
        self.requests = Counter(
            "sparkrun_gateway_requests", "Requests by model, route and status code.",
            ["model", "route", "code"], registry=r,
        )  # fmt: skip
        self.duration = Histogram(
            "sparkrun_gateway_request_duration_seconds", "Request duration, start to last byte.",
            ["model", "route"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.ttfb = Histogram(
            "sparkrun_gateway_time_to_first_byte_seconds",
            "Request start to the first upstream body byte (time to first token when streaming).",
            ["model", "route"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.tokens = Counter(
            "sparkrun_gateway_tokens", "Tokens reported by upstream usage.",
            ["model", "direction"], registry=r,
        )  # fmt: skip
        self.in_flight = Gauge(
            "sparkrun_gateway_in_flight",
            "Requests in flight per backend.",
            ["backend"],
            registry=r,
            multiprocess_mode="livesum",
        )
        self.ejections = Counter(
            "sparkrun_gateway_backend_ejections", "Passive-health ejections per backend.",
            ["backend"], registry=r,
        )  # fmt: skip
        self.upstream_errors = Counter(
            "sparkrun_gateway_upstream_errors", "Upstream failures by backend and kind.",
            ["backend", "kind"], registry=r,
        )  # fmt: skip
        self.wakes = Counter(
            "sparkrun_gateway_wakes", "Wake-on-request events by workload and outcome.",
            ["workload", "outcome"], registry=r,
        )  # fmt: skip

    def render(self) -> bytes:
        if self.shared_dir is None:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        MultiProcessCollector(merged, path=self.shared_dir)  # type: ignore[no-untyped-call]
        return generate_latest(merged)
