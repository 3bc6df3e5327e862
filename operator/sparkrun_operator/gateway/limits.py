"""Admission limits: requests in flight (global, per tenant, per caller) and buffered request bodies.

- :class:`InFlight` counts inference requests; above ``max_in_flight`` a request is refused at
  once with 503 and ``Retry-After`` (the client backs off; nothing queues in the gateway), and
  above ``max_in_flight_per_key`` for one caller (API key, Kubernetes user), or
  ``max_in_flight_per_tenant`` for one tenant (the namespace a key or ServiceAccount belongs
  to: a tenant issues itself any number of keys and accounts), with 429 and ``Retry-After``.
- :class:`ByteBudget` bounds the request bodies all requests hold together. A request reserves
  its declared size (``max_body_bytes`` when it declares none) before its body is read, keeps
  only the size it read, and gives that back when it ends; a reservation is all or nothing and
  granted in arrival order, so waiting requests cannot deadlock each other. A request that does
  not get its reservation within the body timeout is refused with 503. Meanwhile its body is not
  read: TCP holds the client back. One tenant holds (and waits for) at most half of the budget,
  429 beyond at once: a request held for a wake keeps its body, so one tenant's held requests
  could otherwise block every other tenant's.
"""

from __future__ import annotations

import asyncio
from collections import deque

from .errors import GatewayError

RETRY_AFTER = 1.0


class InFlight:
    """Counts of inference requests in flight, in all, per key and per tenant."""

    def __init__(self, limit: int, per_key: int, per_tenant: int) -> None:
        self.limit = limit
        self.per_key = per_key
        self.per_tenant = per_tenant
        self.total = 0
        self._by_key: dict[str, int] = {}
        self._by_tenant: dict[str, int] = {}

    def enter(self, key: str | None, tenant: str | None = None) -> None:
        """Count one more request (of ``key``, of ``tenant``); raises 503/429 instead when over a
        limit."""
        if self.total >= self.limit:
            raise GatewayError(
                503,
                f"The gateway is at its limit of {self.limit} requests in flight; retry shortly",
                code="overloaded",
                retry_after=RETRY_AFTER,
            )
        if key is not None and self._by_key.get(key, 0) >= self.per_key:
            raise _over(f"This API key has {self._by_key[key]} requests in flight, its limit")
        if tenant is not None and self._by_tenant.get(tenant, 0) >= self.per_tenant:
            raise _over(f"This namespace has {self._by_tenant[tenant]} requests in flight, its limit")
        if key is not None:
            self._by_key[key] = self._by_key.get(key, 0) + 1
        if tenant is not None:
            self._by_tenant[tenant] = self._by_tenant.get(tenant, 0) + 1
        self.total += 1

    def leave(self, key: str | None, tenant: str | None = None) -> None:
        self.total -= 1
        for counts, name in ((self._by_key, key), (self._by_tenant, tenant)):
            if name is not None:
                held = counts.pop(name, 1) - 1
                if held:
                    counts[name] = held


def _over(what: str) -> GatewayError:
    return GatewayError(429, f"{what}; retry shortly", code="too_many_requests", retry_after=RETRY_AFTER)


class ByteBudget:
    """Bytes reserved by the request bodies being read or held, at most ``limit``, and per tenant
    at most ``per_tenant`` (reserved or waited for; default half of ``limit``) beyond its first
    body, so a tenant is never refused for good when one body exceeds its share."""

    def __init__(self, limit: int, per_tenant: int | None = None) -> None:
        self.limit = limit
        self.per_tenant = per_tenant if per_tenant is not None else max(1, limit // 2)
        self.used = 0
        self._by_tenant: dict[str, int] = {}
        self._waiters: deque[tuple[int, asyncio.Future[None]]] = deque()

    async def reserve(self, size: int, wait: float, tenant: str | None = None) -> int:
        """Reserve ``size`` bytes (at most ``limit``) for ``tenant``, waiting ``wait`` seconds at
        most; returns what to :meth:`release`. 429 at once when the tenant would hold more than
        its share."""
        size = min(size, self.limit)
        if tenant is not None:
            held = self._by_tenant.get(tenant, 0)
            if held and held + size > self.per_tenant:  # NB: its first body always may wait its turn
                raise _over(f"This namespace has {held} bytes of request bodies buffered, its limit")
            self._by_tenant[tenant] = held + size
        try:
            return await self._reserve(size, wait)
        except BaseException:
            self._forget(tenant, size)
            raise

    async def _reserve(self, size: int, wait: float) -> int:
        if not self._waiters and self.used + size <= self.limit:
            self.used += size
            return size
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (size, fut)
        self._waiters.append(entry)
        try:
            async with asyncio.timeout(wait):
                await fut
        except BaseException as exc:
            if fut.done() and not fut.cancelled():
                self.used -= size  # granted just as the wait ended: give it back
                self._grant()
            else:
                fut.cancel()
                self._waiters.remove(entry)
                self._grant()
            if isinstance(exc, TimeoutError):
                raise GatewayError(
                    503,
                    "The gateway is buffering as many request bodies as it may; retry shortly",
                    code="overloaded",
                    retry_after=RETRY_AFTER,
                ) from None
            raise
        return size

    def release(self, size: int, tenant: str | None = None) -> None:
        self.used -= size
        self._forget(tenant, size)
        self._grant()

    def _forget(self, tenant: str | None, size: int) -> None:
        if tenant is not None:
            held = self._by_tenant.pop(tenant, 0) - size
            if held > 0:
                self._by_tenant[tenant] = held

    def _grant(self) -> None:
        while self._waiters and self.used + self._waiters[0][0] <= self.limit:
            size, fut = self._waiters.popleft()
            if not fut.done():
                self.used += size
                fut.set_result(None)
