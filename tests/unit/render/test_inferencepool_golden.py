"""Golden files for a workload's InferencePool and its Managed endpoint picker
(``render/inferencepool.py``, issue 30).

Each case renders the pool and the picker objects and compares the YAML text with
``golden_pool/<case>.yaml``. Run with ``UPDATE_GOLDEN=1`` to rewrite them after an intended
change, then review the diff: it is exactly what changes in the objects users' clusters get.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.inferencepool import InferencePoolSpec
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import (
    PICKER_CONFIG,
    PickerSettings,
    picker_args,
    render_picker,
    render_pool,
)
from sparkrun_operator.render.networkpolicy import EnginePolicy
from sparkrun_operator.render.workload import Owner, leader_selector

GOLDEN = Path(__file__).resolve().parent / "golden_pool"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
NS = "serving"
OWNER_UID = "6f0c2a3e-0000-4000-8000-000000000030"


def _render(
    name: str,
    doc: dict[str, Any] | None,
    settings: PickerSettings | None = None,
    policy: EnginePolicy | None = None,
) -> list[dict[str, Any]]:
    spec = InferencePoolSpec.model_validate(doc) if doc is not None else None
    owner = Owner(name=name, uid=OWNER_UID)
    pool = render_pool(namespace=NS, workload=name, spec=spec, owner=owner)
    picker = render_picker(
        namespace=NS,
        workload=name,
        spec=spec,
        settings=settings or PickerSettings(),
        owner=owner,
        policy=policy,
    )
    return [pool, *picker]


#: Engine NetworkPolicies on, with the platform gateway's and Prometheus' namespaces as peers:
#: the picker's fifth object, its NetworkPolicy.
ENGINE_POLICY = EnginePolicy(
    release_namespace="sparkrun-system",
    release_labels={"app.kubernetes.io/name": "sparkrun-operator", "app.kubernetes.io/instance": "sparkrun"},
    gateway_from=({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}}},),
    metrics_from=({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},),
)


CASES: dict[str, Callable[[], list[dict[str, Any]]]] = {
    "managed-default": lambda: _render("qwen", None),
    "managed-settings": lambda: _render(
        "llama-70b",
        {"endpointPicker": {"failureMode": "FailOpen"}},
        PickerSettings(
            image="registry.example.com/mirror/epp:v1.5.0",
            resources={"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
            node_selector={"node-role.kubernetes.io/infra": ""},
            tolerations=({"key": "infra", "operator": "Exists", "effect": "NoSchedule"},),
            cluster_role="ml-endpoint-picker",
        ),
    ),
    "managed-network-policy": lambda: _render("qwen", None, policy=ENGINE_POLICY),
    "external": lambda: _render(
        "qwen", {"endpointPicker": {"mode": "External", "service": "platform-epp", "port": 9102}}
    ),
    "none": lambda: _render("qwen", {"endpointPicker": {"mode": "None"}}),
}


def _dump(docs: list[dict[str, Any]]) -> str:
    return yaml.safe_dump_all(docs, sort_keys=False, width=120)


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    text = _dump(CASES[case]())
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.exists(), f"missing golden {path}; run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), (
        f"{case} differs from {path}; rerun with UPDATE_GOLDEN=1 and review the diff"
    )


def test_no_stray_goldens() -> None:
    assert {p.stem for p in GOLDEN.glob("*.yaml")} == set(CASES)


def test_pool_selects_the_leaders_on_the_engine_port_and_names_the_managed_picker() -> None:
    pool = render_pool(namespace=NS, workload="qwen", spec=None)
    assert pool["spec"]["selector"] == {"matchLabels": leader_selector("qwen")}
    assert pool["spec"]["targetPorts"] == [{"number": 8000}]
    assert pool["spec"]["endpointPickerRef"] == {
        "group": "",
        "kind": "Service",
        "name": "qwen-epp",
        "port": {"number": 9002},
        "failureMode": "FailClose",
    }
    assert "ownerReferences" not in pool["metadata"]


def test_external_port_defaults_to_9002_and_none_names_no_picker() -> None:
    external = InferencePoolSpec.model_validate({"endpointPicker": {"mode": "External", "service": "epp"}})
    ref = render_pool(namespace=NS, workload="qwen", spec=external)["spec"]["endpointPickerRef"]
    assert ref["name"] == "epp"
    assert ref["port"] == {"number": 9002}
    none = InferencePoolSpec.model_validate({"endpointPicker": {"mode": "None"}})
    assert "endpointPickerRef" not in render_pool(namespace=NS, workload="qwen", spec=none)["spec"]
    for spec in (external, none, InferencePoolSpec(enabled=False)):
        assert render_picker(namespace=NS, workload="qwen", spec=spec, settings=PickerSettings()) == []


def test_the_hash_follows_what_the_object_says() -> None:
    base = render_pool(namespace=NS, workload="qwen", spec=None)
    same = render_pool(namespace=NS, workload="qwen", spec=InferencePoolSpec())
    fail_open = render_pool(
        namespace=NS,
        workload="qwen",
        spec=InferencePoolSpec.model_validate({"endpointPicker": {"failureMode": "FailOpen"}}),
    )
    hashes = [d["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH] for d in (base, same, fail_open)]
    assert hashes[0] == hashes[1] != hashes[2]
    images = {
        render_picker(namespace=NS, workload="qwen", spec=None, settings=PickerSettings(image=image))[2][
            "metadata"
        ]["annotations"][keys.ANNOTATION_POOL_HASH]
        for image in ("a:1", "a:2")
    }
    assert len(images) == 2


def test_picker_objects_never_carry_the_engine_label() -> None:
    for doc in render_picker(namespace=NS, workload="qwen", spec=None, settings=PickerSettings()):
        assert keys.LABEL_WORKLOAD not in doc["metadata"]["labels"]
        assert doc["metadata"]["labels"][keys.LABEL_INFERENCE_POOL] == "qwen"
        assert doc["metadata"]["labels"][keys.LABEL_COMPONENT] == keys.COMPONENT_ENDPOINT_PICKER
    deployment = render_picker(namespace=NS, workload="qwen", spec=None, settings=PickerSettings())[2]
    assert keys.LABEL_WORKLOAD not in deployment["spec"]["template"]["metadata"]["labels"]


def test_the_plugin_configuration_is_inline_and_scrapes_vllm_metrics() -> None:
    args = picker_args(namespace=NS, workload="qwen")
    assert args[args.index("--config-text") + 1] == PICKER_CONFIG
    assert args[args.index("--pool-name") + 1] == "qwen"
    assert args[args.index("--pool-namespace") + 1] == NS
    config = yaml.safe_load(PICKER_CONFIG)
    assert config["kind"] == "EndpointPickerConfig"
    types = [p["type"] for p in config["plugins"]]
    assert types == [
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "prefix-cache-scorer",
        "metrics-data-source",
        "core-metrics-extractor",
    ]
    profile = config["schedulingProfiles"][0]
    assert {p["pluginRef"] for p in profile["plugins"]} == set(types[:3])
