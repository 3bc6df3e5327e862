"""The monitor's telemetry reads (``shim/telemetry.py``), against real HTTP servers on loopback.

Tested: which listed pods count as the agent (the shim's namespace is the lister's; here the
DaemonSet controller reference, Running + Ready, not deleting, on that node, a port named
``telemetry``, a real pod IP; the newest of several); a sample read and summed up (mean GPU
utilisation, GPU memory summed only when every GPU reports it, host CPU, memory, network); every
failure (HTTP error, a body over the bound, not JSON, a sample of another node, an agent that
does not answer in time, nothing listening) is a reading without a sample and a reason, never an
exception; a slow agent does not hold another host's reading beyond the timeout; concurrent and
repeated asks within the interval share one read; no credentials or cookies reach the agent.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from sparkrun_operator.api.telemetry import SAMPLE_MAX_BYTES, SAMPLE_PATH, NodeSample
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.shim import telemetry
from sparkrun_operator.shim.sse import frame
from sparkrun_operator.shim.telemetry import AgentSamples, Endpoint, HostTelemetry, agent_endpoint

LOOPBACK = ipaddress.ip_address("127.0.0.1")


def _sample(node: str, **host: Any) -> dict[str, Any]:
    return {
        "node": node,
        "time": time.time(),
        "nvml": {"available": True, "driverVersion": "550.54.15"},
        "gpus": [
            {"index": 0, "utilizationPercent": 30.0, "memoryUsedBytes": 1000, "memoryTotalBytes": 8000},
            {"index": 1, "utilizationPercent": 50.0, "memoryUsedBytes": 3000, "memoryTotalBytes": 8000},
        ],
        "host": {
            "cpuPercent": 12.5,
            "memoryUsedBytes": 4096,
            "memoryTotalBytes": 8192,
            "rxBytesPerSecond": 100.0,
            "txBytesPerSecond": 200.0,
            **host,
        },
    }


@dataclass
class Agent:
    """A stand-in agent on loopback: what it answers, per node, and what it was asked."""

    port: int = 0
    answer: Callable[[str], web.StreamResponse] | None = None
    delay: float = 0.0
    requests: list[dict[str, str]] = field(default_factory=list)


@pytest.fixture
async def agent() -> AsyncIterator[Agent]:
    state = Agent()

    async def sample(request: web.Request) -> web.StreamResponse:
        state.requests.append(dict(request.headers))
        node = request.query.get("node", "node-a")
        if state.delay:
            await asyncio.sleep(state.delay)
        if state.answer is not None:
            return state.answer(node)
        return web.json_response(_sample(node))

    app = web.Application()
    app.router.add_get(SAMPLE_PATH, sample)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    state.port = runner.addresses[0][1]
    try:
        yield state
    finally:
        await runner.cleanup()


class Samples(AgentSamples):
    """AgentSamples whose pod lookup is a fixed table (the lookup's rules are tested on their own,
    and against the apiserver in tests/shim/test_monitor_telemetry.py)."""

    def __init__(self, endpoints: dict[str, Endpoint | str], **kwargs: Any) -> None:
        super().__init__(rest=Kube.__new__(Kube), namespace="ops", **kwargs)
        self.endpoints = endpoints
        self.lookups = 0

    async def _endpoint(self, host: str) -> Endpoint | str:
        self.lookups += 1
        return self.endpoints[host]


def _pod(node: str = "node-a", **extra: Any) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {
            "name": "agent-x",
            "creationTimestamp": "2026-01-01T00:00:00Z",
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "DaemonSet",
                    "name": "agent",
                    "uid": "u",
                    "controller": True,
                }
            ],
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "agent", "ports": [{"name": "telemetry", "containerPort": 9400}]}],
        },
        "status": {
            "phase": "Running",
            "podIP": "10.1.2.3",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    for key, value in extra.items():
        section, _, name = key.partition("__")
        pod[section][name] = value
    return pod


def test_the_agent_pod_is_chosen_strictly() -> None:
    ok = agent_endpoint([_pod()], "node-a")
    assert ok == (ipaddress.ip_address("10.1.2.3"), 9400)
    assert agent_endpoint([], "node-a") == "no telemetry agent runs on this node"
    assert agent_endpoint([_pod("node-b")], "node-a") == "no telemetry agent runs on this node"
    not_owned = [
        _pod(metadata__ownerReferences=[]),
        _pod(metadata__ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "controller": True}]),
        _pod(metadata__ownerReferences=[{"apiVersion": "apps/v1", "kind": "DaemonSet", "controller": False}]),
        _pod(metadata__ownerReferences=[{"apiVersion": "x.io/v1", "kind": "DaemonSet", "controller": True}]),
        _pod(metadata__ownerReferences="DaemonSet"),
        _pod(metadata__deletionTimestamp="2026-01-01T00:00:01Z"),
    ]
    for pod in not_owned:
        assert agent_endpoint([pod], "node-a") == "no telemetry agent runs on this node", pod
    for status in (
        {"phase": "Pending"},
        {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]},
    ):
        assert agent_endpoint(
            [_pod(status__phase=status["phase"], status__conditions=status.get("conditions"))], "node-a"
        ) == ("the telemetry agent on this node is not ready")
    for bad in (
        _pod(status__podIP="not-an-ip"),
        _pod(status__podIP=None),
        _pod(spec__containers=[{"name": "agent", "ports": [{"name": "metrics", "containerPort": 9400}]}]),
        _pod(spec__containers=[{"name": "agent", "ports": [{"name": "telemetry", "containerPort": 70000}]}]),
        _pod(spec__containers=[{"name": "agent", "ports": [{"name": "telemetry", "containerPort": True}]}]),
    ):
        assert isinstance(agent_endpoint([bad], "node-a"), str)
    newer = _pod(status__podIP="fd00::7")
    newer["metadata"]["creationTimestamp"] = "2026-02-01T00:00:00Z"
    assert agent_endpoint([_pod(), newer], "node-a") == (ipaddress.ip_address("fd00::7"), 9400)


async def test_a_sample_is_read_and_summed_up(agent: Agent) -> None:
    samples = Samples({"node-a": (LOOPBACK, agent.port)})
    readings = await samples.read(["node-a"], fresh_for=1.0)
    reading = readings["node-a"]
    assert reading.sample is not None
    assert telemetry.monitor_fields(reading) == {
        "cpu_percent": 12.5,
        "memory_used_bytes": 4096,
        "gpu_util_percent": 40.0,
        "gpu_memory_used_bytes": 4000,
        "rx_bytes_per_second": 100.0,
        "tx_bytes_per_second": 200.0,
    }
    detail = telemetry.monitor_detail(reading)
    assert detail["telemetry_error"] is None
    assert detail["driver_version"] == "550.54.15"
    assert detail["memory_total_bytes"] == 8192
    assert [g["utilization_percent"] for g in detail["gpus"]] == [30.0, 50.0]
    # no credentials, no cookies: the agent sees a plain request
    assert agent.requests
    assert not {"Authorization", "Cookie", "Proxy-Authorization"} & set(agent.requests[0])


def test_unknown_values_stay_empty() -> None:
    empty = telemetry.monitor_fields(None)
    assert set(empty.values()) == {""}
    assert telemetry.monitor_fields(HostTelemetry(None, "no agent")) == empty
    partial = NodeSample.model_validate(
        {
            "node": "n",
            "time": 0,
            "nvml": {"available": False, "error": "NVML Shared Library Not Found"},
            "gpus": [{"index": 0, "utilizationPercent": 10}, {"index": 1, "memoryUsedBytes": 5}],
        }
    )
    fields = telemetry.monitor_fields(HostTelemetry(partial))
    assert fields["gpu_util_percent"] == 10
    assert fields["gpu_memory_used_bytes"] == ""  # one GPU does not report it: no partial sum
    assert fields["cpu_percent"] == ""
    assert telemetry.monitor_detail(HostTelemetry(partial))["telemetry_error"] == (
        "NVML unavailable: NVML Shared Library Not Found"
    )
    assert telemetry.monitor_detail(HostTelemetry(None, "why"))["telemetry_error"] == "why"


@pytest.mark.parametrize(
    ("answer", "reason"),
    [
        (lambda node: web.Response(status=500, text="boom"), "answered HTTP 500"),
        (lambda node: web.Response(status=302, headers={"Location": "http://example.invalid/"}), "HTTP 302"),
        (lambda node: web.Response(body=b"x" * (SAMPLE_MAX_BYTES + 10)), "exceeds"),
        (lambda node: web.Response(text="not json"), "not valid"),
        (lambda node: web.json_response({**_sample(node), "gpus": "many"}), "not valid"),
        (lambda node: web.json_response(_sample("elsewhere")), "another node"),
    ],
)
async def test_a_bad_answer_is_no_sample(
    agent: Agent, answer: Callable[[str], web.StreamResponse], reason: str
) -> None:
    agent.answer = answer
    reading = (await Samples({"node-a": (LOOPBACK, agent.port)}).read(["node-a"], 1.0))["node-a"]
    assert reading.sample is None
    assert reading.error is not None
    assert reason in reading.error


async def test_nothing_listening_and_no_agent_are_no_sample() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    samples = Samples({"a": (LOOPBACK, closed), "b": "no telemetry agent runs on this node"})
    readings = await samples.read(["a", "b"], 1.0)
    assert readings["a"].sample is None
    assert readings["a"].error == "reading the telemetry agent failed: ClientConnectorError"
    assert readings["b"] == HostTelemetry(None, "no telemetry agent runs on this node")


async def test_a_slow_agent_delays_no_one_beyond_the_timeout(agent: Agent) -> None:
    fast_agent = Agent()
    agent.delay = 1.5
    app = web.Application()

    async def fast(request: web.Request) -> web.Response:
        return web.json_response(_sample("fast"))

    app.router.add_get(SAMPLE_PATH, fast)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fast_agent.port = runner.addresses[0][1]
    try:
        samples = Samples({"slow": (LOOPBACK, agent.port), "fast": (LOOPBACK, fast_agent.port)}, timeout=0.5)
        started = time.monotonic()
        readings = await samples.read(["slow", "fast"], 1.0)
        took = time.monotonic() - started
    finally:
        await runner.cleanup()
    assert took < 1.2
    assert readings["fast"].sample is not None
    assert readings["slow"].sample is None
    assert readings["slow"].error == "the telemetry agent did not answer within 0.5 s"


async def test_subscribers_share_one_read_per_interval(agent: Agent) -> None:
    agent.delay = 0.2
    samples = Samples({"node-a": (LOOPBACK, agent.port)})
    together = await asyncio.gather(*(samples.read(["node-a"], 1.0) for _ in range(10)))
    assert len(agent.requests) == 1
    assert samples.lookups == 1
    assert all(r["node-a"] is together[0]["node-a"] for r in together)
    await samples.read(["node-a"], 1.0)  # still fresh
    assert len(agent.requests) == 1
    await asyncio.sleep(0.3)
    await samples.read(["node-a"], 0.25)  # older than this subscriber's interval: read again
    assert len(agent.requests) == 2


async def test_a_subscriber_leaving_does_not_cancel_the_shared_read(agent: Agent) -> None:
    agent.delay = 0.3
    samples = Samples({"node-a": (LOOPBACK, agent.port)})
    leaving = asyncio.create_task(samples.read(["node-a"], 1.0))
    await asyncio.sleep(0.05)
    staying = asyncio.create_task(samples.read(["node-a"], 1.0))
    leaving.cancel()
    reading = (await staying)["node-a"]
    assert reading.sample is not None
    assert len(agent.requests) == 1
    assert json.loads(reading.sample.model_dump_json())["node"] == "node-a"


def _raw(node: str, gpu: str = "", host: str = "") -> str:
    """A sample as JSON text with numbers JSON cannot carry (``NaN``, ``Infinity``, 4,000 digits)."""
    gpus = ",".join(f'{{"index":{i}{gpu}}}' for i in range(64))
    head = f'{{"node":"{node}","time":1,"nvml":{{"available":true}}'
    return head + f',"gpus":[{gpus}],"host":{{"memoryUsedBytes":1{host}}}}}'


@pytest.mark.parametrize(
    "body",
    [
        _raw("node-a", gpu=',"temperatureCelsius":NaN'),
        _raw("node-a", gpu=',"utilizationPercent":Infinity'),
        _raw("node-a", gpu=',"powerWatts":1e308,"utilizationPercent":1e308'),
        _raw("node-a", gpu=',"memoryUsedBytes":' + "9" * 4299),
        _raw("node-a", host="0" * 4400),
    ],
)
async def test_numbers_a_frame_cannot_carry_are_no_sample(agent: Agent, body: str) -> None:
    """R1: a hostile agent's NaN, Infinity or huge numbers never reach (and break) a monitor frame."""
    agent.answer = lambda node: web.Response(text=body, content_type="application/json")
    reading = (await Samples({"node-a": (LOOPBACK, agent.port)}).read(["node-a"], 1.0))["node-a"]
    frame(
        {
            "type": "frame",
            "hosts": [{**telemetry.monitor_fields(reading), **telemetry.monitor_detail(reading)}],
        }
    )
    assert reading.sample is None
    assert reading.error == "the telemetry agent's sample is not valid"


class _Broken(Samples):
    async def _endpoint(self, host: str) -> Endpoint | str:
        raise RuntimeError("a bug")


async def test_failures_are_logged_once_per_change_without_expected_tracebacks(
    agent: Agent, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An unreachable agent read every interval is one warning (no traceback), not one per
    interval; no agent on a node is one info line; answering again is one line; only an
    unexpected exception carries a traceback; changes come at most every ``LOG_EVERY``."""
    caplog.set_level(logging.DEBUG, logger=telemetry.__name__)
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    endpoints: dict[str, Endpoint | str] = {
        "node-a": (LOOPBACK, closed),
        "b": "no telemetry agent runs on this node",
    }
    samples = Samples(endpoints)
    for _ in range(5):
        await samples.read(["node-a", "b"], 0.0)
    lines = sorted((r.getMessage(), r.levelno, r.exc_info) for r in caplog.records)
    assert lines == [
        ("no telemetry from b: no telemetry agent runs on this node", logging.INFO, None),
        (
            "no telemetry from node-a: reading the telemetry agent failed: ClientConnectorError",
            logging.WARNING,
            None,
        ),
    ]
    caplog.clear()
    endpoints["node-a"] = (LOOPBACK, agent.port)  # the agent answers now: within LOG_EVERY, held back
    await samples.read(["node-a"], 0.0)
    assert caplog.records == []
    monkeypatch.setattr(telemetry, "LOG_EVERY", 0.0)
    for _ in range(3):
        await samples.read(["node-a"], 0.0)
    assert [r.getMessage() for r in caplog.records] == ["the telemetry agent of node-a answers again"]
    caplog.clear()
    broken = _Broken({})
    for _ in range(3):
        reading = (await broken.read(["c"], 0.0))["c"]
    assert reading.error == "reading the telemetry agent failed: RuntimeError"
    [record] = caplog.records
    assert record.levelno == logging.WARNING
    assert record.exc_info is not None
    assert isinstance(record.exc_info[1], RuntimeError)
