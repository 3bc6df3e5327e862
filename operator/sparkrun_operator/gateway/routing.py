"""Where models are served: the routing table and the sources that keep it current.

A :class:`RoutingSource` publishes immutable :class:`RoutingTable` snapshots. The gateway reads
``snapshot()`` on every request (a dict lookup, no I/O) and awaits ``wait_changed()`` only while it
holds a request for a workload that is waking up. Sources:

- :class:`StaticRoutingSource`: a YAML or JSON file, re-read when its modification time or size
  changes (polled; a bad edit keeps the previous table and logs why).
- A Kubernetes source (EndpointSlices + InferenceWorkload watches) plugs in through the same
  protocol; it lives with the Kubernetes client code.

File format (``docs/gateway.md`` has the long form)::

    workloads:
      - namespace: default
        name: llama
        servedName: meta-llama/Llama-3.1-8B-Instruct
        aliases: [llama]
        state: Running            # Running | Sleeping | Stopped
        capabilities: [text-generation]   # and/or: embedding
        endpoints: [http://10.0.0.7:8000]  # ready leader URLs
        prefixAffinity: false
        timeouts: {connect: 5, read: 600, total: 1800}  # seconds, per backend
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

import yaml

from sparkrun_operator.errors import SparkrunError
from sparkrun_operator.plan.names import Claim, owners
from sparkrun_operator.plan.served import EMBEDDING, TEXT_GENERATION
from sparkrun_operator.plan.wake import Resting

log = logging.getLogger("sparkrun.gateway.routing")

State = Literal["Running", "Sleeping", "Stopped"]
STATES: tuple[State, ...] = ("Running", "Sleeping", "Stopped")
#: Why a workload that a request may wake is not serving: its engine asleep, zero replicas left
#: by the idle policy (or an autoscaler with ``minReplicas: 0``), or the user's ``state: Stopped``.
CAPABILITIES = (TEXT_GENERATION, EMBEDDING)


class RoutingError(SparkrunError):
    """A routing document that cannot be used (names the offending entry)."""


@dataclass(frozen=True)
class WakeHistory:
    """Measured seconds from a wake's start to Ready, the last few per kind of wake
    (``status.scaling.wakeSeconds``, oldest first); the held requests' ``Retry-After`` comes from them."""

    sleeping: tuple[float, ...] = ()
    zero: tuple[float, ...] = ()
    stopped: tuple[float, ...] = ()

    def of(self, kind: Resting) -> tuple[float, ...]:
        return {"Sleeping": self.sleeping, "Zero": self.zero, "Stopped": self.stopped}[kind]


@dataclass(frozen=True, kw_only=True)
class Workload:
    """One served model: where it runs and how it may be used."""

    namespace: str
    name: str
    served_name: str
    aliases: tuple[str, ...] = ()
    state: State = "Running"
    capabilities: frozenset[str] = frozenset({TEXT_GENERATION})
    endpoints: tuple[str, ...] = ()
    prefix_affinity: bool = False
    connect_timeout: float | None = None
    read_timeout: float | None = None
    #: ``metadata.creationTimestamp``: the oldest claim keeps a contested name (:mod:`..plan.names`).
    created: dt.datetime | None = field(default=None, compare=False)
    total_timeout: float | None = None
    #: Names the workload serves that its namespace may not claim (the name policy,
    #: ``--name-prefixes``): never routed to it, never among :attr:`names`.
    withheld: frozenset[str] = frozenset()
    #: Why it does not serve and a request may wake it (``None``: it serves, or is coming up, or
    #: is off for good: zero replicas the user asked for).
    resting: Resting | None = None
    #: ``spec.replicas`` (``None``: the source does not know, as in a routing file).
    replicas: int | None = None
    #: Replicas a wake from zero asks for (``status.scaling.resumeReplicas``, else the floor).
    resume_replicas: int = 1
    #: The measured wakes of this workload (:class:`WakeHistory`).
    wake_history: WakeHistory = field(default_factory=WakeHistory, compare=False)
    #: The wake under way as the operator saw it begin (``status.scaling.wake``), if any.
    wake_from: Resting | None = None
    wake_since: dt.datetime | None = field(default=None, compare=False)
    #: An InferencePool another product created (``gateway/pools.py``), routed by the model name
    #: on its annotation: never woken, and its names yield to every workload's.
    pool: bool = False

    @property
    def key(self) -> str:
        """``namespace/name`` (``InferencePool/namespace/name`` for a pool): the workload's
        identity (stable across table versions)."""
        return f"InferencePool/{self.namespace}/{self.name}" if self.pool else f"{self.namespace}/{self.name}"

    @property
    def names(self) -> tuple[str, ...]:
        """The names routed to it: the served name and the aliases, less the withheld ones."""
        every = (self.served_name, *self.aliases)
        return tuple(n for n in every if n not in self.withheld) if self.withheld else every

    @property
    def routable(self) -> bool:
        """Running with at least one ready endpoint."""
        return self.state == "Running" and bool(self.endpoints)

    @property
    def starting(self) -> bool:
        """Asked to run, with replicas, and not routable yet (no ready endpoint, or the engine not
        awake yet): coming up, so a request waits for it without a wake of its own."""
        return self.resting is None and bool(self.replicas) and not self.routable

    @property
    def wakeable(self) -> bool:
        """A request for it is held until it routes: it rests (a wake brings it back) or it is starting."""
        return not self.routable and (self.resting is not None or self.starting)

    def claim(self) -> Claim:
        return Claim(
            namespace=self.namespace,
            name=self.name,
            served=self.served_name,
            aliases=tuple(a for a in self.aliases if a != self.served_name),
            created=self.created,
            withheld=self.withheld,
        )


@dataclass(frozen=True)
class NameConflict:
    """``model`` is claimed by ``loser`` too, but ``winner`` keeps it."""

    model: str
    winner: str
    loser: str


@dataclass(frozen=True)
class RoutingTable:
    """An immutable snapshot: model name or alias -> workload."""

    workloads: tuple[Workload, ...] = ()
    version: int = 0
    by_name: Mapping[str, Workload] = field(default_factory=dict, compare=False)
    conflicts: tuple[NameConflict, ...] = field(default=(), compare=False)

    @classmethod
    def build(cls, workloads: Iterable[Workload], version: int) -> RoutingTable:
        """Index ``workloads`` by served name and alias. A name claimed by several workloads goes
        to the oldest claim (:func:`~sparkrun_operator.plan.names.owners`); the others keep
        their remaining names, and the table records the conflict. A pool's name
        (:attr:`Workload.pool`) goes to it only when no workload routes that name, and between
        pools to the oldest (creation time, then namespace and name). Never raises."""
        items = tuple(workloads)
        won = owners(wl.claim() for wl in items if not wl.pool)
        by_name: dict[str, Workload] = {}
        lost: list[NameConflict] = []
        for wl in items:
            if wl.pool:
                continue
            for name in wl.names:
                winner = won[name].key
                if winner == wl.key:
                    by_name.setdefault(name, wl)
                else:
                    lost.append(NameConflict(name, winner, wl.key))
        for pool in sorted((wl for wl in items if wl.pool), key=_age):
            for name in pool.names:
                holder = by_name.setdefault(name, pool)
                if holder is not pool:
                    lost.append(NameConflict(name, holder.key, pool.key))
        return cls(items, version, by_name, tuple(lost))

    def lookup(self, model: str) -> Workload | None:
        return self.by_name.get(model)


_NEVER = dt.datetime.max.replace(tzinfo=dt.UTC)


def _age(wl: Workload) -> tuple[dt.datetime, str, str]:
    """Oldest first; no creation time sorts last."""
    created = wl.created if wl.created is not None and wl.created.tzinfo is not None else _NEVER
    return created, wl.namespace, wl.name


class RoutingSource(Protocol):
    """Publishes routing tables. Implementations must never block the event loop."""

    def snapshot(self) -> RoutingTable:
        """The current table (cheap: called on every request)."""
        ...

    async def wait_changed(self, version: int) -> RoutingTable:
        """Return the first table whose version differs from ``version`` (maybe at once)."""
        ...

    async def start(self) -> None:
        """Load the first table and begin following changes."""
        ...

    async def close(self) -> None: ...


class TablePublisher:
    """Holds the current table and wakes waiters on change; a building block for sources."""

    def __init__(self) -> None:
        self._table = RoutingTable()
        self._changed = asyncio.Event()

    def snapshot(self) -> RoutingTable:
        return self._table

    def publish(self, workloads: Iterable[Workload]) -> RoutingTable:
        """Replace the table; a contested name affects only itself (logged once per change)."""
        table = RoutingTable.build(workloads, self._table.version + 1)
        if table.conflicts != self._table.conflicts:
            for c in table.conflicts:
                log.warning(
                    "model name %r stays with %s (older, or a workload before a pool); not routed to %s",
                    c.model,
                    c.winner,
                    c.loser,
                )
        self._table = table
        event, self._changed = self._changed, asyncio.Event()
        event.set()
        return self._table

    async def wait_changed(self, version: int) -> RoutingTable:
        while self._table.version == version:
            await self._changed.wait()
        return self._table


def _str_list(raw: Any, what: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(x, str) and x for x in raw):
        raise RoutingError(f"{what} must be a list of non-empty strings")
    return tuple(raw)


def parse_workload(raw: Any, index: int) -> Workload:
    """One entry of a routing document; :class:`RoutingError` names the field that is wrong."""
    where = f"workloads[{index}]"
    if not isinstance(raw, dict):
        raise RoutingError(f"{where} must be a mapping")
    name = raw.get("name")
    served = raw.get("servedName") or raw.get("model")
    if not isinstance(name, str) or not name:
        raise RoutingError(f"{where}.name is required")
    if not isinstance(served, str) or not served:
        raise RoutingError(f"{where}.servedName is required")
    state = raw.get("state", "Running")
    if state not in STATES:
        raise RoutingError(f"{where}.state must be one of {', '.join(STATES)}")
    caps = _str_list(raw.get("capabilities", [TEXT_GENERATION]), f"{where}.capabilities")
    unknown = set(caps) - set(CAPABILITIES)
    if unknown:
        raise RoutingError(f"{where}.capabilities has unknown {sorted(unknown)}; known: {list(CAPABILITIES)}")
    endpoints = tuple(e.rstrip("/") for e in _str_list(raw.get("endpoints"), f"{where}.endpoints"))
    for e in endpoints:
        if not e.startswith(("http://", "https://")):
            raise RoutingError(f"{where}.endpoints: {e!r} is not an http(s) URL")
    timeouts = raw.get("timeouts") or {}
    if not isinstance(timeouts, dict):
        raise RoutingError(f"{where}.timeouts must be a mapping")

    def seconds(key: str) -> float | None:
        value = timeouts.get(key)
        if value is None:
            return None
        if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
            raise RoutingError(f"{where}.timeouts.{key} must be a positive number of seconds")
        return float(value)

    namespace = raw.get("namespace", "default")
    if not isinstance(namespace, str) or not namespace:
        raise RoutingError(f"{where}.namespace must be a non-empty string")
    return Workload(
        namespace=namespace,
        name=name,
        served_name=served,
        aliases=_str_list(raw.get("aliases"), f"{where}.aliases"),
        state=state,
        resting=None if state == "Running" else state,
        capabilities=frozenset(caps),
        endpoints=endpoints,
        prefix_affinity=bool(raw.get("prefixAffinity", False)),
        connect_timeout=seconds("connect"),
        read_timeout=seconds("read"),
        total_timeout=seconds("total"),
    )


def parse_document(text: str) -> list[Workload]:
    """Parse a YAML (or JSON, a subset) routing document."""
    try:
        doc = yaml.safe_load(text) if text.strip() else {}
    except yaml.YAMLError as exc:
        raise RoutingError(f"not valid YAML/JSON: {exc}") from exc
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise RoutingError("the document must be a mapping with a 'workloads' list")
    raw = doc.get("workloads", [])
    if not isinstance(raw, list):
        raise RoutingError("'workloads' must be a list")
    return [parse_workload(item, i) for i, item in enumerate(raw)]


def dump_document(workloads: Iterable[Workload]) -> str:
    """The file form of ``workloads`` (JSON, which YAML readers accept too)."""
    out = []
    for wl in workloads:
        item: dict[str, Any] = {
            "namespace": wl.namespace,
            "name": wl.name,
            "servedName": wl.served_name,
            "aliases": list(wl.aliases),
            "state": wl.state,
            "capabilities": sorted(wl.capabilities),
            "endpoints": list(wl.endpoints),
            "prefixAffinity": wl.prefix_affinity,
        }
        pairs = (("connect", wl.connect_timeout), ("read", wl.read_timeout), ("total", wl.total_timeout))
        timeouts = {k: v for k, v in pairs if v}
        if timeouts:
            item["timeouts"] = timeouts
        out.append(item)
    return json.dumps({"workloads": out}, indent=2) + "\n"


class StaticRoutingSource:
    """Routes from a file; re-read when it changes (polled every ``poll_interval`` seconds)."""

    def __init__(self, path: str | os.PathLike[str], *, poll_interval: float = 1.0) -> None:
        self.path = Path(path)
        self.poll_interval = poll_interval
        self._publisher = TablePublisher()
        self._stamp: tuple[int, int] | None = None
        self._task: asyncio.Task[None] | None = None

    def snapshot(self) -> RoutingTable:
        return self._publisher.snapshot()

    async def wait_changed(self, version: int) -> RoutingTable:
        return await self._publisher.wait_changed(version)

    async def start(self) -> None:
        """Load the file (errors are raised: a gateway must not start on a broken file)."""
        text, stamp = await asyncio.to_thread(self._read)
        table = self._publisher.publish(parse_document(text))
        self._stamp = stamp
        log.info("routing: %d workload(s) from %s", len(table.workloads), self.path)
        self._task = asyncio.create_task(self._follow(), name="static-routing-follow")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _read(self) -> tuple[str, tuple[int, int]]:
        st = self.path.stat()
        return self.path.read_text(), (st.st_mtime_ns, st.st_size)

    async def reload(self) -> bool:
        """Re-read the file if it changed; returns True when a new table was published."""
        try:
            st = await asyncio.to_thread(self.path.stat)
        except OSError as exc:
            log.warning("routing: cannot stat %s: %s (keeping the current table)", self.path, exc)
            return False
        if (st.st_mtime_ns, st.st_size) == self._stamp:
            return False
        try:
            text, stamp = await asyncio.to_thread(self._read)
        except OSError as exc:
            log.warning("routing: cannot read %s: %s (keeping the current table)", self.path, exc)
            return False
        # NB: remember the stamp even when the content is bad, so a broken file is reported once.
        self._stamp = stamp
        try:
            table = self._publisher.publish(parse_document(text))
        except RoutingError as exc:
            log.warning("routing: %s unusable: %s (keeping the current table)", self.path, exc)
            return False
        log.info("routing: reloaded %s (version %d)", self.path, table.version)
        return True

    async def _follow(self) -> None:
        while True:
            await asyncio.sleep(self.poll_interval)
            await self.reload()
