"""hack/pin-digests.py under a hostile registry (issue 31 review): where a registry redirects a
manifest request, the anonymous bearer token it issued is not carried to another origin, and an
HTTPS request is never followed to plain HTTP (where anyone on the path could answer the digest
that ends up in a FROM line). Real HTTP servers on loopback: a registry with Docker Hub's token
flow that redirects every manifest to a second server, which records what it was sent."""

from __future__ import annotations

import json
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests import hack_script

PIN = Path(__file__).resolve().parents[2] / "hack" / "pin-digests.py"
DIGEST = "sha256:" + "ab" * 32


pin = hack_script.load("pin-digests.py", "pin_digests_redirects")


class _Servers:
    def __init__(self) -> None:
        self.seen: list[dict[str, str]] = []
        self.target = ""
        self.registry = ""


def _serve(handler: type[BaseHTTPRequestHandler]) -> tuple[ThreadingHTTPServer, threading.Thread]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


@pytest.fixture
def redirecting() -> Iterator[tuple[str, _Servers]]:
    state = _Servers()

    class Elsewhere(BaseHTTPRequestHandler):
        def do_HEAD(self) -> None:
            state.seen.append(dict(self.headers.items()))
            self.send_response(200)
            self.send_header("Docker-Content-Digest", DIGEST)
            self.end_headers()

        do_GET = do_HEAD  # Python before 3.12 follows a HEAD's redirect with a GET

        def log_message(self, *args: object) -> None:
            pass

    class Registry(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the token endpoint
            body = json.dumps({"token": "anonymous-token"}).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_HEAD(self) -> None:
            if self.headers.get("Authorization") != "Bearer anonymous-token":
                self.send_response(401)
                self.send_header("WWW-Authenticate", f'Bearer realm="{state.registry}/token",service="reg"')
                self.end_headers()
                return
            self.send_response(307)
            self.send_header("Location", state.target + self.path)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    other, other_thread = _serve(Elsewhere)
    state.target = f"http://127.0.0.1:{other.server_address[1]}"
    registry, registry_thread = _serve(Registry)
    state.registry = f"http://127.0.0.1:{registry.server_address[1]}"
    try:
        yield f"127.0.0.1:{registry.server_address[1]}", state
    finally:
        for server, thread in ((registry, registry_thread), (other, other_thread)):
            server.shutdown()
            server.server_close()
            thread.join(timeout=10)


def test_a_token_never_follows_a_redirect_to_another_origin(redirecting: tuple[str, _Servers]) -> None:
    registry, state = redirecting
    resolver = pin.Resolver({}, timeout=10)
    assert resolver.digest(pin.ImageRef.parse(f"{registry}/library/python:3.12")) == DIGEST
    assert len(state.seen) == 1
    assert "Authorization" not in state.seen[0]


def test_an_https_request_is_never_followed_to_plain_http() -> None:
    request = urllib.request.Request(
        "https://registry.example/v2/library/python/manifests/3.12",
        headers={"Authorization": "Bearer anonymous-token"},
        method="HEAD",
    )
    handler = pin.Redirects()
    with pytest.raises(pin.PinError, match="not HTTPS"):
        handler.redirect_request(request, None, 307, "Temporary Redirect", {}, "http://cdn.example/x")
    # the same origin keeps the token; another HTTPS origin does not get it
    same = handler.redirect_request(request, None, 307, "", {}, "https://registry.example/v2/y")
    assert same is not None
    assert same.get_header("Authorization") == "Bearer anonymous-token"
    other = handler.redirect_request(request, None, 307, "", {}, "https://cdn.example/x")
    assert other is not None
    assert other.get_header("Authorization") is None
