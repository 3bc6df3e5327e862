"""What a gateway says to an endpoint picker, and what it hears back: Envoy's ext-proc v3 over gRPC.

A gateway that follows the Gateway API Inference Extension opens one bidirectional ``Process``
stream per HTTP request. For an OpenAI request it sends the request headers (pseudo-headers
``:method``, ``:path`` included, values as ``raw_value`` bytes), then the body with
``end_of_stream``. The reference picker (v1.5.0, ``pkg/epp/handlers/server.go``) answers nothing
until the whole body is in: then it parses the body (the ``model`` field is required), schedules,
and sends a ``request_headers`` response whose header mutation sets
``x-gateway-destination-endpoint: IP:PORT`` (dynamic metadata ``envoy.lb`` carries the same
value), followed by the body back as ``request_body`` responses; a refusal is one
``immediate_response`` with an HTTP status. The picker keeps per-request state until the stream
ends, so :func:`pick` keeps its side of the stream open until the answer came and then closes it,
as a gateway does when the upstream finished.

The picker serves TLS with a self-signed certificate that names no host, which grpcio cannot be
told to accept; :class:`TlsRelay` is a loopback relay that speaks plaintext HTTP/2 to the client
and TLS (no verification, ALPN ``h2``) to the picker. The test proves the picker's behaviour, not
its identity; a gateway in a cluster trusts the picker the same way (the reference chart's gateways
skip verification of the picker's self-signed certificate).

Everything is bounded: the stream (a deadline), the answers (a count and a message size), the
relay (connections, read size, connect time).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import grpc
from envoy.config.core.v3 import base_pb2  # type: ignore[import-untyped]
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb  # type: ignore[import-untyped]
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

DESTINATION = "x-gateway-destination-endpoint"
LB_NAMESPACE = "envoy.lb"
MAX_ANSWERS = 64  # responses read on one stream (the picker sends 2 for a small body)
MAX_MESSAGE = 1 << 20  # bytes in one gRPC message either way
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", MAX_MESSAGE),
    ("grpc.max_send_message_length", MAX_MESSAGE),
    ("grpc.enable_retries", 0),
)


@dataclass(frozen=True)
class Answer:
    """The picker's answer to one request."""

    endpoint: str | None  # the header mutation's x-gateway-destination-endpoint
    metadata_endpoint: str | None  # dynamic_metadata["envoy.lb"][x-gateway-destination-endpoint]
    status: int | None = None  # an immediate response's HTTP status (a refusal)
    detail: str = ""  # an immediate response's body, clipped
    set_headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""  # the body the picker hands back (it may rewrite the model)


def request_messages(
    body: bytes, *, path: str, request_id: str, headers: Mapping[str, str] = {}
) -> list[pb.ProcessingRequest]:
    """The two messages a gateway sends for a buffered POST: headers, then the whole body."""
    pairs = {
        ":method": "POST",
        ":path": path,
        ":scheme": "http",
        ":authority": "gateway.invalid",
        "content-type": "application/json",
        "content-length": str(len(body)),
        "x-request-id": request_id,
        **{key.lower(): value for key, value in headers.items()},
    }
    header_map = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=key, raw_value=value.encode()) for key, value in pairs.items()]
    )
    return [
        pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=header_map, end_of_stream=False)),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)),
    ]


def _header_value(value: base_pb2.HeaderValue) -> str:
    return value.raw_value.decode(errors="replace") if value.raw_value else str(value.value)


def _metadata_endpoint(response: pb.ProcessingResponse) -> str | None:
    if not response.HasField("dynamic_metadata"):
        return None
    outer = response.dynamic_metadata.fields.get(LB_NAMESPACE)
    if outer is None or not outer.HasField("struct_value"):
        return None
    inner = outer.struct_value.fields.get(DESTINATION)
    return inner.string_value if inner is not None and inner.HasField("string_value") else None


def _read(responses: Iterator[pb.ProcessingResponse]) -> Answer:
    endpoint: str | None = None
    metadata: str | None = None
    set_headers: dict[str, str] = {}
    body = bytearray()
    for count, response in enumerate(responses, start=1):
        if count > MAX_ANSWERS:
            raise AssertionError(f"the picker sent more than {MAX_ANSWERS} responses for one request")
        kind = response.WhichOneof("response")
        if kind == "immediate_response":
            refusal = response.immediate_response
            detail = refusal.body[:2000].decode(errors="replace")
            return Answer(None, None, status=int(refusal.status.code), detail=detail)
        if kind == "request_headers":
            for option in response.request_headers.response.header_mutation.set_headers[:MAX_ANSWERS]:
                set_headers[option.header.key.lower()] = _header_value(option.header)[:2000]
            endpoint = set_headers.get(DESTINATION)
            metadata = _metadata_endpoint(response)
            continue
        if kind == "request_body":
            streamed = response.request_body.response.body_mutation.streamed_response
            if len(body) + len(streamed.body) > MAX_MESSAGE:
                raise AssertionError("the picker handed back a body larger than the bound")
            body += streamed.body
            if streamed.end_of_stream:
                break
            continue
        raise AssertionError(f"unexpected ext-proc response before the request went upstream: {kind}")
    return Answer(endpoint, metadata, set_headers=set_headers, body=bytes(body))


def pick(
    target: str,
    payload: Mapping[str, Any],
    *,
    path: str = "/v1/chat/completions",
    headers: Mapping[str, str] = {},
    request_id: str | None = None,
    timeout: float = 10.0,
) -> Answer:
    """Ask the ext-proc server at ``target`` (``host:port``, plaintext) where ``payload`` goes."""
    body = json.dumps(payload).encode()
    request_id = request_id or secrets.token_hex(8)
    messages = request_messages(body, path=path, request_id=request_id, headers=headers)
    answered = threading.Event()

    def outgoing() -> Iterator[pb.ProcessingRequest]:
        yield from messages
        # NB: a gateway keeps the stream open while the request is upstream; end it after the
        # answer (or once the deadline ended the call: `answered` is set on every way out)
        answered.wait(timeout + 5)

    with grpc.insecure_channel(target, options=CHANNEL_OPTIONS) as channel:
        grpc.channel_ready_future(channel).result(timeout=timeout)
        stub = pb_grpc.ExternalProcessorStub(channel)
        responses = stub.Process(outgoing(), timeout=timeout)
        try:
            answer = _read(responses)
        finally:
            answered.set()
        for _ in range(MAX_ANSWERS):  # the stream ends once our side closed (bounded)
            if next(responses, None) is None:
                break
    return answer


def chat(model: str, prompt: str, *, max_tokens: int = 8) -> dict[str, Any]:
    """A chat completion request body."""
    return {"model": model, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens}


class TlsRelay:
    """A loopback relay: plaintext in, TLS out to ``host:port`` without verifying the server.

    ``with TlsRelay(host, port) as target:`` gives ``127.0.0.1:PORT`` for a plaintext gRPC
    channel. At most ``max_connections`` at once (more are closed at once); every connection and
    the listener are closed on exit.
    """

    def __init__(
        self, host: str, port: int, *, max_connections: int = 16, connect_timeout: float = 10.0
    ) -> None:
        self.host = host
        self.port = port
        self.max_connections = max_connections
        self.connect_timeout = connect_timeout
        self.connections = 0  # accepted so far (all time)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread: threading.Thread | None = None
        self._listening = threading.Event()
        self._address = ""
        self._error: BaseException | None = None
        self._live: set[asyncio.Task[None]] = set()
        self._accepted: set[asyncio.StreamWriter] = set()  # closed on exit, started or not

    def _context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE  # NB: the picker's certificate is self-signed, no SAN
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.set_alpn_protocols(["h2"])
        return context

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, ssl.SSLError, asyncio.IncompleteReadError):
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tasks: list[asyncio.Task[None]] = []
        upstream: asyncio.StreamWriter | None = None
        try:
            self.connections += 1
            if len(self._live) > self.max_connections:
                return
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port, ssl=self._context(), server_hostname=""),
                self.connect_timeout,
            )
            upstream = up_writer
            protocol = up_writer.get_extra_info("ssl_object")
            if protocol is None or protocol.selected_alpn_protocol() != "h2":
                return
            tasks = [
                asyncio.create_task(self._pipe(reader, up_writer)),
                asyncio.create_task(self._pipe(up_reader, writer)),
            ]
            await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        except (OSError, TimeoutError, ssl.SSLError):
            return
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            self._accepted.discard(writer)
            if upstream is not None:
                # NB: abort, not close: TLS's close waits for the peer's close_notify, up to 30 s
                upstream.transport.abort()
            writer.close()
            for side in (upstream, writer):
                if side is not None:
                    with contextlib.suppress(OSError, ssl.SSLError, TimeoutError):
                        await asyncio.wait_for(side.wait_closed(), 5)

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()

        def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self._accepted.add(writer)
            task = asyncio.create_task(self._serve(reader, writer))
            self._live.add(task)
            task.add_done_callback(self._live.discard)

        server = await asyncio.start_server(accept, "127.0.0.1", 0)
        self._address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        self._listening.set()
        try:
            await self._stop.wait()
        finally:
            server.close()
            await self._close_all()
            await server.wait_closed()

    async def _close_all(self) -> None:
        for _ in range(10):  # NB: a connection accepted while closing starts one more task
            for task in list(self._live):
                task.cancel()
            await asyncio.gather(*self._live, return_exceptions=True)
            writers, self._accepted = list(self._accepted), set()  # a task cancelled before it ran
            for writer in writers:
                writer.close()
            # NB: a transport's socket closes on the loop's next turn: let it, before the loop ends
            with contextlib.suppress(TimeoutError):
                closing = asyncio.gather(*(w.wait_closed() for w in writers), return_exceptions=True)
                await asyncio.wait_for(closing, 5)
            if not self._live and not self._accepted:
                return

    def _run(self) -> None:
        try:
            asyncio.run(self._main())
        except BaseException as error:  # NB: reported by __enter__/__exit__ in the test's thread
            self._error = error
            self._listening.set()

    def __enter__(self) -> str:
        self._thread = threading.Thread(target=self._run, name="tls-relay", daemon=True)
        self._thread.start()
        if not self._listening.wait(10) or self._error is not None:
            raise AssertionError(f"the TLS relay did not start: {self._error!r}")
        return self._address

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if self._loop is not None and self._stop is not None and not self._loop.is_closed():
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(15)
            if self._thread.is_alive():
                raise AssertionError("the TLS relay did not stop within 15 s")
        if self._error is not None:
            raise AssertionError(f"the TLS relay failed: {self._error!r}")
