"""The ext-proc client of the picker test, proven against a small ext-proc server on loopback
(real gRPC, grpcio both ends) that answers the way the reference picker v1.5.0 does
(``pkg/epp/handlers``): nothing until the body's end of stream, then a ``request_headers``
response (header mutation and ``envoy.lb`` metadata naming the endpoint) and the body back; an
``immediate_response`` 400 for a body without ``model``. Also the TLS relay, against the same
server serving TLS with a self-signed certificate that names no host (as the picker's does).
"""

from __future__ import annotations

import datetime
import json
import threading
import time
from collections.abc import Iterator
from concurrent import futures
from dataclasses import dataclass, field

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from envoy.config.core.v3 import base_pb2  # type: ignore[import-untyped]
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb  # type: ignore[import-untyped]
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2  # type: ignore[import-untyped]

from tests.inferencepool import extproc

ENDPOINT = "10.244.1.7:8000"


@dataclass
class Seen:
    headers: list[dict[str, str]] = field(default_factory=list)  # per stream: key -> raw_value
    plain_values: list[str] = field(default_factory=list)  # HeaderValue.value fields (should be empty)
    bodies: list[bytes] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # "answered", "client-closed", per stream


class PickerLike:
    """An ExternalProcessor servicer that answers like the reference picker; ``silent`` never
    answers (to prove the client's deadline)."""

    def __init__(self, *, silent: bool = False) -> None:
        self.seen = Seen()
        self.silent = silent
        self.lock = threading.Lock()

    def Process(
        self, request_iterator: Iterator[pb.ProcessingRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.ProcessingResponse]:
        body = b""
        for request in request_iterator:
            kind = request.WhichOneof("request")
            if kind == "request_headers":
                with self.lock:
                    self.seen.headers.append(
                        {h.key: h.raw_value.decode() for h in request.request_headers.headers.headers}
                    )
                    self.seen.plain_values += [
                        h.value for h in request.request_headers.headers.headers if h.value
                    ]
            elif kind == "request_body":
                body += request.request_body.body
                if not request.request_body.end_of_stream or self.silent:
                    continue
                with self.lock:
                    self.seen.bodies.append(body)
                if "model" not in json.loads(body):
                    yield pb.ProcessingResponse(
                        immediate_response=pb.ImmediateResponse(
                            status={"code": 400}, body=b"model not found in request body"
                        )
                    )
                    return
                yield from self._answer(body)
                with self.lock:
                    self.seen.events.append("answered")
        with self.lock:
            self.seen.events.append("client-closed")

    def _answer(self, body: bytes) -> Iterator[pb.ProcessingResponse]:
        lb = struct_pb2.Struct()
        lb.update({extproc.LB_NAMESPACE: {extproc.DESTINATION: ENDPOINT}})
        set_headers = [
            base_pb2.HeaderValueOption(header=base_pb2.HeaderValue(key=key, raw_value=value.encode()))
            for key, value in ((extproc.DESTINATION, ENDPOINT), ("Content-Length", str(len(body))))
        ]
        yield pb.ProcessingResponse(
            request_headers=pb.HeadersResponse(
                response=pb.CommonResponse(
                    clear_route_cache=True, header_mutation=pb.HeaderMutation(set_headers=set_headers)
                )
            ),
            dynamic_metadata=lb,
        )
        yield pb.ProcessingResponse(
            request_body=pb.BodyResponse(
                response=pb.CommonResponse(
                    body_mutation=pb.BodyMutation(
                        streamed_response=pb.StreamedBodyResponse(body=body, end_of_stream=True)
                    )
                )
            )
        )


def _self_signed_without_names() -> tuple[bytes, bytes]:
    """A certificate like the picker's own (``CreateSelfSignedTLSCertificate``): no CN, no SAN."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Inference Ext")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Served:
    servicer: PickerLike
    port: int
    cert: bytes = b""


def _serve(servicer: PickerLike, *, tls: bool) -> Iterator[Served]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_ExternalProcessorServicer_to_server(servicer, server)
    cert = b""
    if tls:
        key, cert = _self_signed_without_names()
        port = server.add_secure_port("127.0.0.1:0", grpc.ssl_server_credentials([(key, cert)]))
    else:
        port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield Served(servicer, port, cert)
    finally:
        server.stop(grace=1).wait(5)


@pytest.fixture
def plain() -> Iterator[Served]:
    yield from _serve(PickerLike(), tls=False)


@pytest.fixture
def secure() -> Iterator[Served]:
    yield from _serve(PickerLike(), tls=True)


def test_pick_sends_a_gateways_request_and_reads_the_endpoint(plain: Served) -> None:
    payload = extproc.chat("team-model", "Say hello.")
    answer = extproc.pick(f"127.0.0.1:{plain.port}", payload, request_id="req-1", headers={"X-Extra": "yes"})
    assert answer.status is None
    assert answer.endpoint == ENDPOINT
    assert answer.metadata_endpoint == ENDPOINT
    assert json.loads(answer.body) == payload
    assert answer.set_headers["content-length"] == str(len(answer.body))
    seen = plain.servicer.seen
    headers = seen.headers[0]
    assert headers[":method"] == "POST"
    assert headers[":path"] == "/v1/chat/completions"
    assert headers["content-type"] == "application/json"
    assert headers["x-request-id"] == "req-1"
    assert headers["x-extra"] == "yes"
    assert headers["content-length"] == str(len(seen.bodies[0]))
    assert seen.plain_values == []  # every value as raw_value, as Envoy sends them
    # the client kept its side open until the answer came, then closed it (as a gateway does)
    deadline = time.monotonic() + 5
    while "client-closed" not in seen.events and time.monotonic() < deadline:
        time.sleep(0.05)
    assert seen.events == ["answered", "client-closed"]


def test_pick_reads_a_refusal(plain: Served) -> None:
    answer = extproc.pick(f"127.0.0.1:{plain.port}", {"messages": []})
    assert (answer.status, answer.endpoint) == (400, None)
    assert answer.detail == "model not found in request body"


def test_pick_is_bounded_by_its_deadline() -> None:
    for served in _serve(PickerLike(silent=True), tls=False):
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as error:
            extproc.pick(f"127.0.0.1:{served.port}", extproc.chat("m", "hi"), timeout=1.0)
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert time.monotonic() - started < 5


def test_relay_reaches_a_tls_server_whose_certificate_names_no_host(secure: Served) -> None:
    # grpcio verifies the host name and cannot be told not to: trusting the very certificate fails
    credentials = grpc.ssl_channel_credentials(root_certificates=secure.cert)
    channel = grpc.secure_channel(f"127.0.0.1:{secure.port}", credentials)
    with channel, pytest.raises(grpc.FutureTimeoutError):
        grpc.channel_ready_future(channel).result(timeout=2)
    with extproc.TlsRelay("127.0.0.1", secure.port, max_connections=2) as target:
        first = extproc.pick(target, extproc.chat("team-model", "one"))
        second = extproc.pick(target, extproc.chat("team-model", "two"))
    assert first.endpoint == second.endpoint == ENDPOINT
    assert [json.loads(b)["messages"][0]["content"] for b in secure.servicer.seen.bodies] == ["one", "two"]


def test_relay_refuses_connections_over_its_bound(secure: Served) -> None:
    relay = extproc.TlsRelay("127.0.0.1", secure.port, max_connections=0)
    with relay as target, pytest.raises(grpc.FutureTimeoutError):
        extproc.pick(target, extproc.chat("team-model", "one"), timeout=1.5)
    assert secure.servicer.seen.bodies == []
