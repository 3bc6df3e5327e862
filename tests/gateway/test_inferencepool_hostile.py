"""Foreign InferencePools and ``X-Gateway-Model-Name`` as a hostile tenant or engine would use them.

- The pools routed at once are capped fairly: every namespace's oldest pool before any
  namespace's second, and a pool that could never route (refused by the name policy, no usable
  port, being deleted) takes no place and no pod watch.
- A pool never selects the operator's own pods (engines, endpoint pickers): those are routed
  through their workloads, under their names, policy and authorization; the exclusion is part
  of the label selector the apiserver applies.
- A pod's address is routed only when it is an IP address a pod can have: not a host name, not
  loopback, link-local (the cloud metadata address), unspecified or multicast, and never a
  ``hostNetwork`` pod's (the node's address).
- The pool cache keeps only what routing reads: a tenant's large pool costs the gateway little.
- The body sent on with the header's name decodes to the same document as the one the gateway
  read, whatever encoding JSON allowed the caller (UTF-16, lone surrogate escapes).
"""

from __future__ import annotations

import json

import httpx
import pytest

from sparkrun_operator.api import namepolicy
from sparkrun_operator.gateway.openai_api import with_model
from sparkrun_operator.gateway.pools import MAX_POOLS, chosen, pool_entry, selector_of, slim_pool
from sparkrun_operator.render import keys

from .conftest import Engines, GatewayThread, StartGateway
from .test_inferencepool_routing import pod, pool

HEADER = "X-Gateway-Model-Name"
EXCLUDED = f"!{keys.LABEL_INFERENCE_POOL},!{keys.LABEL_WORKLOAD}"


def _stamp(i: int) -> str:
    return f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"


def test_one_namespaces_many_pools_do_not_starve_anothers() -> None:
    # An old tenant holds far more pools than the cap; a newer tenant's single pool still routes.
    greedy = [pool(namespace="greedy", name=f"p{i}", model=f"g{i}", created=_stamp(i)) for i in range(200)]
    late = pool(namespace="late", name="mine", model="late-model", created="2026-06-01T00:00:00Z")
    picked = chosen([*greedy, late], namepolicy.OPEN)
    assert len(picked) == MAX_POOLS
    assert ("late", "mine") in picked
    assert ("greedy", "p0") in picked  # each namespace's oldest first
    assert ("greedy", f"p{MAX_POOLS - 1}") not in picked  # the greedy one's newest makes room


def test_pools_that_cannot_route_take_no_place() -> None:
    policy = namepolicy.parse({"good": [""], "*": ["ok-"]})
    refused = [pool(namespace="bad", name=f"r{i}", model=f"nope{i}", created=_stamp(i)) for i in range(100)]
    portless = [pool(namespace="bad", name=f"np{i}", model=f"ok-{i}", ports=[]) for i in range(100)]
    gone = pool(namespace="bad", name="gone", model="ok-gone")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    mine = pool(namespace="good", name="mine", model="any", created="2026-06-01T00:00:00Z")
    assert set(chosen([*refused, *portless, gone, mine], policy)) == {("good", "mine")}


def test_a_pool_never_selects_the_operators_pods() -> None:
    assert selector_of(pool(match={"app": "llm"})) == f"app=llm,{EXCLUDED}"
    for key in (keys.LABEL_WORKLOAD, keys.LABEL_INFERENCE_POOL):
        assert selector_of(pool(match={key: "wl"})) is None
        assert pool_entry(pool(match={key: "wl", "app": "x"}), [pod("10.0.0.1")]) is None


@pytest.mark.parametrize(
    "ip",
    ["127.0.0.1", "::1", "169.254.169.254", "fe80::1", "0.0.0.0", "::", "224.0.0.1", "ff02::1",
     "evil.example", "10.0.0.1/x", "10.0.0.1@evil", "10.0.0.1#", "::ffff:127.0.0.1", ""],
)  # fmt: skip
def test_a_pod_address_no_pod_may_have_is_not_routed(ip: str) -> None:
    entry = pool_entry(pool(), [pod(ip), pod("10.0.0.9")])
    assert entry is not None
    assert entry.endpoints == ("http://10.0.0.9:8000",)


def test_a_host_network_pod_is_not_routed() -> None:
    host = pod("10.0.0.1")
    host["spec"] = {"hostNetwork": True}
    entry = pool_entry(pool(), [host, pod("10.0.0.2")])
    assert entry is not None
    assert entry.endpoints == ("http://10.0.0.2:8000",)


def test_the_pool_cache_keeps_only_what_routing_reads() -> None:
    big = pool(match={"app": "llm"}, ports=[{"number": 8001}, *({"number": n} for n in range(1, 9))])
    big["metadata"]["annotations"]["junk"] = "x" * 200_000
    big["metadata"]["labels"] = {"junk": "y" * 63}
    big["spec"]["extra"] = ["z" * 1000] * 100
    small = slim_pool(big)
    assert len(json.dumps(small)) < 1_000
    assert pool_entry(small, [pod("10.0.0.1")]) == pool_entry(big, [pod("10.0.0.1")])
    ours = slim_pool(pool(labels={keys.LABEL_INFERENCE_POOL: "wl"}))
    assert pool_entry(ours, [pod("10.0.0.1")]) is None  # still recognised as the operator's own
    huge_selector = slim_pool(pool(match={f"k{i}": "v" for i in range(1000)}))
    assert len(json.dumps(huge_selector)) < 1_000


def test_with_model_keeps_a_utf16_body_the_same_document() -> None:
    doc = {"prompt": "h\u00e9llo", "max_tokens": 3}
    for encoding in ("utf-16-le", "utf-16-be", "utf-32-le", "utf-16"):
        body = json.dumps(doc).encode(encoding)
        assert json.loads(body) == doc
        assert json.loads(with_model(body, dict(doc), "m")) == {"model": "m", **doc}


def test_with_model_keeps_a_lone_surrogate_escape() -> None:
    body = b'{"model": null, "prompt": "\\ud800"}'
    doc = json.loads(body)
    assert json.loads(with_model(body, doc, "m")) == {"model": "m", "prompt": "\ud800"}


@pytest.fixture
def gw(engines: Engines, start_gateway: StartGateway) -> GatewayThread:
    return start_gateway([engines.chat_workload()])


def test_a_null_model_with_a_lone_surrogate_is_no_server_error(gw: GatewayThread) -> None:
    body = b'{"model": null, "prompt": "\\ud800 hi", "max_tokens": 3}'
    answer = httpx.post(
        f"{gw.url}/v1/completions", content=body, headers={HEADER: "chat", "content-type": "application/json"}
    )
    # The gateway re-encodes the body (the header names an alias) and sends the escape on; what
    # the engine makes of it is the engine's answer (the stand-in drops the connection: 502).
    assert answer.status_code != 500, answer.text
    assert "choices" in answer.json() or "error" in answer.json()


def test_a_utf16_body_named_by_the_header_reaches_the_engine(gw: GatewayThread) -> None:
    body = json.dumps({"prompt": "hi", "max_tokens": 3}).encode("utf-16-le")
    answer = httpx.post(
        f"{gw.url}/v1/completions", content=body, headers={HEADER: "chat", "content-type": "application/json"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["model"] == "chat-model"
