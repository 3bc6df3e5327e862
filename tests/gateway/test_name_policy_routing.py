"""The name policy in the gateway's table (issue 26, ``gateway/kube.py`` ``build_entries``): names
a workload's namespace may not claim, and imperative aliases outside their ConfigMap namespace's
prefixes, are not routed, and a withheld name blocks nobody (an older squatter loses nothing it
may have, and takes nothing it may not)."""

from __future__ import annotations

import json
from typing import Any

from sparkrun_operator.api import namepolicy
from sparkrun_operator.gateway.kube import KubeRoutingSource, build_entries, imperative_aliases
from sparkrun_operator.gateway.routing import RoutingTable
from sparkrun_operator.gateway.server import build

POLICY = namepolicy.parse({"team-p": ["p-"], "team-q": ["q-"], "*": ["shared-"]})


def _iw(namespace: str, name: str, created: str, status_model: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
        "spec": {"recipe": {"name": "r"}},
        "status": {"model": status_model},
    }


def _slice(namespace: str, service: str, ip: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "labels": {"kubernetes.io/service-name": service}},
        "ports": [{"name": "http", "port": 8000}],
        "endpoints": [{"addresses": [ip], "conditions": {"ready": True}}],
    }


SQUATTER = _iw(
    "team-q", "early", "2026-01-01T00:00:00Z", {"name": "m", "servedName": "p-chat", "aliases": ["q-own"]}
)
VICTIM = _iw("team-p", "late", "2026-06-01T00:00:00Z", {"name": "m", "servedName": "p-chat"})
SLICES = [_slice("team-q", "early", "10.0.0.1"), _slice("team-p", "late", "10.0.0.2")]


def test_an_older_squatter_outside_its_prefixes_is_not_routed() -> None:
    table = RoutingTable.build(build_entries([SQUATTER, VICTIM], SLICES, None, POLICY), 1)
    victim = table.lookup("p-chat")
    assert victim is not None
    assert victim.key == "team-p/late"
    assert victim.endpoints == ("http://10.0.0.2:8000",)
    squatter = table.lookup("q-own")
    assert squatter is not None
    assert squatter.key == "team-q/early"
    assert squatter.names == ("q-own",)  # listed under its allowed names only
    assert squatter.served_name == "p-chat"  # still what its own engine is asked for
    assert table.conflicts == ()
    assert set(table.by_name) == {"p-chat", "q-own"}


def test_without_the_policy_the_oldest_claim_keeps_the_name() -> None:
    table = RoutingTable.build(build_entries([SQUATTER, VICTIM], SLICES), 1)
    found = table.lookup("p-chat")
    assert found is not None
    assert found.key == "team-q/early"  # ADR 0019's known gap, which the policy closes


def test_a_squatter_with_no_allowed_name_is_not_routed_at_all() -> None:
    only = _iw("team-q", "only", "2026-01-01T00:00:00Z", {"name": "m", "servedName": "p-x"})
    entries = build_entries([only], [], None, POLICY)
    assert [e.names for e in entries] == [()]
    assert RoutingTable.build(entries, 1).by_name == {}


def test_imperative_aliases_follow_their_namespaces_prefixes() -> None:
    config_maps = [
        {
            "metadata": {"namespace": "team-q", "name": "sparkrun-gateway-aliases"},
            "data": {"aliases.json": json.dumps({"p-stolen": "q-own", "q-fast": "q-own"})},
        },
        {
            "metadata": {"namespace": "elsewhere", "name": "sparkrun-gateway-aliases"},
            "data": {"aliases.json": json.dumps({"shared-x": "shared-m", "q-y": "shared-m"})},
        },
    ]
    other = _iw("elsewhere", "o", "2026-02-01T00:00:00Z", {"name": "m", "servedName": "shared-m"})
    entries = build_entries([SQUATTER, VICTIM, other], [], imperative_aliases(config_maps), POLICY)
    table = RoutingTable.build(entries, 1)
    early, o = table.lookup("q-fast"), table.lookup("shared-x")
    assert early is not None
    assert early.key == "team-q/early"
    assert o is not None
    assert o.key == "elsewhere/o"
    assert table.lookup("p-stolen") is None
    assert table.lookup("q-y") is None


def test_the_gateway_flag_parses_the_policy() -> None:
    gateway, args = build(
        ["--kubernetes", "--name-prefixes", json.dumps(POLICY.to_wire()), "--inference-pools", "off"]
    )
    assert args.name_prefixes == POLICY
    assert isinstance(gateway.source, KubeRoutingSource)
    assert gateway.source.name_policy == POLICY
