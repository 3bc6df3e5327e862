"""An InferenceBenchmark with a registry profile (``profile: "@<registry>/<name>"``) on the testbed:
the operator reads the RecipeRegistry and its profile ConfigMap (both created here directly, as
the registry controller writes them: label, annotation, a controller ownerReference), and the
scenario Job runs the real llama-benchy with the profile's arguments under the spec's
``benchArgs`` (sparkrun's merge). A ConfigMap that claims to be the registry's but names another
UID is not its profile, one edited since the registry wrote it (its data no longer has the digest
in the registry's ``status.configMaps``) is refused until a sync writes it back, and an unknown
registry fails the benchmark with the reason.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrun_operator.recipe.trust import config_map_digest
from sparkrun_operator.render import keys
from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, condition
from tests.operator.test_benchmark import Factory, _engine, _jobs, _serve, benchmark, wait_phase
from tests.operator.test_modelcache import _node_ip

PROFILE = "framework: llama-benchy\nargs:\n  pp: [64]\n  tg: [8]\n  runs: 1\n"


@pytest.fixture
def registry(kube: KubeApi, namespace: str) -> Iterator[dict[str, Any]]:
    """A RecipeRegistry whose objects land in ``namespace`` (its URL answers nothing: no sync
    replaces what this test writes as if it had synced)."""
    name = f"profiles-{secrets.token_hex(3)}"
    body = {
        "apiVersion": API,
        "kind": "RecipeRegistry",
        "metadata": {"name": name},
        "spec": {
            "url": "http://127.0.0.1:9/none.git",
            "targetNamespace": namespace,
            "syncIntervalSeconds": 604800,
        },
    }
    created = kube.create(body)
    try:
        yield created
    finally:
        kube.delete(API, "RecipeRegistry", name)


def _profile_map(registry: dict[str, Any], name: str, text: str, uid: str | None = None) -> dict[str, Any]:
    meta = registry["metadata"]
    slug = name.replace("/", "-")
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"{meta['name']}-bench-{slug}",
            "namespace": registry["spec"]["targetNamespace"],
            "labels": {keys.LABEL_REGISTRY: meta["name"], keys.LABEL_BENCHMARK_PROFILE: slug},
            "annotations": {keys.ANNOTATION_BENCHMARK_PROFILE_NAME: name},
            "ownerReferences": [
                {
                    "apiVersion": API,
                    "kind": "RecipeRegistry",
                    "name": meta["name"],
                    "uid": uid or meta["uid"],
                    "controller": True,
                }
            ],
        },
        "data": {"profile.yaml": text},
    }


def record_config_maps(kube: KubeApi, registry: str, written: list[dict[str, Any]]) -> None:
    """Record ``written`` (stored profile ConfigMaps) in the registry's ``status.configMaps``
    with their data's digests, as its controller does after a sync."""
    entries = [
        {
            "name": cm["metadata"]["name"],
            "kind": "benchmarkProfile",
            "item": cm["metadata"]["annotations"][keys.ANNOTATION_BENCHMARK_PROFILE_NAME],
            "digest": config_map_digest(cm),
        }
        for cm in written
    ]
    kube.request(
        "PATCH",
        kube.resource_path(API, "RecipeRegistry", name=registry) + "/status",
        json={"status": {"configMaps": entries}},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def test_a_registry_profile_sets_the_framework_arguments(
    kube: KubeApi,
    namespace: str,
    operator_factory: Factory,
    netns_network: None,
    registry: dict[str, Any],
) -> None:
    with Hub(default_repos(lfs_mib=0.01), host=_node_ip(kube)) as hub:
        _run(kube, namespace, operator_factory, hub, registry)


def _run(
    kube: KubeApi, namespace: str, operator_factory: Factory, pod_hub: Hub, registry: dict[str, Any]
) -> None:
    reg = registry["metadata"]["name"]
    tiny = kube.apply(_profile_map(registry, "suite/tiny-load", PROFILE))
    forged = kube.apply(_profile_map(registry, "forged", PROFILE, uid="00000000-0000-0000-0000-000000000000"))
    edited = kube.apply(_profile_map(registry, "edited", PROFILE))
    # NB: recorded before the operator starts: its first (failing) sync keeps what status lists
    record_config_maps(kube, reg, [tiny, forged, edited])
    # a tenant edits one after the registry wrote it
    kube.apply(_profile_map(registry, "edited", PROFILE.replace("runs: 1", "runs: 1000")))
    operator_factory(namespace)
    _serve(kube, namespace, "tiny", _engine(0.01, 0.005))
    scenario = [{"name": "one", "concurrency": 1}]  # pp and tg come from the profile
    kube.apply(benchmark("with-profile", namespace, pod_hub, scenario, profile=f"@{reg}/tiny-load"))
    done = wait_phase(kube, namespace, "with-profile", ("Succeeded", "Failed"), timeout=180)
    assert done["status"]["phase"] == "Succeeded", done["status"]
    [job] = _jobs(kube, namespace, "with-profile")
    argv = job["spec"]["template"]["spec"]["containers"][0]["args"]
    plan = json.loads(argv[argv.index("--plan") + 1])
    assert plan["registryProfile"] == f"@{reg}/tiny-load"
    assert "profile" not in plan
    assert (plan["benchArgs"]["pp"], plan["benchArgs"]["tg"], plan["benchArgs"]["runs"]) == ([64], [8], 1)
    assert plan["benchArgs"]["skip_coherence"] is True  # the spec's own, over the profile's
    raw_ref = done["status"]["results"][0]["rawOutput"]
    raw = kube.get("v1", "ConfigMap", raw_ref["configMap"], namespace=namespace)
    assert raw is not None
    assert "pp=64, tg=8, depth=0, concurrency=1" in raw["data"]["one"]

    # not the registry's (another UID), edited since the registry wrote it, and a registry that
    # does not exist: Failed, with the reason
    edited_why = (
        f"ConfigMap {namespace}/{edited['metadata']['name']}: edited since RecipeRegistry {reg} wrote it; "
        "the next sync restores it"
    )
    for name, profile, reason, why in (
        ("forged", f"@{reg}/forged", "ProfileNotFound", f"not found in registry {reg} (its profiles: "),
        ("edited", f"@{reg}/edited", "ProfileEdited", edited_why),
        ("no-registry", "@no-such-registry/x", "ProfileNotFound", "no RecipeRegistry 'no-such-registry'"),
    ):
        kube.apply(benchmark(name, namespace, pod_hub, scenario, profile=profile))
        failed = wait_phase(kube, namespace, name, ("Failed", "Succeeded"), timeout=60)
        cond = condition(failed, "Failed")
        assert cond is not None
        assert (cond["status"], cond["reason"]) == ("True", reason), cond
        assert why in cond["message"], cond
        assert _jobs(kube, namespace, name) == []
