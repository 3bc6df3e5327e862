"""Usage accounting: what each request cost, in the gateway's metrics (:mod:`.metrics`).

Per request: its status and duration by model and route (once it ended), the time to the first
upstream byte, and the tokens the upstream reported in its ``usage`` (read from the last bytes of
an answer, without decoding it). Per wake: its outcome.

A service below the route handlers: it knows requests (:class:`~.request.Ctx`), never a handler or
the application.
"""

from __future__ import annotations

import re
import time

from .metrics import GatewayMetrics
from .request import Ctx
from .routing import Workload

_USAGE_IN = re.compile(rb'"(?:prompt_tokens|input_tokens)"\s*:\s*(\d+)')
_USAGE_OUT = re.compile(rb'"(?:completion_tokens|output_tokens)"\s*:\s*(\d+)')
USAGE_WINDOW = 1024
"""Bytes at the end of a stream the usage is read from (its last event and ``[DONE]``)."""
_UNCOUNTED_ROUTES = frozenset({"metrics", "health"})
"""Routes whose requests are not counted (scrapes and probes would drown the rest)."""


def stream_tail(tail: bytes, out: bytes) -> bytes:
    """The last :data:`USAGE_WINDOW` bytes of a stream once ``out`` went after ``tail`` (bounded):
    the usage event and ``[DONE]`` may reach the gateway in reads of their own."""
    if len(out) >= USAGE_WINDOW:
        return out[-USAGE_WINDOW:]
    return (tail + out)[-USAGE_WINDOW:]


class Accounting:
    """Records requests, first bytes, tokens and wakes in one gateway's metrics."""

    def __init__(self, metrics: GatewayMetrics) -> None:
        self.metrics = metrics

    def first_byte(self, ctx: Ctx) -> None:
        self.metrics.ttfb.labels(ctx.model_label, ctx.route).observe(time.perf_counter() - ctx.start)

    def usage(self, ctx: Ctx, tail: bytes) -> None:
        """Count the tokens of the last ``usage`` in ``tail`` (the end of an answer)."""
        m_in = _USAGE_IN.findall(tail)
        m_out = _USAGE_OUT.findall(tail)
        if m_in:
            self.metrics.tokens.labels(ctx.model_label, "in").inc(int(m_in[-1]))
        if m_out:
            self.metrics.tokens.labels(ctx.model_label, "out").inc(int(m_out[-1]))

    def finished(self, ctx: Ctx) -> None:
        """The request ended: its status and duration (not for scrapes and probes)."""
        if ctx.route in _UNCOUNTED_ROUTES:
            return
        self.metrics.requests.labels(ctx.model_label, ctx.route, str(ctx.status)).inc()
        self.metrics.duration.labels(ctx.model_label, ctx.route).observe(time.perf_counter() - ctx.start)

    def wake(self, workload: Workload, outcome: str) -> None:
        self.metrics.wakes.labels(workload.key, outcome).inc()
