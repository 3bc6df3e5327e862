"""Timeouts per backend from the InferenceWorkload (``spec.routing``) and a total deadline.

- ``spec.routing.{connect,read,total}TimeoutSeconds`` are bounded in the CRD and reach the
  routing entry the gateway builds from the workload;
- the total deadline ends a response that trickles forever (no read timeout ever fires): 504
  before the head, an in-band error in every stream protocol after it.
"""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pydantic
import pytest

from sparkrun_operator.api.workload import RoutingSpec
from sparkrun_operator.gateway import GatewaySettings
from sparkrun_operator.gateway.kube import workload_entry

from .conftest import StartGateway, workload
from .rawserver import chunk_event, ok_head, raw_upstream, read_request

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5}


def test_routing_timeouts_in_the_crd_reach_the_gateway() -> None:
    spec = RoutingSpec.model_validate(
        {"connectTimeoutSeconds": 2, "readTimeoutSeconds": 30.5, "totalTimeoutSeconds": 120}
    )
    wire = spec.to_wire()
    names = ("connectTimeoutSeconds", "readTimeoutSeconds", "totalTimeoutSeconds")
    assert [wire[k] for k in names] == [2.0, 30.5, 120.0]
    for bad in ({"connectTimeoutSeconds": 0}, {"readTimeoutSeconds": -1}, {"totalTimeoutSeconds": 10**6}):
        with pytest.raises(pydantic.ValidationError):
            RoutingSpec.model_validate(bad)
    obj = {
        "metadata": {"name": "w", "namespace": "ml"},
        "spec": {"model": {"name": "m"}, "state": "Running", "routing": spec.to_wire()},
    }
    entry = workload_entry(obj, [])
    assert (entry.connect_timeout, entry.read_timeout, entry.total_timeout) == (2.0, 30.5, 120.0)


async def _trickle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, n: int) -> None:
    request = await read_request(reader)
    stream = b'"stream":true' in request.replace(b" ", b"")
    if not stream:  # a head only after a while, then a body a byte at a time, forever
        await asyncio.sleep(0.3)
        writer.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n"
        )
        while True:
            writer.write(b"1\r\n \r\n")
            await writer.drain()
            await asyncio.sleep(0.1)
    writer.write(ok_head(b"text/event-stream"))
    while True:
        writer.write(chunk_event("tick"))
        await writer.drain()
        await asyncio.sleep(0.1)


def test_total_deadline_from_the_workload(start_gateway: StartGateway) -> None:
    with raw_upstream(_trickle) as up:
        gw = start_gateway([workload("m", "m", [up.url], timeouts={"read": 5, "total": 1})])
        started = time.monotonic()
        resp = httpx.post(f"{gw.url}/v1/chat/completions", json=CHAT, timeout=20)
        assert resp.status_code == 504
        assert "total deadline" in resp.json()["error"]["message"]
        assert time.monotonic() - started < 3
        started = time.monotonic()
        streamed = httpx.post(f"{gw.url}/v1/chat/completions", json={**CHAT, "stream": True}, timeout=20)
        assert time.monotonic() - started < 3
        events = [e for e in streamed.text.split("\n\n") if e.startswith("data: {")]
        assert "total deadline" in json.loads(events[-1].removeprefix("data: "))["error"]["message"]
        assert streamed.text.endswith("data: [DONE]\n\n")
        lines = httpx.post(
            f"{gw.url}/api/chat",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            timeout=20,
        ).text.splitlines()
        assert "total deadline" in json.loads(lines[-1])["error"]


def test_total_deadline_from_the_settings(start_gateway: StartGateway) -> None:
    with raw_upstream(_trickle) as up:
        gw = start_gateway([workload("m", "m", [up.url])], settings=GatewaySettings(total_timeout=1))
        started = time.monotonic()
        with httpx.stream("POST", f"{gw.url}/v1/messages", json={**CHAT, "stream": True}, timeout=20) as r:
            text = "".join(r.iter_text())
        assert time.monotonic() - started < 3
        assert "event: error" in text
        assert "total deadline" in text
