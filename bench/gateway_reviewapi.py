"""A loopback stand-in for the two review APIs of kube-apiserver the gateway's ``kubernetes`` mode
calls: ``TokenReview`` (``authentication.k8s.io/v1``) and ``SubjectAccessReview``
(``authorization.k8s.io/v1``), the same paths, bodies and answers.

For the gateway benchmark (``python -m bench.gateway_auth``: it measures the gateway's hot path,
where both answers are cached, so the apiserver's own speed does not matter) and unit tests of
the caches. Tokens map to users; a user may use ``(namespace, name)`` pairs, ``name`` ``""``
standing for every workload of the namespace (as a RoleBinding does). ``down`` makes every
review answer 503; ``reviews`` counts the reviews answered per kind.

``python -m bench.gateway_reviewapi --port P --config FILE`` serves a JSON config
``{"tokens": {token: username}, "grants": {username: [[namespace, name], ...]}}``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
from collections import Counter
from pathlib import Path
from typing import Any

from aiohttp import web

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ReviewApi:
    """The review endpoints on loopback (see the module docstring)."""

    def __init__(self, tokens: dict[str, str], grants: dict[str, list[tuple[str, str]]]) -> None:
        self.tokens = tokens
        self.grants = {user: {tuple(pair) for pair in pairs} for user, pairs in grants.items()}
        self.down = False
        self.reviews: Counter[str] = Counter()
        self._runner: web.AppRunner | None = None
        self.url = ""

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(TOKEN_REVIEWS, self._token_review)
        app.router.add_post(ACCESS_REVIEWS, self._access_review)
        app.router.add_get("/counts", self._counts)
        return app

    async def _counts(self, request: web.Request) -> web.Response:
        """The reviews answered so far, per kind (for the benchmark's report)."""
        return web.json_response(dict(self.reviews))

    async def start(self, port: int = 0) -> str:
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        sock = socket.create_server(("127.0.0.1", port))
        await web.SockSite(self._runner, sock).start()
        self.url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _token_review(self, request: web.Request) -> web.Response:
        self.reviews["token"] += 1
        if self.down:
            return web.json_response({"kind": "Status", "code": 503}, status=503)
        doc = await request.json()
        token = str((doc.get("spec") or {}).get("token", ""))
        user = self.tokens.get(token)
        status: dict[str, Any] = {"authenticated": user is not None}
        if user is not None:
            status["user"] = {"username": user, "uid": f"uid-{user}", "groups": ["system:authenticated"]}
        return web.json_response({**doc, "status": status}, status=201)

    async def _access_review(self, request: web.Request) -> web.Response:
        self.reviews["access"] += 1
        if self.down:
            return web.json_response({"kind": "Status", "code": 503}, status=503)
        doc = await request.json()
        spec = doc.get("spec") or {}
        attrs = spec.get("resourceAttributes") or {}
        mine = self.grants.get(str(spec.get("user", "")), set())
        namespace, name = str(attrs.get("namespace", "")), str(attrs.get("name", ""))
        allowed = (namespace, "") in mine or (bool(name) and (namespace, name) in mine)
        return web.json_response({**doc, "status": {"allowed": allowed}}, status=201)


def kubeconfig(url: str, path: Path) -> Path:
    """A kubeconfig for ``url`` (plain HTTP on loopback; any token: the stand-in asks none)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "reviews", "cluster": {"server": url}}],
        "users": [{"name": "gateway", "user": {"token": "gateway"}}],
        "contexts": [{"name": "reviews", "context": {"cluster": "reviews", "user": "gateway"}}],
        "current-context": "reviews",
    }
    path.write_text(json.dumps(doc))
    return path


async def _serve(port: int, doc: dict[str, Any]) -> None:
    api = ReviewApi(doc["tokens"], {u: [tuple(p) for p in ps] for u, ps in doc["grants"].items()})
    await api.start(port)
    try:
        await asyncio.Event().wait()
    finally:
        await api.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_reviewapi")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", type=Path, required=True)
    ns = parser.parse_args(argv)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(ns.port, json.loads(ns.config.read_text())))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
