"""Hostile callers against the gateway's ``kubernetes`` mode (issue 26 review): the review budgets
must hold per caller, not per proxy address or per token.

- Behind a proxy (an ingress, the platform's Gateway API implementation) every caller has the
  proxy's address: one tenant sending invalid tokens must not spend the TokenReviews that the
  other callers' known tokens need when their cache entry expires (every ``--auth-ttl``).
- Engines key requests by ``x-request-id``: a client-chosen id must not let one tenant's
  request collide with another's on a shared engine (nor may a credential reach an engine).
- A tenant may issue itself any number of keys (Secrets) or callers (ServiceAccounts): its
  requests in flight are capped per tenant, so it cannot take every slot of the gateway.
- The real kube-apiserver (1.32+) puts the token's id in the user's ``extra``
  (``authentication.kubernetes.io/credential-id``), so each token a tenant mints
  (``TokenRequest``) is another :class:`~sparkrun_operator.k8s.auth.UserInfo`: the
  SubjectAccessReview budget must be the user's, not the token's.

Reviews are answered by :mod:`bench.gateway_reviewapi` on loopback, through the product's client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from bench.gateway_reviewapi import ReviewApi, kubeconfig
from sparkrun_operator.gateway.app import Gateway
from sparkrun_operator.gateway.auth import StaticKeySource
from sparkrun_operator.gateway.config import GatewaySettings
from sparkrun_operator.gateway.errors import GatewayError
from sparkrun_operator.gateway.identity import KubeIdentity
from sparkrun_operator.gateway.routing import Workload
from sparkrun_operator.k8s.auth import SourceLimiter
from sparkrun_operator.k8s.client import Kube
from tests.gateway.fixed_source import FixedSource

CREDENTIAL_ID = "authentication.kubernetes.io/credential-id"


class MintingApi(ReviewApi):
    """Tokens ``<user>.<n>`` are ``user``'s, each with its own credential id (as the apiserver's)."""

    async def _token_review(self, request: web.Request) -> web.Response:
        self.reviews["token"] += 1
        doc: dict[str, Any] = await request.json()
        token = str((doc.get("spec") or {}).get("token", ""))
        user, _, serial = token.partition(".")
        if user not in self.grants or not serial:
            return web.json_response({**doc, "status": {"authenticated": False}}, status=201)
        info = {
            "username": user,
            "uid": f"uid-{user}",
            "groups": ["system:serviceaccounts", "system:authenticated"],
            "extra": {CREDENTIAL_ID: [f"JTI={serial}"]},
        }
        return web.json_response({**doc, "status": {"authenticated": True, "user": info}}, status=201)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def api() -> AsyncIterator[MintingApi]:
    reviews = MintingApi({}, {"alice": [("team-a", "")], "mallory": [("team-m", "")]})
    await reviews.start()
    yield reviews
    await reviews.stop()


@pytest.fixture
async def kube(api: MintingApi, tmp_path: Path) -> AsyncIterator[Kube]:
    client = await Kube.connect(field_manager="tests", kubeconfig=str(kubeconfig(api.url, tmp_path / "kc")))
    yield client
    await client.close()


async def test_invalid_tokens_through_a_proxy_do_not_lock_out_known_tokens(
    api: MintingApi, kube: Kube
) -> None:
    clock = Clock()
    limiter = SourceLimiter(rate=0.001, burst=3.0, clock=clock)
    identity = KubeIdentity(kube, token_ttl=10.0, token_limiter=limiter)
    await identity.start()
    assert identity.authenticator is not None
    identity.authenticator.cache.clock = clock
    proxy = "10.0.0.9"  # every caller's address behind the ingress
    alice = await identity.authenticate("alice.1", source=proxy)
    for n in range(2):  # mallory spends the proxy's bucket on tokens nobody issued
        with pytest.raises(GatewayError) as bad:
            await identity.authenticate(f"garbage-{n}", source=proxy)
        assert bad.value.status == 401
    with pytest.raises(GatewayError) as throttled:
        await identity.authenticate("garbage-x", source=proxy)
    assert throttled.value.status == 429
    clock.now += 11.0  # alice's token left the cache: it is reviewed again
    again = await identity.authenticate("alice.1", source=proxy)
    assert again == alice
    assert api.reviews["token"] == 4


async def test_minting_tokens_gives_a_user_no_new_access_review_budget(api: MintingApi, kube: Kube) -> None:
    identity = KubeIdentity(kube, access_limiter=SourceLimiter(rate=0.001, burst=2.0))
    await identity.start()
    first = await identity.authenticate("mallory.1", source="10.1.0.1")
    assert not await identity.may_use(first, "team-a", "one")
    assert not await identity.may_use(first, "team-a", "two")
    with pytest.raises(GatewayError) as caught:
        await identity.may_use(first, "team-a", "three")
    assert caught.value.status == 429
    minted = await identity.authenticate("mallory.2", source="10.1.0.2")
    assert minted.username == first.username
    assert minted.key != first.key  # another credential id: another identity ...
    with pytest.raises(GatewayError) as again:
        await identity.may_use(minted, "team-a", "three")  # ... but the same user's budget
    assert again.value.status == 429
    assert api.reviews["access"] == 2
    alice = await identity.authenticate("alice.1", source="10.1.0.3")
    assert await identity.may_use(alice, "team-a", "one")  # another user has its own budget


@pytest.fixture
async def engine() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    """An engine stand-in on loopback that records each request's headers."""
    seen: list[dict[str, str]] = []

    async def chat(request: web.Request) -> web.Response:
        seen.append({k.lower(): v for k, v in request.headers.items()})
        answer = {"id": "x", "object": "chat.completion", "choices": [], "model": "shared"}
        return web.json_response(answer)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield f"http://127.0.0.1:{port}", seen
    await runner.cleanup()


async def test_a_client_chosen_request_id_reaches_the_engine_unique_per_request(
    engine: tuple[str, list[dict[str, str]]],
) -> None:
    """Engines key their requests by ``x-request-id`` (vLLM before its random suffix refuses a
    second request with a running id, or aborts it with the first's abort): two tenants' requests
    to a shared model must never reach it under one id, whatever id the clients chose. The
    engine's id still starts with the client's, for correlation; the client sees its own."""
    url, seen = engine
    shared = Workload(namespace="shared", name="shared", served_name="shared", endpoints=(url,))
    keys = StaticKeySource.from_mapping({"sk-a": ["shared"], "sk-b": ["shared"]})
    gw = Gateway(FixedSource([shared]), keys=keys)
    await gw.startup()
    transport = httpx.ASGITransport(app=gw, client=("10.0.0.1", 1234))  # type: ignore[arg-type]
    body = {"model": "shared", "messages": [{"role": "user", "content": "hi"}]}
    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
            for key in ("sk-a", "sk-b", "sk-a"):
                headers = {"authorization": f"Bearer {key}", "x-request-id": "trace-1"}
                answer = await client.post("/v1/chat/completions", json=body, headers=headers)
                assert answer.status_code == 200
                assert answer.headers["x-request-id"] == "trace-1"
            plain = await client.post("/v1/chat/completions", json=body, headers={"x-api-key": "sk-b"})
    finally:
        await gw.shutdown()
    upstream = [h["x-request-id"] for h in seen]
    assert len(set(upstream)) == len(upstream) == 4
    assert all(rid.startswith("trace-1.") for rid in upstream[:3])
    assert upstream[3] == plain.headers["x-request-id"]  # an id the gateway made goes as it is
    assert all("authorization" not in h and "x-api-key" not in h for h in seen)  # no credential


@pytest.fixture
async def stalling_engine() -> AsyncIterator[tuple[str, asyncio.Event, asyncio.Event, asyncio.Event]]:
    """A tenant's engine that holds every request until released (as a hostile one would, for
    the gateway's whole read timeout); the second event is set once two requests arrived, the
    third once a request for model ``v`` (the victim's) arrived."""
    release, two, victim = asyncio.Event(), asyncio.Event(), asyncio.Event()
    arrived: list[web.Request] = []

    async def chat(request: web.Request) -> web.Response:
        arrived.append(request)
        if len(arrived) >= 2:
            two.set()
        if (await request.json()).get("model") == "v":
            victim.set()
        await release.wait()
        return web.json_response({"id": "x", "object": "chat.completion", "choices": []})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}", release, two, victim
    release.set()
    await runner.cleanup()


async def test_one_tenant_with_many_keys_cannot_fill_the_gateway(
    stalling_engine: tuple[str, asyncio.Event, asyncio.Event, asyncio.Event], tmp_path: Path
) -> None:
    """Whoever may create Secrets in a namespace issues it keys (and ServiceAccounts, callers):
    the per-key cap does not bound a tenant. Its requests to its own stalling engine must not
    take every slot of the gateway (``max_in_flight``) from the other tenants."""
    url, release, two, victim_arrived = stalling_engine
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        "keys:\n"
        + "".join(f"  - {{key: sk-m{i}, namespace: team-m}}\n" for i in range(4))
        + "  - {key: sk-v, namespace: team-v}\n"
    )
    mine = Workload(namespace="team-m", name="m", served_name="m", endpoints=(url,))
    theirs = Workload(namespace="team-v", name="v", served_name="v", endpoints=(url,))
    settings = GatewaySettings(max_in_flight=4, max_in_flight_per_key=2)
    gw = Gateway(FixedSource([mine, theirs]), settings=settings, keys=StaticKeySource.from_file(keys))
    await gw.startup()
    transport = httpx.ASGITransport(app=gw, client=("10.0.0.1", 1234))  # type: ignore[arg-type]

    def chat(model: str, key: str) -> Coroutine[Any, Any, httpx.Response]:
        body = {"model": model, "messages": [{"role": "user", "content": "hi"}]}
        return client.post("/v1/chat/completions", json=body, headers={"authorization": f"Bearer {key}"})

    try:
        async with httpx.AsyncClient(transport=transport, base_url="http://gw", timeout=30) as client:
            held = [asyncio.ensure_future(chat("m", f"sk-m{i % 4}")) for i in range(4)]
            # Without a per-tenant cap all four reach the engine and none is answered: this times out.
            async with asyncio.timeout(20):
                await two.wait()
                pending: set[asyncio.Future[httpx.Response]] = set(held)
                while len(held) - len(pending) < 2:
                    _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            refused = [t.result() for t in held if t.done()]
            assert [r.status_code for r in refused] == [429, 429]  # the tenant's cap, not the gateway's
            assert "team-m" not in refused[0].text  # the answer names no namespace
            victim = asyncio.ensure_future(chat("v", "sk-v"))
            async with asyncio.timeout(20):
                await victim_arrived.wait()  # admitted and at the engine, beside the tenant's two
            assert not victim.done()
            release.set()
            assert (await victim).status_code == 200
            assert sorted(r.status_code for r in await asyncio.gather(*held)) == [200, 200, 429, 429]
    finally:
        await gw.shutdown()


async def test_a_users_tokens_share_its_decisions(api: MintingApi, kube: Kube) -> None:
    """Each pod's token (and each rotation of it) names its own credential id: the decisions are
    the user's (RBAC does not read ``extra``), so the replicas of one app do not each ask every
    review again (a first listing asks one per namespace, and more), nor run out of the user's
    review budget doing so."""
    identity = KubeIdentity(kube)
    await identity.start()
    first = await identity.authenticate("alice.1", source="10.1.0.1")
    assert await identity.may_use(first, "team-a", "one")
    assert not await identity.may_use(first, "team-m", "two")
    replica = await identity.authenticate("alice.2", source="10.1.0.2")
    assert replica.extra != first.extra
    assert await identity.may_use(replica, "team-a", "one")
    assert not await identity.may_use(replica, "team-m", "two")
    assert api.reviews["access"] == 2
    other = await identity.authenticate("mallory.1", source="10.1.0.3")
    assert not await identity.may_use(other, "team-a", "one")  # another user: its own decisions
    assert api.reviews["access"] == 3
