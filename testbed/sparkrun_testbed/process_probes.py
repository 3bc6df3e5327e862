"""Startup, readiness and liveness probes for process-node containers, run for real.

A kubelet probes from the node: HTTP and TCP probes here connect from the host to the pod's
address (which, in namespace mode, reaches the pod through the testbed bridge exactly as a
client of the pod would); exec probes run the command inside the container's sandbox with its
environment. Timing follows the probe spec: ``initialDelaySeconds`` (0), ``periodSeconds``
(10), ``timeoutSeconds`` (1), ``successThreshold`` (1) and ``failureThreshold`` (3).

- HTTP: ``GET`` ``scheme://host:port/path`` with ``httpHeaders``; 200-399 passes (redirects
  are not followed, as a kubelet treats a redirect to another host); HTTPS skips verification.
  ``host`` defaults to the pod IP; named ports resolve through the container's ``ports``.
- TCP: a connection is opened and closed.
- exec: exit status 0 passes; a command that outlives ``timeoutSeconds`` is killed and fails.
- gRPC: ``grpc.health.v1.Health/Check`` over plaintext HTTP/2 to the pod IP and ``port`` (a
  number, as the API requires), with ``service`` in the request, on a fresh channel each time; a
  ``SERVING`` answer within ``timeoutSeconds`` passes. The request and answer are encoded here
  (two protobuf fields), so no generated stubs are needed; failure messages are a kubelet's.

:class:`ProbeLoop` turns single results into transitions (``on_change(success, message)``)
with the thresholds applied. HTTP clients ignore proxy environment variables: probes go only
to the pod.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import ssl
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import grpc
import httpx
from grpc import aio

USER_AGENT = "kube-probe/1.36"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
#: grpc.health.v1.HealthCheckResponse.ServingStatus
SERVING_STATUS = {0: "UNKNOWN", 1: "SERVING", 2: "NOT_SERVING", 3: "SERVICE_UNKNOWN"}
_MAX_ANSWER = 1024  # bytes of a health answer (a real one is 2)

ExecRunner = Callable[[Sequence[str], float], Awaitable[tuple[int, str]]]
"""``run(argv, limit) -> (exit_code, output)`` inside the container's sandbox (``limit``: seconds)."""


@dataclass(frozen=True)
class ProbeTiming:
    initial_delay: float
    period: float
    timeout: float
    success_threshold: int
    failure_threshold: int

    @classmethod
    def of(cls, probe: Mapping[str, Any]) -> ProbeTiming:
        return cls(
            initial_delay=float(probe.get("initialDelaySeconds") or 0),
            period=float(probe.get("periodSeconds") or 10),
            timeout=float(probe.get("timeoutSeconds") or 1),
            success_threshold=int(probe.get("successThreshold") or 1),
            failure_threshold=int(probe.get("failureThreshold") or 3),
        )


def resolve_port(port: int | str, container: Mapping[str, Any]) -> int:
    """A probe's ``port``: a number, or the name of one of the container's ports."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for p in container.get("ports") or ():
        if p.get("name") == port:
            return int(p["containerPort"])
    raise ValueError(f"port {port!r} is not a named port of container {container.get('name')!r}")


class Prober:
    """Runs one probe once; see the module docs for what passes."""

    def __init__(
        self,
        probe: Mapping[str, Any],
        container: Mapping[str, Any],
        *,
        pod_ip: str,
        exec_runner: ExecRunner,
        client: httpx.AsyncClient,
    ) -> None:
        self.probe = probe
        self.container = container
        self.pod_ip = pod_ip
        self.exec_runner = exec_runner
        self.client = client
        self.timing = ProbeTiming.of(probe)

    async def check(self) -> tuple[bool, str]:
        """``(passed, message)``; never raises for a failing target."""
        try:
            if "httpGet" in self.probe:
                return await self._http(self.probe["httpGet"])
            if "tcpSocket" in self.probe:
                return await self._tcp(self.probe["tcpSocket"])
            if "exec" in self.probe:
                return await self._exec(self.probe["exec"])
            if "grpc" in self.probe:
                return await self._grpc(self.probe["grpc"])
            return False, "probe has no handler"
        except ValueError as e:
            return False, str(e)

    async def _http(self, spec: Mapping[str, Any]) -> tuple[bool, str]:
        host = spec.get("host") or self.pod_ip
        port = resolve_port(spec.get("port", 80), self.container)
        scheme = str(spec.get("scheme") or "HTTP").lower()
        path = spec.get("path") or "/"
        if not path.startswith("/"):
            path = "/" + path
        url = f"{scheme}://{_host(host)}:{port}{path}"
        headers = {"User-Agent": USER_AGENT, "Accept": "*/*"}
        headers.update({h["name"]: h["value"] for h in spec.get("httpHeaders") or ()})
        try:
            response = await self.client.get(url, headers=headers, timeout=self.timing.timeout)
        except httpx.TimeoutException:
            return False, f'Get "{url}": context deadline exceeded (Client.Timeout exceeded)'
        except httpx.HTTPError as e:
            return False, f'Get "{url}": {_describe(e)}'
        if 200 <= response.status_code < 400:
            return True, ""
        return False, f"HTTP probe failed with statuscode: {response.status_code}"

    async def _tcp(self, spec: Mapping[str, Any]) -> tuple[bool, str]:
        host = spec.get("host") or self.pod_ip
        port = resolve_port(spec["port"], self.container)
        try:
            _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), self.timing.timeout)
        except TimeoutError:
            return False, f"dial tcp {_host(host)}:{port}: i/o timeout"
        except OSError as e:
            return False, f"dial tcp {_host(host)}:{port}: connect: {e.strerror or e}"
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
        return True, ""

    async def _grpc(self, spec: Mapping[str, Any]) -> tuple[bool, str]:
        port = spec.get("port")
        if not isinstance(port, int) or isinstance(port, bool):
            return False, f"gRPC probe port must be a number, not {port!r}"
        return await grpc_health_check(
            self.pod_ip, port, str(spec.get("service") or ""), limit=self.timing.timeout
        )

    async def _exec(self, spec: Mapping[str, Any]) -> tuple[bool, str]:
        argv = [str(a) for a in spec.get("command") or ()]
        if not argv:
            return False, "exec probe has no command"
        code, output = await self.exec_runner(argv, self.timing.timeout)
        if code == 0:
            return True, ""
        if code < 0:
            return False, f"command timed out after {self.timing.timeout:g}s"
        return False, f"command {argv!r} exited with {code}: {output.strip()[-512:]}"


class ProbeLoop:
    """Runs a :class:`Prober` on its period and reports threshold-crossing transitions.

    ``on_change(passed, message)`` is called when the result flips: to True after
    ``successThreshold`` consecutive passes, to False after ``failureThreshold`` consecutive
    failures. ``on_failure(message)`` is called for every single failed check (for events).
    The loop starts in the "not passed" state and runs until cancelled or :meth:`stop`.
    """

    def __init__(
        self,
        prober: Prober,
        on_change: Callable[[bool, str], None],
        *,
        on_failure: Callable[[str], None] | None = None,
        stop_after_success: bool = False,
    ) -> None:
        self.prober = prober
        self.on_change = on_change
        self.on_failure = on_failure
        self.stop_after_success = stop_after_success
        self.passed: bool | None = None

    async def run(self) -> None:
        timing = self.prober.timing
        await asyncio.sleep(timing.initial_delay)
        successes = failures = 0
        while True:
            ok, message = await self.prober.check()
            if ok:
                successes, failures = successes + 1, 0
                if self.passed is not True and successes >= timing.success_threshold:
                    self.passed = True
                    self.on_change(True, "")
                    if self.stop_after_success:
                        return
            else:
                successes, failures = 0, failures + 1
                if self.on_failure is not None:
                    self.on_failure(message)
                if self.passed is not False and failures >= timing.failure_threshold:
                    self.passed = False
                    self.on_change(False, message)
            await asyncio.sleep(timing.period)


def http_client() -> httpx.AsyncClient:
    """The client for HTTP probes: no proxies from the environment, no TLS verification."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return httpx.AsyncClient(
        verify=context,
        trust_env=False,
        follow_redirects=False,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


async def grpc_health_check(host: str, port: int, service: str, *, limit: float) -> tuple[bool, str]:
    """One ``grpc.health.v1.Health/Check`` as a kubelet sends it: ``(passed, message)``.

    ``limit``: seconds for connecting and the call together (the probe's ``timeoutSeconds``).
    """
    addr = f"{_host(host)}:{port}"
    options = [
        ("grpc.enable_http_proxy", 0),  # probes go only to the pod, never through a proxy
        ("grpc.primary_user_agent", USER_AGENT),
        ("grpc.max_receive_message_length", _MAX_ANSWER),
        ("grpc.enable_retries", 0),
    ]
    async with aio.insecure_channel(addr, options=options) as channel:
        # bytes in, bytes out: no (de)serializers
        check: aio.UnaryUnaryMultiCallable[bytes, bytes] = channel.unary_unary(HEALTH_CHECK)
        try:
            answer = await check(encode_health_request(service), timeout=limit)
        except aio.AioRpcError as e:
            code, details = e.code(), (e.details() or "")[:512]
            if code == grpc.StatusCode.UNIMPLEMENTED:
                return False, (
                    "error: this server does not implement the grpc health protocol "
                    f"(grpc.health.v1.Health): {details}"
                )
            if code == grpc.StatusCode.DEADLINE_EXCEEDED:
                return False, f"timeout: health rpc did not complete within {limit:g}s"
            return False, f"error: health rpc probe failed: rpc error: code = {code.name} desc = {details}"
    status = decode_health_status(answer)
    if status == 1:
        return True, ""
    name = SERVING_STATUS.get(status, str(status)) if status is not None else "malformed answer"
    return False, f'service unhealthy (responded with "{name}")'


def encode_health_request(service: str) -> bytes:
    """``HealthCheckRequest{service}``: field 1, length-delimited (nothing when empty)."""
    data = service.encode()
    return b"\x0a" + _varint(len(data)) + data if data else b""


def decode_health_status(data: bytes) -> int | None:
    """``HealthCheckResponse.status`` (field 1, varint; 0 when absent), None when malformed.

    Other fields are skipped by wire type, as protobuf readers do.
    """
    pos, status = 0, 0
    while pos < len(data):
        key, pos = _read_varint(data, pos)
        if key is None:
            return None
        field_number, wire_type = key >> 3, key & 7
        if wire_type == 0:
            value, pos = _read_varint(data, pos)
            if value is None:
                return None
            if field_number == 1:
                status = value
        elif wire_type == 2:
            length, pos = _read_varint(data, pos)
            if length is None or pos + length > len(data):
                return None
            pos += length
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
            if pos > len(data):
                return None
        else:
            return None
    return status


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _read_varint(data: bytes, pos: int) -> tuple[int | None, int]:
    value = 0
    for shift in range(0, 70, 7):  # at most 10 bytes
        if pos >= len(data):
            return None, pos
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    return None, pos


async def run_exec(
    argv: Sequence[str], limit: float, *, env: Mapping[str, str], cwd: str | None
) -> tuple[int, str]:
    """Run ``argv`` (already wrapped for the sandbox) and return ``(exit code, output)``.

    A command still running after ``limit`` seconds is killed with its process group and
    yields exit code -1.
    """
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=dict(env),
        cwd=cwd,
        start_new_session=True,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), limit)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return -1, ""
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
    return proc.returncode or 0, out.decode(errors="replace")


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def _describe(error: httpx.HTTPError) -> str:
    cause = error.__cause__ or error.__context__
    text = str(cause or error) or type(error).__name__
    return text.replace("[Errno 111] ", "dial tcp: connect: ").strip()
