"""Each host's telemetry for ``/v1/streams/monitor``, read from the GPU telemetry agent on it.

The agent (``sparkrun-k8s agent``, ADR 0058) answers ``GET /v1/sample`` with an
:class:`~sparkrun_operator.api.telemetry.NodeSample`. For a host the shim takes, as the apiserver
lists them, the pods in **its own namespace** that carry the agent's label
(:data:`~sparkrun_operator.api.telemetry.AGENT_SELECTOR`) and run on that node, and keeps only
those that are Running, Ready, not being deleted and controlled by a DaemonSet (a pod that merely
looks like an agent is not one: tenants have no pods in the shim's namespace, and a stray pod
there is not owned by a DaemonSet). Of these the newest is asked, at its pod IP and the container
port named ``telemetry``, over plain HTTP with no credentials (a fresh client: no cookies, no
proxy from the environment, no redirects), within :data:`FETCH_TIMEOUT` seconds for the whole
read, the body at most :data:`~sparkrun_operator.api.telemetry.SAMPLE_MAX_BYTES`.

Anything that goes wrong (no agent, not ready, unreachable, slow, a bad body: not a
:class:`~sparkrun_operator.api.telemetry.NodeSample`, or numbers a frame cannot carry, ``NaN``,
``Infinity`` or beyond 2**64) is a
:class:`HostTelemetry` with ``sample=None`` and a short ``error``: the monitor then shows the
telemetry fields as ``""`` and never fails or stalls for it. A host's reading is shared for
``fresh_for`` seconds (the monitor's interval), and a read in flight is joined, so N subscribers
cause one read per host and interval. Reads of different hosts run concurrently, at most
:data:`CONCURRENCY` at a time; a host that waits for a slot longer than the timeout counts as
unreachable for that round.

What goes wrong is logged once per host and change of state (no agent, unreachable, a bad
answer, answering again), at most one line per host every :data:`LOG_EVERY` seconds (a change
held back is logged when the window has passed, if it still holds): an unreachable agent is
not a warning every interval. Expected failures (a timeout, a refused or reset connection, a bad
body, no agent on the node) are one line without a traceback; only an unexpected exception (a
bug) carries its traceback.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
import pydantic

from sparkrun_operator.api.telemetry import (
    AGENT_PORT_NAME,
    AGENT_SELECTOR,
    SAMPLE_MAX_BYTES,
    SAMPLE_PATH,
    NodeSample,
)
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import PODS

__all__ = [
    "CONCURRENCY",
    "FETCH_TIMEOUT",
    "LOG_EVERY",
    "AgentSamples",
    "HostTelemetry",
    "agent_endpoint",
    "monitor_detail",
    "monitor_fields",
]

log = logging.getLogger(__name__)

#: Seconds one host's read may take, pod lookup included.
FETCH_TIMEOUT: Final = 2.0
#: Hosts read at the same time.
CONCURRENCY: Final = 32
#: Seconds between two log lines about one host's telemetry, at least.
LOG_EVERY: Final = 300.0
#: Agent pods considered per node (a DaemonSet has one; a rollout briefly two).
_PODS_PER_NODE: Final = 8
#: Readings of hosts nobody asked for in this long are forgotten.
_FORGET_AFTER: Final = 120.0
_NODE_NAME_MAX: Final = 253
_NODE_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")
#: The largest number a sample may carry: sums and means of many stay finite and printable in JSON.
_NUMBER_MAX: Final = 2**64


Endpoint = tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, int]


@dataclass(frozen=True)
class HostTelemetry:
    """One host's latest reading: the agent's sample, or why there is none."""

    sample: NodeSample | None
    error: str | None = None


@dataclass
class _Entry:
    read_at: float = float("-inf")
    value: HostTelemetry | None = None
    pending: asyncio.Task[HostTelemetry] | None = None
    asked_at: float = 0.0
    logged: str | None = None  # the error last logged (None: fine, or never failed)
    logged_at: float = float("-inf")


@dataclass(frozen=True)
class _Outcome:
    """A read's reading, how loudly a failure is logged, and an unexpected exception's cause."""

    value: HostTelemetry
    level: int = logging.WARNING
    cause: BaseException | None = None


class AgentSamples:
    """Reads and shares the hosts' agent samples (one per shim)."""

    def __init__(
        self,
        *,
        rest: Kube,
        namespace: str,
        timeout: float = FETCH_TIMEOUT,
        concurrency: int = CONCURRENCY,
    ) -> None:
        self.rest = rest
        self.namespace = namespace
        self.timeout = timeout
        self._slots = asyncio.Semaphore(concurrency)
        self._entries: dict[str, _Entry] = {}

    async def read(self, hosts: Iterable[str], fresh_for: float) -> dict[str, HostTelemetry]:
        """Each host's telemetry, at most ``fresh_for`` seconds old (reads shared, in flight joined)."""
        wanted = list(dict.fromkeys(hosts))
        self._forget()
        results = await asyncio.gather(*(self._reading(host, fresh_for) for host in wanted))
        return dict(zip(wanted, results, strict=True))

    async def _reading(self, host: str, fresh_for: float) -> HostTelemetry:
        now = time.monotonic()
        entry = self._entries.setdefault(host, _Entry())
        entry.asked_at = now
        if entry.value is not None and now - entry.read_at < fresh_for:
            return entry.value
        if entry.pending is None:
            entry.pending = asyncio.create_task(self._refresh(host, entry))
        # NB: shielded: one subscriber leaving does not cancel the read the others wait on.
        return await asyncio.shield(entry.pending)

    async def _refresh(self, host: str, entry: _Entry) -> HostTelemetry:
        try:
            outcome = await self._bounded(host)
        finally:
            entry.pending = None
        entry.value, entry.read_at = outcome.value, time.monotonic()
        _log_change(host, entry, outcome)
        return outcome.value

    async def _bounded(self, host: str) -> _Outcome:
        try:
            async with asyncio.timeout(self.timeout):
                async with self._slots:
                    return await self._fetch(host)
        except TimeoutError:
            return _Outcome(
                HostTelemetry(None, f"the telemetry agent did not answer within {self.timeout:g} s")
            )
        except asyncio.CancelledError:
            raise
        except (aiohttp.ClientError, OSError) as error:  # NB: refused, reset, unreachable: expected
            return _Outcome(
                HostTelemetry(None, f"reading the telemetry agent failed: {type(error).__name__}")
            )
        except Exception as error:  # NB: never fails the stream; the reason is logged and shown
            why = f"reading the telemetry agent failed: {type(error).__name__}"
            return _Outcome(HostTelemetry(None, why), cause=error)

    def _forget(self) -> None:
        now = time.monotonic()
        for host, entry in list(self._entries.items()):
            if entry.pending is None and now - entry.asked_at > _FORGET_AFTER:
                del self._entries[host]

    async def _fetch(self, host: str) -> _Outcome:
        endpoint = await self._endpoint(host)
        if isinstance(endpoint, str):  # NB: no agent (yet) on the node: the agent is optional
            return _Outcome(HostTelemetry(None, endpoint), level=logging.INFO)
        return _Outcome(await _get_sample(*endpoint, host=host))

    async def _endpoint(self, host: str) -> Endpoint | str:
        """Where ``host``'s agent answers, as the apiserver lists the pods; else why nowhere."""
        if not _node_name(host):
            return "not a node name"
        try:
            pods = await self.rest.list(
                PODS,
                self.namespace,
                label_selector=AGENT_SELECTOR,
                field_selector=f"spec.nodeName={host}",
                limit=_PODS_PER_NODE,
                cached=True,
            )
        except k8s_errors.KubeError as error:
            return f"listing the telemetry agent's pods failed: {error.status}"
        return agent_endpoint(pods, host)


def _log_change(host: str, entry: _Entry, outcome: _Outcome) -> None:
    """One line when ``host``'s state (its error, or fine) differs from the last one logged, at
    most one per :data:`LOG_EVERY` seconds; a traceback only for an unexpected exception."""
    state = outcome.value.error
    now = time.monotonic()
    if state == entry.logged or now - entry.logged_at < LOG_EVERY:
        return
    entry.logged, entry.logged_at = state, now
    if state is None:
        log.info("the telemetry agent of %s answers again", host)
    elif outcome.cause is not None:
        log.warning("no telemetry from %s: %s", host, state, exc_info=outcome.cause)
    else:
        log.log(outcome.level, "no telemetry from %s: %s", host, state)


def _node_name(host: str) -> bool:
    return 0 < len(host) <= _NODE_NAME_MAX and set(host) <= _NODE_NAME_CHARS


def _owned_by_daemonset(meta: Mapping[str, Any]) -> bool:
    refs = meta.get("ownerReferences")
    return isinstance(refs, list) and any(
        isinstance(ref, Mapping)
        and ref.get("kind") == "DaemonSet"
        and ref.get("apiVersion") == "apps/v1"
        and ref.get("controller") is True
        for ref in refs
    )


def _ready(pod: Mapping[str, Any]) -> bool:
    status = pod.get("status")
    if not isinstance(status, Mapping) or status.get("phase") != "Running":
        return False
    conditions = status.get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )


def _port(pod: Mapping[str, Any]) -> int | None:
    spec = pod.get("spec")
    containers = spec.get("containers") if isinstance(spec, Mapping) else None
    for container in containers if isinstance(containers, list) else ():
        ports = container.get("ports") if isinstance(container, Mapping) else None
        for port in ports if isinstance(ports, list) else ():
            if not isinstance(port, Mapping) or port.get("name") != AGENT_PORT_NAME:
                continue
            number = port.get("containerPort")
            if isinstance(number, int) and not isinstance(number, bool) and 0 < number < 65536:
                return number
    return None


def _ip(pod: Mapping[str, Any]) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    status = pod.get("status")
    raw = status.get("podIP") if isinstance(status, Mapping) else None
    if not isinstance(raw, str) or len(raw) > 64:
        return None
    try:
        return ipaddress.ip_address(raw)
    except ValueError:
        return None


def agent_endpoint(pods: Sequence[Mapping[str, Any]], host: str) -> Endpoint | str:
    """(pod IP, port) of the agent to ask on ``host`` from the listed pods, else why none."""
    candidates = []
    for pod in pods[:_PODS_PER_NODE]:
        meta = pod.get("metadata")
        spec = pod.get("spec")
        if not isinstance(meta, Mapping) or not isinstance(spec, Mapping) or spec.get("nodeName") != host:
            continue
        if meta.get("deletionTimestamp") or not _owned_by_daemonset(meta):
            continue
        candidates.append(pod)
    if not candidates:
        return "no telemetry agent runs on this node"
    ready = [p for p in candidates if _ready(p)]
    if not ready:
        return "the telemetry agent on this node is not ready"
    ready.sort(key=lambda p: str(p["metadata"].get("creationTimestamp") or ""), reverse=True)
    for pod in ready:
        ip, port = _ip(pod), _port(pod)
        if ip is not None and port is not None:
            return ip, port
    return f"the telemetry agent on this node has no pod IP or no port named {AGENT_PORT_NAME!r}"


async def _get_sample(
    ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int, *, host: str
) -> HostTelemetry:
    shown = f"[{ip}]" if ip.version == 6 else str(ip)
    url = f"http://{shown}:{port}{SAMPLE_PATH}"
    # NB: a client of its own: no Authorization, no cookies, no proxy or netrc from the environment.
    async with (
        aiohttp.ClientSession(cookie_jar=aiohttp.DummyCookieJar(), trust_env=False) as http,
        http.get(url, allow_redirects=False, headers={"Accept": "application/json"}) as response,
    ):
        if response.status != 200:
            return HostTelemetry(None, f"the telemetry agent answered HTTP {response.status}")
        body = bytearray()
        async for chunk in response.content.iter_chunked(65536):
            body += chunk
            if len(body) > SAMPLE_MAX_BYTES:
                return HostTelemetry(None, f"the telemetry agent's sample exceeds {SAMPLE_MAX_BYTES} bytes")
    try:
        sample = NodeSample.model_validate_json(bytes(body))
    except (pydantic.ValidationError, ValueError):
        return HostTelemetry(None, "the telemetry agent's sample is not valid")
    # NB: NaN, Infinity and huge numbers parse, but a monitor frame (strict JSON) cannot carry them.
    if not _plausible(sample.model_dump()):
        return HostTelemetry(None, "the telemetry agent's sample is not valid")
    if sample.node != host:
        return HostTelemetry(None, "the telemetry agent reports another node")
    return HostTelemetry(sample)


def _plausible(value: Any) -> bool:
    """Every number in ``value`` (a sample's dump) finite and smaller than :data:`_NUMBER_MAX`."""
    if isinstance(value, float):
        return math.isfinite(value) and abs(value) < _NUMBER_MAX
    if isinstance(value, int):
        return abs(value) < _NUMBER_MAX
    if isinstance(value, Mapping):
        return all(_plausible(v) for v in value.values())
    if isinstance(value, list):
        return all(_plausible(v) for v in value)
    return True


# -- the monitor's fields ------------------------------------------------------------------------

#: The monitor frame's telemetry fields (the shim's wire shape; ``""`` = unknown).
EMPTY: Final[Mapping[str, Any]] = {
    "cpu_percent": "",
    "memory_used_bytes": "",
    "gpu_util_percent": "",
    "gpu_memory_used_bytes": "",
    "rx_bytes_per_second": "",
    "tx_bytes_per_second": "",
}


def _known(value: float | None) -> float | str:
    return "" if value is None else round(value, 2)


def monitor_fields(reading: HostTelemetry | None) -> dict[str, Any]:
    """The summary fields of one host (numbers, ``""`` where unknown): host CPU %, memory used,
    the mean GPU utilisation over the GPUs that report one, GPU memory used summed over all GPUs
    (``""`` unless every GPU reports it), and network receive/transmit bytes per second."""
    sample = reading.sample if reading is not None else None
    if sample is None:
        return dict(EMPTY)
    utils = [g.utilization_percent for g in sample.gpus if g.utilization_percent is not None]
    used = [g.memory_used_bytes for g in sample.gpus]
    return {
        "cpu_percent": _known(sample.host.cpu_percent),
        "memory_used_bytes": "" if sample.host.memory_used_bytes is None else sample.host.memory_used_bytes,
        "gpu_util_percent": round(sum(utils) / len(utils), 2) if utils else "",
        "gpu_memory_used_bytes": sum(u for u in used if u is not None) if used and None not in used else "",
        "rx_bytes_per_second": _known(sample.host.rx_bytes_per_second),
        "tx_bytes_per_second": _known(sample.host.tx_bytes_per_second),
    }


def monitor_detail(reading: HostTelemetry | None) -> dict[str, Any]:
    """The frame's extra keys: ``telemetry_error`` (why the fields are ``""``, else ``None``),
    ``memory_total_bytes``, ``driver_version`` and ``gpus`` (one object per GPU; ``None`` =
    unknown)."""
    sample = reading.sample if reading is not None else None
    if sample is None:
        error = reading.error if reading is not None else "no telemetry for this host"
        return {"telemetry_error": error, "memory_total_bytes": "", "driver_version": None, "gpus": []}
    error = None if sample.nvml.available else f"NVML unavailable: {sample.nvml.error or 'unknown reason'}"
    total = sample.host.memory_total_bytes
    return {
        "telemetry_error": error,
        "memory_total_bytes": "" if total is None else total,
        "driver_version": sample.nvml.driver_version,
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "utilization_percent": g.utilization_percent,
                "memory_used_bytes": g.memory_used_bytes,
                "memory_total_bytes": g.memory_total_bytes,
                "temperature_celsius": g.temperature_celsius,
                "power_watts": g.power_watts,
                "processes": len(g.processes),
            }
            for g in sample.gpus
        ],
    }
