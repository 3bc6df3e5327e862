"""``/v1/streams/logs`` and ``/v1/streams/monitor``: SSE producers over Kubernetes.

Both producers are async generators of SSE frames whose **first** ``__anext__`` validates the
query parameters and raises ``Invalid`` (422) before any header is sent: unknown parameters,
bad types, ``scope`` other than head/all, negative ``tail``, ``follow`` other than true/false,
``interval`` outside 1-60. That first item is ``b""`` (nothing to send).

Logs. Sources are the containers of the pods of InferenceWorkloads (label
``sparkrun.dev/workload``) in the API namespace, narrowed by ``workload_id`` (a workload's
``status.workloadId`` or its name), ``recipe``, ``hosts``/``cluster`` (node names), ``host``,
``container`` and ``source_id`` (``<namespace>/<pod>/<container>``); ``scope=head`` (default)
keeps leader pods only. Each source is read through the pod log API (``tailLines``,
``follow``, and ``limitBytes`` from ``limit_bytes``, an extension of the reference's parameters);
lines become ``{"type": "log", host, container, text, stream, timestamp, role, rank, source_id,
resource}``. A reader failure is an ``error`` event; lines dropped because the client reads too
slowly are reported as a ``gap`` event. Disconnecting cancels every reader. Once every read
ended (or the shim ends the stream: authorization revoked), a ``completeness`` frame says of each
source whether the stream carried all of its output (``shim/logends.py``): each read's end is
judged from the source's pod as read right then (gone, another uid or terminating:
``pod_deleted``; its container's state and restart count).

Monitor. A ``history`` event first (``series`` per host of the shared in-memory sessions, empty
at the start), then a ``frame`` every ``interval`` seconds (default 2) with per-host GPU
occupancy and workloads from node and pod state, and the host's telemetry from the GPU telemetry
agent on it (``shim/telemetry.py``: CPU, memory, GPU utilisation and memory, network rates;
``""`` and a ``telemetry_error`` where no agent answers). Sessions are shared between subscribers
per (host, interval), keep at most 120 points, and linger 5 seconds after their last subscriber.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sparkrun_operator.api.cluster import DEFAULT_GPU_RESOURCE
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import PODS
from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import DaemonError, Invalid, error_body
from sparkrun_operator.ops.redact import Redactor
from sparkrun_operator.ops.secrets import known_secrets
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.render import keys
from sparkrun_operator.shim import logends
from sparkrun_operator.shim.sse import HEARTBEAT, frame
from sparkrun_operator.shim.telemetry import AgentSamples, monitor_detail, monitor_fields

__all__ = ["HISTORY_POINTS", "Streams"]

log = logging.getLogger(__name__)

HISTORY_POINTS = 120
#: Seconds a log stream waits for a line before it sends a heartbeat (and checks the caller again).
HEARTBEAT_SECONDS = 10.0
#: How long a following read's end waits for the pod's status to say the container terminated.
STATUS_SETTLE_SECONDS = 5.0
SETTLE_POLL_SECONDS = 0.5
LINGER = 5.0
_LOG_PARAMS = frozenset(
    {
        "workload_id",
        "recipe",
        "hosts",
        "cluster",
        "host",
        "container",
        "source_id",
        "scope",
        "tail",
        "follow",
        "limit_bytes",
    }
)
#: The largest ``limit_bytes`` (the pod log API's ``limitBytes`` is an int64).
MAX_LIMIT_BYTES = 2**62
_MONITOR_PARAMS = frozenset({"hosts", "cluster", "interval"})

Recheck = Callable[[], Awaitable[None]]


def _check_known(params: Mapping[str, str], known: frozenset[str]) -> None:
    unknown = set(params) - known
    if unknown:
        raise Invalid(f"request: unknown fields: {', '.join(sorted(unknown))}")


def _int(params: Mapping[str, str], name: str, low: int, high: int | None) -> int | None:
    if name not in params:
        return None
    try:
        value = int(params[name])
    except ValueError as error:
        raise Invalid(f"request.{name}: expected integer") from error
    if value < low or (high is not None and value > high):
        raise Invalid(f"request.{name}: number out of range")
    return value


@dataclass(frozen=True)
class _LogAsk:
    scope: str
    tail: int | None
    follow: bool
    limit_bytes: int | None


def _log_params(params: Mapping[str, str]) -> _LogAsk:
    """What a log stream request asks for; ``Invalid`` for a bad parameter."""
    _check_known(params, _LOG_PARAMS)
    scope = params.get("scope", "head")
    if scope not in ("head", "all"):
        raise Invalid("request.scope: unsupported value")
    tail = _int(params, "tail", 0, None)
    follow_raw = params.get("follow", "false")
    if follow_raw not in ("true", "false"):
        raise Invalid("follow must be true or false")
    for selector in ("host", "container", "source_id"):
        if selector in params and not params[selector].strip():
            raise Invalid(f"{selector} must be a non-empty string")
    limit_bytes = _int(params, "limit_bytes", 1, MAX_LIMIT_BYTES)
    return _LogAsk(scope=scope, tail=tail, follow=follow_raw == "true", limit_bytes=limit_bytes)


def _hosts(params: Mapping[str, str]) -> list[str] | None:
    if "hosts" not in params:
        return None
    return [h.strip() for h in params["hosts"].split(",") if h.strip()]


@dataclass
class _Session:
    host: str
    interval: int
    points: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    subscribers: int = 0
    released: float = 0.0
    last_sample: float = 0.0


class Streams:
    """Log and monitor streams of one shim."""

    def __init__(self, *, rest: Kube, settings: Settings) -> None:
        self.rest = rest
        self.settings = settings
        self.sessions: dict[tuple[str, int], _Session] = {}
        self.telemetry = AgentSamples(rest=rest, namespace=settings.namespace)
        self.heartbeat = HEARTBEAT_SECONDS
        self.settle = STATUS_SETTLE_SECONDS

    # -- logs -----------------------------------------------------------------------------

    async def logs(self, params: Mapping[str, str], recheck: Recheck) -> AsyncGenerator[bytes, None]:
        ask = _log_params(params)
        sources, specs, starts = await self._log_sources(params, ask.scope)
        # NB: every line is redacted: name and token patterns, and the values of the Secrets the
        # streamed pods and their workloads reference (as diagnostics bundles are).
        redact = await known_secrets(self.rest, self.settings.namespace, specs)
        yield b""
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=256)
        reads = [logends.SourceRead(source_id=source["source_id"]) for source in sources]
        readers = [
            asyncio.create_task(self._read(source, seen, ask, redact, queue, starts[seen.source_id]))
            for source, seen in zip(sources, reads, strict=True)
        ]
        remaining, reported = len(readers), 0
        try:
            try:
                while remaining:
                    if (dropped := sum(r.dropped for r in reads)) > reported:
                        yield frame({"type": "gap", "dropped": dropped - reported})
                        reported = dropped
                    try:
                        item = await asyncio.wait_for(queue.get(), self.heartbeat)
                    except TimeoutError:
                        await recheck()
                        yield HEARTBEAT
                        continue
                    if item is None:
                        remaining -= 1
                        continue
                    yield frame(item)
                if (dropped := sum(r.dropped for r in reads)) > reported:
                    yield frame({"type": "gap", "dropped": dropped - reported})
            except DaemonError as error:  # NB: the caller lost its permission, or the like
                _, body, _ = error_body(error)
                yield frame({"type": "error", **body})
                for seen in reads:
                    if seen.findings is None:
                        seen.findings = logends.cut(
                            seen, "stream_closed", f"the daemon API ended the stream: {error.detail}"
                        )
            yield frame(logends.marker(reads))
        finally:
            for task in readers:
                task.cancel()
            for task in readers:
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task

    async def _read(
        self,
        source: dict[str, Any],
        seen: logends.SourceRead,
        ask: _LogAsk,
        redact: Redactor,
        queue: asyncio.Queue[dict[str, Any] | None],
        start: logends.Start,
    ) -> None:
        """Read one source's log into ``queue`` (a line the queue has no room for is dropped and
        counted), then decide its completeness (``seen.findings``) and put ``None``."""
        query: dict[str, Any] = {"container": source["container"], "follow": ask.follow, "timestamps": False}
        if ask.tail is not None:
            query["tailLines"] = ask.tail
        if ask.limit_bytes is not None:
            query["limitBytes"] = ask.limit_bytes
        resource = source["resource"]
        path = PODS.path(resource["namespace"], resource["name"]) + "/log"
        try:
            try:
                async for raw in self.rest.stream_lines(path, query=query):
                    seen.take(raw)
                    record = {
                        "type": "log",
                        **source,
                        # NB: a long line is redacted in a worker thread (ops.redact.THREAD_AT).
                        "text": await redact.apply(raw.decode("utf-8", "replace").rstrip("\n")),
                        "stream": "stdout",
                        "timestamp": time.time(),
                    }
                    try:
                        queue.put_nowait(record)
                        seen.lines += 1
                    except asyncio.QueueFull:
                        seen.dropped += 1
                seen.eof()
            except k8s_errors.KubeError as error:
                seen.error = f"Reading logs of {source['source_id']} failed: {error.message or error.status}"
                await queue.put(
                    {
                        "type": "error",
                        "source_id": source["source_id"],
                        "detail": seen.error,
                        "error": {
                            "type": "LogReadError",
                            "retryable": True,
                            "attrs": {"status": error.status},
                        },
                    }
                )
            seen.findings = await self._judge(source, seen, ask, start)
        except asyncio.CancelledError:
            raise
        except Exception as error:  # NB: unexpected: the source still ends, as incomplete
            log.exception("reading logs of %s failed", source["source_id"])
            seen.findings = logends.cut(
                seen, "read_error", f"Reading logs of {source['source_id']} failed: {type(error).__name__}"
            )
        await queue.put(None)

    async def _judge(
        self, source: dict[str, Any], seen: logends.SourceRead, ask: _LogAsk, start: logends.Start
    ) -> list[dict[str, Any]]:
        """The completeness findings of a source whose read ended, from its pod read once more.
        A following read ends when the container's process does, which the pod's status may say
        a moment later: a container still running then is read again for up to
        :data:`STATUS_SETTLE_SECONDS` before the stream calls its end a cut."""
        resource = source["resource"]
        deadline = time.monotonic() + self.settle
        while True:
            try:
                pod = await self.rest.get(PODS, resource["name"], resource["namespace"])
                pod_read = True
            except k8s_errors.KubeError:
                pod, pod_read = None, False
            findings = logends.judge(
                seen,
                pod,
                pod_read=pod_read,
                uid=resource.get("uid"),
                container=source["container"],
                follow=ask.follow,
                tail=ask.tail,
                limit_bytes=ask.limit_bytes,
                start=start,
            )
            if time.monotonic() >= deadline or not any(f.get("reason") == "stream_cut" for f in findings):
                return findings
            await asyncio.sleep(SETTLE_POLL_SECONDS)

    async def _log_sources(
        self, params: Mapping[str, str], scope: str
    ) -> tuple[list[dict[str, Any]], list[Any], dict[str, logends.Start]]:
        """The log sources the parameters select, the specs of their pods and workloads, and each
        source's container as the stream begins (by source id)."""
        namespace = self.settings.namespace
        workloads = {w["metadata"]["name"]: w for w in await self.rest.list(kube.WORKLOADS, namespace)}
        wanted: set[str] | None = None
        if "workload_id" in params:
            wid = params["workload_id"]
            wanted = {n for n, w in workloads.items() if n == wid or kube.workload_id_of(w) == wid}
        if "recipe" in params:
            by_recipe = {
                n
                for n, w in workloads.items()
                if ((w.get("spec") or {}).get("recipe") or {}).get("name") == params["recipe"]
            }
            wanted = by_recipe if wanted is None else wanted & by_recipe
        hosts = _hosts(params)
        if hosts is None and "cluster" in params:
            hosts, _ = await kube.cluster_hosts(
                self.rest, hosts=None, cluster=params["cluster"], fallback_all=False
            )
        pods = await self.rest.list(PODS, namespace, label_selector=keys.LABEL_WORKLOAD)
        sources = []
        specs: list[Any] = []
        starts: dict[str, logends.Start] = {}
        for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
            meta, spec = pod["metadata"], pod.get("spec", {})
            labels = meta.get("labels") or {}
            workload = labels.get(keys.LABEL_WORKLOAD)
            role = labels.get(keys.LABEL_ROLE, "solo")
            node = spec.get("nodeName") or ""
            if wanted is not None and workload not in wanted:
                continue
            if scope == "head" and role == keys.ROLE_WORKER:
                continue
            if hosts is not None and node not in hosts:
                continue
            if "host" in params and node != params["host"]:
                continue
            specs.append(spec)
            if workload in workloads:
                specs.append(workloads[workload].get("spec") or {})
            for container in spec.get("containers") or ():
                source_id = f"{meta['namespace']}/{meta['name']}/{container['name']}"
                if "container" in params and container["name"] != params["container"]:
                    continue
                if "source_id" in params and source_id != params["source_id"]:
                    continue
                rank = labels.get("batch.kubernetes.io/job-completion-index")
                starts[source_id] = logends.start_of(pod, container["name"])
                sources.append(
                    {
                        "host": node,
                        "container": container["name"],
                        "role": role,
                        "rank": int(rank) if rank and rank.isdigit() else None,
                        "source_id": source_id,
                        "workload_id": kube.workload_id_of(workloads[workload])
                        if workload in workloads
                        else workload,
                        "resource": {
                            "kind": "Pod",
                            "namespace": meta["namespace"],
                            "name": meta["name"],
                            "uid": meta.get("uid"),
                            "instance": container["name"],
                        },
                    }
                )
        return sources, specs, starts

    # -- monitor --------------------------------------------------------------------------

    async def monitor(self, params: Mapping[str, str], recheck: Recheck) -> AsyncGenerator[bytes, None]:
        _check_known(params, _MONITOR_PARAMS)
        interval = _int(params, "interval", 1, 60) or 2
        hosts, _ = await kube.cluster_hosts(self.rest, hosts=_hosts(params), cluster=params.get("cluster"))
        yield b""
        sessions = [self._subscribe(host, interval) for host in hosts]
        try:
            yield frame(
                {
                    "type": "history",
                    "queried_at": time.time(),
                    "series": [{"host": s.host, "points": list(s.points)} for s in sessions],
                }
            )
            while True:
                await recheck()
                rows = await self._sample(sessions)
                yield frame({"type": "frame", "queried_at": time.time(), "hosts": rows})
                await asyncio.sleep(interval)
        finally:
            now = time.monotonic()
            for session in sessions:
                session.subscribers -= 1
                if session.subscribers == 0:
                    session.released = now
            self._prune()

    def _subscribe(self, host: str, interval: int) -> _Session:
        self._prune()
        session = self.sessions.setdefault((host, interval), _Session(host=host, interval=interval))
        session.subscribers += 1
        return session

    def _prune(self) -> None:
        now = time.monotonic()
        for key, session in list(self.sessions.items()):
            if session.subscribers == 0 and now - session.released >= LINGER:
                del self.sessions[key]

    async def _sample(self, sessions: list[_Session]) -> list[dict[str, Any]]:
        seen = await kube.occupancy(self.rest, namespaces=self.settings.pod_namespaces)
        # NB: only hosts that are nodes are read (a ``hosts`` parameter may name anything).
        fresh_for = min((s.interval for s in sessions), default=2) * 0.9
        readings = await self.telemetry.read((s.host for s in sessions if s.host in seen.nodes), fresh_for)
        rows = []
        for session in sessions:
            node = seen.nodes.get(session.host)
            pods = seen.pods_on(session.host)
            allocatable = node.allocatable.get(DEFAULT_GPU_RESOURCE, 0) if node else 0
            used = sum(p.gpus for p in pods)
            reading = readings.get(session.host)
            sample = {
                "host": session.host,
                "reachable": bool(node and node.ready),
                "gpu_product": (node.labels.get("nvidia.com/gpu.product", "") if node else ""),
                "gpu_count": allocatable,
                "gpus_allocated": used,
                **monitor_fields(reading),
            }
            if time.monotonic() - session.last_sample >= session.interval * 0.9:
                session.points.append({"recorded_at": seen.observed_at, "sample": sample})
                session.last_sample = time.monotonic()
            workloads = sorted({f"{p.namespace}/{p.workload}" for p in pods if p.workload})
            rows.append(
                {
                    **sample,
                    "used_slots": used,
                    "free_slots": max(0, allocatable - used),
                    "workloads": workloads,
                    **monitor_detail(reading if node else None),
                }
            )
        return rows
