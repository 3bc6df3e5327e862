"""A semaphore that serves its waiters by priority: the workload controller's write budget.

Both lanes' API writes share one budget (``Context.write_gate``, ``--max-concurrent-writes``):
a status write that changes readiness goes first, then the full lane's actions (JobSets,
Services, suspends, deletes, and its own status write), then progress-only status writes.
When the apiserver is the bottleneck, fewer requests in flight each finish sooner, and the
order decides who waits (ADR 0030).
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import itertools
from collections.abc import AsyncIterator
from typing import Final

#: Priorities of writes (lower goes first): readiness, the full lane's actions, progress.
URGENT: Final = 0
ACTION: Final = 1
PROGRESS: Final = 2


class Ticket:
    """One place in a :class:`PriorityGate`'s queue: granted once its future is done; may be
    promoted (a lower priority number) while it waits; :meth:`close` leaves the queue or hands
    the slot back."""

    def __init__(self, gate: PriorityGate, priority: int) -> None:
        self.gate = gate
        self.priority = priority
        self.seq = 0
        self.future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed = False
        self.held_as_other = False

    @property
    def granted(self) -> bool:
        return self.future.done() and not self.future.cancelled()

    def promote(self, priority: int) -> None:
        """Wait on at ``priority`` when it comes before the ticket's own (no-op once granted)."""
        if not self.future.done() and priority < self.priority:
            self.priority = priority
            self.gate._push(self)

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self.granted:
            self.gate._release(self)
        else:
            self.future.cancel()


class PriorityGate:
    """At most ``slots`` holders at once, ``reserved`` of them for urgent ones; waiters are
    served lowest ``priority`` first, then in the order they came. A cancelled waiter gives
    its turn on."""

    def __init__(self, slots: int, *, reserved: int = 0) -> None:
        self.slots = slots
        #: Slots only urgent tickets may take: a burst of slow actions never holds them all.
        self.reserved = min(reserved, max(0, slots - 1))
        self.held = 0
        self.held_other = 0
        self._waiters: list[tuple[int, int, Ticket]] = []
        self._order = itertools.count()

    def enqueue(self, priority: int = PROGRESS) -> Ticket:
        """A ticket in the queue (granted at once when a slot is free); the caller closes it."""
        ticket = Ticket(self, priority)
        self._push(ticket)
        self._wake()
        return ticket

    @contextlib.asynccontextmanager
    async def slot(self, priority: int = PROGRESS) -> AsyncIterator[None]:
        ticket = self.enqueue(priority)
        try:
            await ticket.future
            yield
        finally:
            ticket.close()

    def _push(self, ticket: Ticket) -> None:
        ticket.seq = next(self._order)
        heapq.heappush(self._waiters, (ticket.priority, ticket.seq, ticket))

    def _release(self, ticket: Ticket) -> None:
        self.held -= 1
        if ticket.held_as_other:
            self.held_other -= 1
        self._wake()

    def _wake(self) -> None:
        """Grant free slots to the first tickets still waiting (stale entries are dropped);
        a ticket that is not urgent only while fewer than ``slots - reserved`` such are held."""
        while self._waiters and self.held < self.slots:
            priority, seq, ticket = self._waiters[0]
            if ticket.future.done() or seq != ticket.seq:
                heapq.heappop(self._waiters)
                continue
            other = priority != URGENT
            if other and self.held_other >= self.slots - self.reserved:
                return  # urgent tickets sort first: none is waiting
            heapq.heappop(self._waiters)
            self.held += 1
            if other:
                self.held_other += 1
                ticket.held_as_other = True
            ticket.future.set_result(None)
