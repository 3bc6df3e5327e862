"""The operator's work queue: per-object wake-up events.

Each reconciling daemon waits on its own :class:`Poke`; watch handlers of children and dependencies
set it. Several pokes before the daemon wakes coalesce into one reconcile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Hashable, Iterator


class Poke(asyncio.Event):
    """A daemon's wake-up event that remembers when it was set: ``clear()`` (the daemon took
    the pokes so far) keeps the time of the first set it absorbed until :meth:`taken`, so a
    daemon can tell how long the pokes behind its work waited for it."""

    def __init__(self) -> None:
        super().__init__()
        self._set_at: float | None = None
        self._absorbed: float | None = None

    def set(self) -> None:
        if not self.is_set():
            self._set_at = time.monotonic()
        super().set()

    def clear(self) -> None:
        if self.is_set() and self._absorbed is None:
            self._absorbed = self._set_at
        super().clear()

    def taken(self) -> float | None:
        """The ``time.monotonic()`` of the first poke cleared since the last call (``None``:
        none), and forget it; a poke still set is the next call's."""
        absorbed, self._absorbed = self._absorbed, None
        return absorbed


class Triggers:
    """Per-object wake-up events, keyed by e.g. ``("iw", namespace, name)``.

    Tuple keys are also filed under their first one and two parts (``("ib",)``,
    ``("ib", namespace)``), so :meth:`poke_group` wakes a kind, or a kind in one namespace,
    without looking at every other key: a node or pod event pokes every cluster's daemon, and
    a workload event every benchmark of its namespace, at any number of workloads.
    """

    def __init__(self) -> None:
        self._events: dict[Hashable, Poke] = {}
        self._groups: dict[tuple[Hashable, ...], dict[Hashable, Poke]] = {}
        #: Pokes so far (all keys): whether anything happened lately.
        self.pokes = 0

    @staticmethod
    def _prefixes(key: Hashable) -> tuple[tuple[Hashable, ...], ...]:
        if not isinstance(key, tuple) or not key:
            return ()
        return (key[:1], key[:2]) if len(key) > 1 else (key[:1],)

    def register(self, key: Hashable) -> Poke:
        """The event of ``key`` (created set, so the first pass runs at once)."""
        event = self._events.get(key)
        if event is None:
            event = self._events[key] = Poke()
            event.set()
            for prefix in self._prefixes(key):
                self._groups.setdefault(prefix, {})[key] = event
        return event

    def unregister(self, key: Hashable) -> None:
        if self._events.pop(key, None) is None:
            return
        for prefix in self._prefixes(key):
            group = self._groups.get(prefix)
            if group is not None:
                group.pop(key, None)
                if not group:
                    del self._groups[prefix]

    def poke(self, key: Hashable) -> bool:
        """Wake ``key``'s daemon; ``False`` when no daemon runs for it (yet)."""
        self.pokes += 1
        event = self._events.get(key)
        if event is None:
            return False
        event.set()
        return True

    def poke_group(self, *prefix: Hashable) -> int:
        """Wake every daemon whose (tuple) key starts with ``prefix``, one or two parts (e.g.
        ``"ic"``, or ``"ib", namespace``); the number woken."""
        if not 1 <= len(prefix) <= 2:
            raise ValueError(f"a group is the first one or two parts of a key, not {prefix!r}")
        group = self._groups.get(prefix)
        if not group:
            return 0
        for event in group.values():
            event.set()
        self.pokes += len(group)
        return len(group)

    def keys(self) -> Iterator[Hashable]:
        return iter(list(self._events))
