"""A routing source over fixed workloads: no file, no watch (the gateway's ``RoutingSource``)."""

from __future__ import annotations

from collections.abc import Iterable

from sparkrun_operator.gateway.routing import RoutingTable, TablePublisher, Workload


class FixedSource:
    """The routing table of ``workloads``, published once."""

    def __init__(self, workloads: Iterable[Workload]) -> None:
        self.publisher = TablePublisher()
        self.publisher.publish(list(workloads))

    def snapshot(self) -> RoutingTable:
        return self.publisher.snapshot()

    async def wait_changed(self, version: int) -> RoutingTable:
        return await self.publisher.wait_changed(version)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None
