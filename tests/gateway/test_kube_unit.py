"""The pure parts of the gateway's Kubernetes source: state, endpoints, capabilities, keys."""

from __future__ import annotations

import base64
import json
from typing import Any

from sparkrun_operator.gateway.kube import (
    build_entries,
    grant_of,
    imperative_aliases,
    ready_endpoints,
    routing_state,
)


def _iw(name: str, **spec: Any) -> dict[str, Any]:
    status = spec.pop("status", {})
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec, "status": status}


def _slice(service: str, endpoints: list[dict[str, Any]], port: int = 8000) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ns",
            "name": f"{service}-abc",
            "labels": {"kubernetes.io/service-name": service},
        },
        "ports": [{"name": "http", "port": port}],
        "endpoints": endpoints,
    }


def test_state_follows_spec_and_the_sleeping_condition() -> None:
    assert routing_state(_iw("a")) == "Running"
    assert routing_state(_iw("a", state="Stopped")) == "Stopped"
    assert routing_state(_iw("a", state="Sleeping")) == "Sleeping"
    asleep = {"conditions": [{"type": "Sleeping", "status": "True"}]}
    assert routing_state(_iw("a", state="Running", status=asleep)) == "Sleeping"
    awake = {"conditions": [{"type": "Sleeping", "status": "False"}]}
    assert routing_state(_iw("a", state="Running", status=awake)) == "Running"


def test_only_ready_non_terminating_endpoints_are_routed() -> None:
    sl = _slice(
        "a",
        [
            {"addresses": ["10.244.0.5"], "conditions": {"ready": True}},
            {"addresses": ["10.244.0.6"], "conditions": {"ready": False}},
            {"addresses": ["10.244.0.7"], "conditions": {"ready": True, "terminating": True}},
            {"addresses": ["10.244.0.8"]},  # nil ready means ready
            {"addresses": ["fd00::1"], "conditions": {"ready": True}},
        ],
    )
    assert ready_endpoints([sl]) == (
        "http://10.244.0.5:8000",
        "http://10.244.0.8:8000",
        "http://[fd00::1]:8000",
    )


def test_capabilities_declared_or_derived() -> None:
    # A workload without a recipe and without status.model yet: the rule on its spec.
    def caps(**spec: Any) -> frozenset[str]:
        (entry,) = build_entries([_iw("a", model={"name": "org/m"}, **spec)], [])
        return entry.capabilities

    assert caps() == {"text-generation"}
    assert caps(engine={"args": ["--task", "embed"]}) == {"embedding"}
    assert caps(engine={"args": ["--runner=pooling"]}) == {"embedding"}
    declared = {"capabilities": ["embedding", "text-generation"]}
    assert caps(routing=declared, engine={"args": []}) == {"embedding", "text-generation"}


def test_entries_join_workloads_with_their_service_slices() -> None:
    workloads = [
        _iw("llama", model={"name": "meta/llama", "servedName": "llama", "aliases": ["l", "llama"]}),
        _iw("qwen", model={"name": "Qwen/Qwen3"}, routing={"prefixAffinity": True}),
        {
            **_iw("gone", model={"name": "x"}),
            "metadata": {"namespace": "ns", "name": "gone", "deletionTimestamp": "t"},
        },
    ]
    slices = [
        _slice("llama", [{"addresses": ["10.244.0.5"], "conditions": {"ready": True}}]),
        _slice("other", [{"addresses": ["10.244.0.9"], "conditions": {"ready": True}}]),
    ]
    entries = {e.name: e for e in build_entries(workloads, slices)}
    assert set(entries) == {"llama", "qwen"}
    assert entries["llama"].served_name == "llama"
    assert entries["llama"].aliases == ("l",)
    assert entries["llama"].endpoints == ("http://10.244.0.5:8000",)
    assert entries["llama"].routable
    assert entries["qwen"].served_name == "Qwen/Qwen3"
    assert entries["qwen"].prefix_affinity
    assert not entries["qwen"].routable


def _secret(**data: str) -> dict[str, Any]:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"namespace": "ns", "name": "k"}, "data": encoded}


def test_key_secrets() -> None:
    found = grant_of(_secret(key="sk-1", models="llama, qwen\nmistral"))
    assert found is not None
    key, grant = found
    assert key == "sk-1"
    assert grant.models == {"llama", "qwen", "mistral"}
    assert grant.allows("qwen", "ns")
    assert not grant.allows("gpt", "ns")
    # A key from a tenant's namespace grants at most that namespace's models.
    assert not grant.allows("qwen", "other")
    everything = grant_of(_secret(key="sk-2"))
    assert everything is not None
    assert everything[1].models is None
    assert everything[1].allows("anything", "ns")
    assert not everything[1].allows("anything", "other")
    assert not everything[1].admin
    # ... unless the Secret lives in an administrator namespace.
    admin = grant_of(_secret(key="sk-3"), admin_namespaces=["ns"])
    assert admin is not None
    assert admin[1].allows("anything", "other")
    assert admin[1].admin
    assert grant_of(_secret(models="llama")) is None
    assert grant_of({"metadata": {"name": "bad"}, "data": {"key": "%%%not-base64"}}) is None


def test_imperative_aliases_from_the_config_map() -> None:
    config_maps = [
        {
            "metadata": {"namespace": "ns", "name": "sparkrun-gateway-aliases"},
            "data": {"aliases.json": json.dumps({"fast": "llama", "clash": "llama", "orphan": "nothing"})},
        },
        {"metadata": {"namespace": "bad", "name": "sparkrun-gateway-aliases"}, "data": {"aliases.json": "{"}},
    ]
    aliases = imperative_aliases(config_maps)
    assert aliases == {"ns": {"fast": "llama", "clash": "llama", "orphan": "nothing"}}
    workloads = [
        _iw("llama", model={"name": "meta/llama", "servedName": "llama"}),
        _iw("other", model={"name": "x", "servedName": "clash"}),
    ]
    entries = {e.name: e for e in build_entries(workloads, [], aliases)}
    assert entries["llama"].aliases == (
        "fast",
    )  # "clash" belongs to another workload; "orphan" has no target
    assert entries["other"].aliases == ()


# -- names and capabilities come from status.model (plan/served.py, the one naming rule) -------

_SERVED_X = {"name": "org/m", "servedName": "served-x", "aliases": ["x"], "capabilities": ["text-generation"]}


def test_a_recipe_workload_is_routed_by_the_name_its_engine_serves() -> None:
    # The scenario: workload wl-x serves a recipe whose defaults.served_model_name is
    # served-x; the engine answers only to served-x, so the gateway must route served-x (and
    # rewrite an alias to it), never the workload's own name.
    wl = _iw("wl-x", recipe={"name": "r"}, status={"model": _SERVED_X})
    sl = _slice("wl-x", [{"addresses": ["10.244.0.5"], "conditions": {"ready": True}}])
    (entry,) = build_entries([wl], [sl])
    assert entry.served_name == "served-x"
    assert entry.names == ("served-x", "x")
    assert "wl-x" not in entry.names
    assert entry.capabilities == {"text-generation"}
    assert entry.routable


def test_status_model_names_a_recipe_workload_and_the_spec_a_plain_one() -> None:
    # A recipe-based workload: status.model is what the operator resolved for the desired
    # revision (the recipe included); the spec's own fields are not read again by the gateway.
    model = {"name": "org/m", "servedName": "spec-name", "aliases": ["spec-alias"]}
    status = {"model": {**_SERVED_X, "capabilities": ["embedding"]}}
    (entry,) = build_entries([_iw("a", recipe={"name": "r"}, model=model, status=status)], [])
    assert entry.names == ("served-x", "x")
    assert entry.capabilities == {"embedding"}
    # Without a recipe the rule needs only the spec: a status.model (writable by whoever holds
    # inferenceworkloads/status) is not believed over it.
    (plain,) = build_entries([_iw("b", model=model, status=status)], [])
    assert plain.names == ("spec-name", "spec-alias")
    assert plain.capabilities == {"text-generation"}


def test_capabilities_come_from_status_model() -> None:
    # A recipe whose args say --task embed: the operator derived [embedding] from the recipe's
    # args; the workload's own spec says nothing, and the gateway must not fall back to it.
    wl = _iw("emb", recipe={"name": "r"}, status={"model": {**_SERVED_X, "capabilities": ["embedding"]}})
    (entry,) = build_entries([wl], [])
    assert entry.capabilities == {"embedding"}


def test_an_unresolved_recipe_workload_is_not_routed() -> None:
    # No status.model yet: the operator has not resolved its Recipe, so it has no names: it is
    # left out of the table (it does not claim its own name, and nothing fails).
    workloads = [
        _iw("wl-x", recipe={"name": "r"}),
        _iw(
            "wl-y",
            recipe={"name": "r"},
            model={"name": "org/m", "servedName": "y"},
            status={"phase": "Pending"},
        ),
        _iw("plain", model={"name": "org/p"}),
    ]
    entries = build_entries(workloads, [])
    assert [e.name for e in entries] == ["plain"]
    assert entries[0].served_name == "org/p"
