"""The gateway's ``kubernetes`` authentication mode on loopback (``gateway/identity.py`` over
``k8s/auth.py``): the TokenReview and SubjectAccessReview caches (hits, TTL, entry bound), the
per-caller review rate, the wire mapping (401 bad token, 503 apiserver down, 429 throttled, 404
for a workload the caller may not use), and request ids nobody can predict.

The review API is :mod:`bench.gateway_reviewapi` (the real paths and bodies, on loopback), reached
by the product's own Kubernetes client; the tenancy matrix against the real kube-apiserver is
``tests/tenancy/test_gateway_auth.py``.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bench.gateway_reviewapi import ReviewApi, kubeconfig
from sparkrun_operator.gateway.app import Gateway, _RequestIds
from sparkrun_operator.gateway.errors import GatewayError
from sparkrun_operator.gateway.identity import KubeIdentity
from sparkrun_operator.gateway.routing import Workload
from sparkrun_operator.gateway.server import build
from sparkrun_operator.k8s.auth import SourceLimiter
from sparkrun_operator.k8s.client import Kube
from tests.gateway.fixed_source import FixedSource

TOKENS = {"tok-a": "alice", "tok-b": "bob"}
#: bob may use one workload of team-b, granted by its name ("llama-deploy"), not by the name it
#: serves ("llama"): a review naming the served name would be denied.
GRANTS: dict[str, list[tuple[str, str]]] = {"alice": [("team-a", "")], "bob": [("team-b", "llama-deploy")]}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


WORKLOADS = [
    Workload(namespace="team-a", name="qwen", served_name="qwen", state="Stopped"),
    Workload(namespace="team-b", name="llama-deploy", served_name="llama", state="Stopped"),
    Workload(namespace="team-b", name="other", served_name="other", state="Stopped"),
]


@pytest.fixture
async def api() -> AsyncIterator[ReviewApi]:
    reviews = ReviewApi(TOKENS, GRANTS)
    await reviews.start()
    yield reviews
    await reviews.stop()


@pytest.fixture
async def kube(api: ReviewApi, tmp_path: Path) -> AsyncIterator[Kube]:
    client = await Kube.connect(field_manager="tests", kubeconfig=str(kubeconfig(api.url, tmp_path / "kc")))
    yield client
    await client.close()


async def _identity(kube: Kube, **options: object) -> KubeIdentity:
    identity = KubeIdentity(kube, **options)  # type: ignore[arg-type]
    await identity.start()
    return identity


async def test_tokens_are_reviewed_once_then_cached_until_their_ttl(api: ReviewApi, kube: Kube) -> None:
    identity = await _identity(kube, token_ttl=30.0)
    clock = Clock()
    assert identity.authenticator is not None
    identity.authenticator.cache.clock = clock
    user = await identity.authenticate("tok-a", source="1.2.3.4")
    assert (user.username, user.uid) == ("alice", "uid-alice")
    for _ in range(5):
        assert await identity.authenticate("tok-a", source="1.2.3.4") == user
    assert api.reviews["token"] == 1
    clock.now += 31.0
    await identity.authenticate("tok-a", source="1.2.3.4")
    assert api.reviews["token"] == 2


async def test_a_bad_or_missing_token_is_401_and_the_rejection_is_cached(api: ReviewApi, kube: Kube) -> None:
    identity = await _identity(kube)
    for _ in range(3):
        with pytest.raises(GatewayError) as caught:
            await identity.authenticate("tok-nobody", source="x")
        assert caught.value.status == 401
    assert api.reviews["token"] == 1
    with pytest.raises(GatewayError) as missing:
        await identity.authenticate(None, source="x")
    assert missing.value.status == 401


async def test_decisions_are_cached_per_user_and_workload_with_ttl_and_bound(
    api: ReviewApi, kube: Kube
) -> None:
    identity = await _identity(kube, access_ttl=10.0, denied_ttl=5.0, max_decisions=2)
    assert identity.reviewer is not None
    clock = Clock()
    identity.reviewer.cache.clock = clock
    bob = await identity.authenticate("tok-b", source="x")
    assert await identity.may_use(bob, "team-b", "llama-deploy")
    assert not await identity.may_use(bob, "team-b", "other")
    assert await identity.may_use(bob, "team-b", "llama-deploy")
    assert api.reviews["access"] == 2
    clock.now += 6.0  # the denial expired, the grant did not
    assert not await identity.may_use(bob, "team-b", "other")
    assert await identity.may_use(bob, "team-b", "llama-deploy")
    assert api.reviews["access"] == 3
    # A third decision evicts the oldest of two entries (llama's allow, refreshed least recently).
    assert not await identity.may_use(bob, "team-a", "qwen")
    assert api.reviews["access"] == 4
    assert await identity.may_use(bob, "team-b", "llama-deploy")
    assert api.reviews["access"] == 5


async def test_reviews_are_rate_limited_per_user(api: ReviewApi, kube: Kube) -> None:
    limiter = SourceLimiter(rate=0.001, burst=2.0)
    identity = await _identity(kube, access_limiter=limiter)
    bob = await identity.authenticate("tok-b", source="x")
    await identity.may_use(bob, "team-b", "one")
    await identity.may_use(bob, "team-b", "two")
    with pytest.raises(GatewayError) as caught:
        await identity.may_use(bob, "team-b", "three")
    assert caught.value.status == 429
    assert caught.value.retry_after is not None
    assert api.reviews["access"] == 2
    assert await identity.may_use(bob, "team-b", "two") is False  # cached answers cost no token
    alice = await identity.authenticate("tok-a", source="x")
    assert await identity.may_use(alice, "team-a", "three")  # another user has its own bucket


async def test_an_unanswered_review_is_503_and_caches_nothing(api: ReviewApi, kube: Kube) -> None:
    identity = await _identity(kube)
    api.down = True
    with pytest.raises(GatewayError) as token:
        await identity.authenticate("tok-a", source="x")
    assert (token.value.status, token.value.code) == (503, "auth_unavailable")
    api.down = False
    alice = await identity.authenticate("tok-a", source="x")
    api.down = True
    with pytest.raises(GatewayError) as access:
        await identity.may_use(alice, "team-a", "qwen")
    assert access.value.status == 503
    api.down = False
    assert await identity.may_use(alice, "team-a", "qwen")


async def test_a_listing_asks_per_namespace_then_per_workload_only_where_denied(
    api: ReviewApi, kube: Kube
) -> None:
    identity = await _identity(kube)
    alice = await identity.authenticate("tok-a", source="x")
    bob = await identity.authenticate("tok-b", source="x")
    assert await identity.usable(alice, WORKLOADS) == {"team-a/qwen"}
    assert api.reviews["access"] == 4  # two namespaces, then team-b's two workloads
    assert await identity.usable(bob, WORKLOADS) == {"team-b/llama-deploy"}
    assert not await identity.may_use(bob, "team-b", "llama")  # the served name is no grant


@pytest.fixture
async def gateway(kube: Kube) -> AsyncIterator[httpx.AsyncClient]:
    gw = Gateway(FixedSource(WORKLOADS), identity=KubeIdentity(kube))
    await gw.startup()
    transport = httpx.ASGITransport(app=gw, client=("10.0.0.1", 1234))  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url="http://gw") as client:
        yield client
    await gw.shutdown()


def _bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_the_wire_answers_401_404_and_503_in_each_family(
    api: ReviewApi, gateway: httpx.AsyncClient
) -> None:
    chat = {"model": "llama", "messages": [{"role": "user", "content": "hi"}]}
    bad = await gateway.post("/v1/chat/completions", json=chat, headers=_bearer("tok-x"))
    assert bad.status_code == 401
    assert bad.json()["error"]["type"] == "authentication_error"
    assert (await gateway.get("/v1/models")).status_code == 401
    # alice may not use team-b's llama: answered as absent, and nothing is woken.
    absent = await gateway.post("/v1/chat/completions", json=chat, headers=_bearer("tok-a"))
    assert absent.status_code == 404
    assert absent.json()["error"]["code"] == "model_not_found"
    ollama = await gateway.post("/api/chat", json=chat, headers=_bearer("tok-a"))
    assert ollama.status_code == 404
    assert "error" in ollama.json()
    models = await gateway.get("/v1/models", headers=_bearer("tok-a"))
    assert [m["id"] for m in models.json()["data"]] == ["qwen"]
    assert (await gateway.post("/v1/cancel/abc", headers=_bearer("tok-a"))).status_code == 404
    api.down = True
    down = await gateway.post("/v1/messages", json=chat, headers={"x-api-key": "tok-b"})
    assert down.status_code == 503
    assert down.json()["error"]["type"] == "overloaded_error"
    assert "Kubernetes API did not answer" in down.json()["error"]["message"]
    tags = await gateway.get("/api/tags", headers=_bearer("tok-b"))
    assert tags.status_code == 503
    assert "Authentication is unavailable" in tags.json()["error"]
    assert (await gateway.get("/metrics", headers=_bearer("tok-b"))).status_code == 503
    assert (await gateway.get("/healthz")).status_code == 200  # public, no review


async def test_a_grant_names_the_workload_not_its_served_name(gateway: httpx.AsyncClient) -> None:
    """The SubjectAccessReview names the workload (``llama-deploy``), not the model it serves."""
    models = await gateway.get("/v1/models", headers=_bearer("tok-b"))
    assert models.status_code == 200, models.text
    assert [m["id"] for m in models.json()["data"]] == ["llama"]


def test_request_ids_are_distinct_and_not_predictable_from_earlier_ids() -> None:
    ids = _RequestIds()
    drawn = [ids() for _ in range(5000)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", rid) for rid in drawn)
    assert len(set(drawn)) == len(drawn)
    # A prefix and a counter (the scheme before) fail both: a shared prefix, a step of one.
    assert len({rid[:16] for rid in drawn}) == len(drawn)
    steps = {int(b, 16) - int(a, 16) for a, b in itertools.pairwise(drawn)}
    assert len(steps) == len(drawn) - 1
    # Another process (another key) draws other ids for the same counter values.
    other = _RequestIds()
    assert not {other() for _ in range(100)} & set(drawn[:100])


def test_the_command_line_picks_one_mode(tmp_path: Path) -> None:
    routes = tmp_path / "routes.yaml"
    routes.write_text("workloads: []\n")
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - key: sk-x\n")
    gateway, _ = build(["--routes", str(routes), "--auth=kubernetes", "--auth-audience", "gw"])
    assert gateway.identity is not None
    assert gateway.identity.audiences == ("gw",)
    assert gateway.keys is None
    keyed, _ = build(["--routes", str(routes), "--keys", str(keys)])  # --keys implies keys
    assert keyed.keys is not None
    assert keyed.identity is None
    assert build(["--routes", str(routes)])[0].keys is None
    for wrong in (
        ["--keys", str(keys), "--auth=kubernetes"],
        ["--auth=keys"],
        ["--keys", str(keys), "--auth=none"],
    ):
        with pytest.raises(SystemExit) as refused:
            build(["--routes", str(routes), *wrong])
        assert refused.value.code == 2
