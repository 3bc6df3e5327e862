"""gRPC probes of process-node containers, against a real gRPC server on loopback.

The server is grpcio's own (``grpc.aio.server``) with a generic handler that answers
``grpc.health.v1.Health/Check`` per service name, so the probe's hand-encoded request and its
reading of the answer meet a real HTTP/2 gRPC stack. The real picker's health port is probed in
``test_epp_picker.py``.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
import pytest
from grpc import aio

from sparkrun_testbed import process_probes
from sparkrun_testbed.process_probes import Prober, decode_health_status, encode_health_request


def _request_service(request: bytes) -> str:
    """The service name of a HealthCheckRequest (field 1), parsed independently of the probe."""
    if not request:
        return ""
    assert request[0] == 0x0A, request
    length, pos, shift = 0, 1, 0
    while True:
        byte = request[pos]
        pos += 1
        length |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            break
    return request[pos : pos + length].decode()


class Health:
    """A grpc.health.v1 server: ``statuses[service]`` is the ServingStatus to answer."""

    def __init__(self) -> None:
        self.statuses: dict[str, int] = {}
        self.delay = 0.0
        self.seen: list[tuple[str, str]] = []  # (service, user agent)

    async def check(self, request: bytes, context: aio.ServicerContext[bytes, bytes]) -> bytes:
        service = _request_service(request)
        agent = dict(context.invocation_metadata() or ()).get("user-agent", "")
        self.seen.append((service, str(agent)))
        if self.delay:
            await asyncio.sleep(self.delay)
        if service not in self.statuses:
            await context.abort(grpc.StatusCode.NOT_FOUND, "unknown service")
        status = self.statuses[service]
        return b"\x08" + bytes([status]) if status else b""  # proto3 omits the default 0

    def handler(self) -> grpc.GenericRpcHandler:
        identity: Callable[[bytes], bytes] = lambda b: b  # noqa: E731
        method = grpc.unary_unary_rpc_method_handler(
            self.check, request_deserializer=identity, response_serializer=identity
        )
        return grpc.method_handlers_generic_handler("grpc.health.v1.Health", {"Check": method})


@pytest.fixture
async def health() -> AsyncIterator[tuple[Health, int]]:
    state = Health()
    server = aio.server()
    server.add_generic_rpc_handlers((state.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield state, port
    finally:
        await server.stop(None)


def _prober(port: int | str, service: str | None = None, timeout: int = 1) -> Prober:
    grpc_spec: dict[str, Any] = {"port": port}
    if service is not None:
        grpc_spec["service"] = service
    probe = {"grpc": grpc_spec, "timeoutSeconds": timeout}

    async def no_exec(argv: Any, limit: float) -> tuple[int, str]:
        raise AssertionError("a gRPC probe runs nothing in the sandbox")

    return Prober(probe, {"name": "c"}, pod_ip="127.0.0.1", exec_runner=no_exec, client=None)  # type: ignore[arg-type]


async def test_serving_passes_and_other_statuses_fail_with_the_kubelets_message(
    health: tuple[Health, int],
) -> None:
    state, port = health
    state.statuses = {"": 1, "inference-extension": 1, "down": 2, "unknown": 0}
    assert await _prober(port).check() == (True, "")
    assert await _prober(port, "inference-extension").check() == (True, "")
    assert await _prober(port, "down").check() == (False, 'service unhealthy (responded with "NOT_SERVING")')
    assert await _prober(port, "unknown").check() == (False, 'service unhealthy (responded with "UNKNOWN")')
    ok, message = await _prober(port, "missing").check()
    assert not ok
    assert message == "error: health rpc probe failed: rpc error: code = NOT_FOUND desc = unknown service"
    # The service name travels in the request; the caller is a kube-probe.
    assert [s for s, _ in state.seen] == ["", "inference-extension", "down", "unknown", "missing"]
    assert all(agent.startswith(process_probes.USER_AGENT) for _, agent in state.seen)


async def test_timeout_seconds_bounds_the_call(health: tuple[Health, int]) -> None:
    state, port = health
    state.statuses = {"slow": 1}
    state.delay = 3
    started = time.monotonic()
    ok, message = await _prober(port, "slow", timeout=1).check()
    assert (ok, message) == (False, "timeout: health rpc did not complete within 1s")
    assert time.monotonic() - started < 2.5


async def test_nothing_listening_and_a_server_without_the_health_service() -> None:
    with socket.socket() as s:  # a port that was free a moment ago: nothing listens there
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    ok, message = await _prober(closed).check()
    assert not ok
    assert message.startswith("error: health rpc probe failed: rpc error: code = UNAVAILABLE")

    bare = aio.server()  # gRPC, but no grpc.health.v1
    port = bare.add_insecure_port("127.0.0.1:0")
    await bare.start()
    try:
        ok, message = await _prober(port).check()
    finally:
        await bare.stop(None)
    assert not ok
    assert message.startswith("error: this server does not implement the grpc health protocol")


async def test_a_named_port_is_refused_as_the_api_refuses_it() -> None:
    assert await _prober("grpc").check() == (False, "gRPC probe port must be a number, not 'grpc'")


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"", 0),
        (b"\x08\x01", 1),
        (b"\x08\x03", 3),
        (b"\x12\x02hi\x08\x02", 2),  # an unknown length-delimited field first is skipped
        (b"\x08\x01\x08\x02", 2),  # the last value of a repeated scalar wins
        (b"\x0d\x00\x00\x00\x00\x08\x01", 1),  # fixed32 skipped
        (b"\x08", None),  # truncated varint
        (b"\x12\x05hi", None),  # length past the end
        (b"\x08" + b"\xff" * 11, None),  # a varint longer than 10 bytes
        (b"\x0b", None),  # wire type 3 (group): not in this message
    ],
)
def test_health_answers_are_decoded_strictly(data: bytes, status: int | None) -> None:
    assert decode_health_status(data) == status


def test_health_requests_encode_the_service_name() -> None:
    assert encode_health_request("") == b""
    assert encode_health_request("inference-extension") == b"\x0a\x13inference-extension"
    long = "s" * 300
    assert encode_health_request(long) == b"\x0a\xac\x02" + long.encode()
    assert _request_service(encode_health_request(long)) == long
