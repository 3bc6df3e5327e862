"""The operator's InferencePool per workload (issue 30) on the testbed: the real apiserver with
the Inference Extension's v1.5.0 CRD (the chart's vendored copy, installed as
``inferencePool.installCRD`` would), the real ``sparkrun-k8s operator run --inference-pools auto``
serving the test's namespace, workloads on KWOK nodes (no process runs: the picker's pod is a
KWOK pod too; ``tests/inferencepool/`` runs the real picker).

No Gateway implementation runs on the testbed: the test writes a pool's ``status.parents`` as
an Inference-Extension gateway does, through the status subresource.

Shown: the pool (owned, the leader selector, port 8000, its picker's Service) and the Managed
picker's four objects appear; ``PoolAccepted`` follows the gateway's status (Unknown NoParent,
True Accepted, False with the gateway's reason) and ``status.inferencePool`` lists the parent;
External names the platform's picker and removes the managed one; ``enabled: false`` removes
the pool too. A pool or a picker ServiceAccount of the name someone else made is left alone
(``PoolNameTaken``), and a pool the v1.5 CRD refuses (mode None) is reported (``Refused``):
neither fails the workload, which becomes Ready with its JobSets as before. With engine
NetworkPolicies the picker has a fifth object, its own NetworkPolicy (review F2), evaluated as
stored by ``hack/netpol-eval``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.workload import ENGINE_PORT
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import (
    API,
    OperatorProcess,
    condition,
    get_workload,
    jobsets,
    wait_condition,
    workload,
)
from tests.tenancy.test_network_policy import World, netpol_eval

__all__ = ["netpol_eval"]  # the fixture

pytestmark = pytest.mark.testbed

Factory = Callable[..., OperatorProcess]
CRD = Path(__file__).resolve().parents[2] / "helm/sparkrun-operator/files/inferencepool-crd.yaml"
POOL_API = "inference.networking.k8s.io/v1"
NETPOL_API = "networking.k8s.io/v1"
#: The Managed picker's objects: (apiVersion, kind).
PICKER = (
    ("v1", "ServiceAccount"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("apps/v1", "Deployment"),
    ("v1", "Service"),
)
POOLED = ("--inference-pools", "auto")
TIMEOUT = 90.0


@pytest.fixture
def pool_crd(testbed: plane.Testbed, kube: KubeApi, require: Any) -> None:
    """The vendored v1.5.0 InferencePool CRD, served (discovery lists it: what the operator
    reads once at start) before the test starts an operator."""
    require(CRD.is_file(), f"the chart's vendored InferencePool CRD {CRD} is missing")
    testbed.apply_crds([yaml.safe_load(CRD.read_text())])
    kube.wait(
        lambda: "inferencepools" in {r["name"] for r in kube.get_json(f"/apis/{POOL_API}")["resources"]},
        timeout=30,
        what="inferencepools served (discovery)",
    )


def _pool(kube: KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(POOL_API, "InferencePool", name, namespace=namespace)


def _picker(kube: KubeApi, namespace: str, workload_name: str) -> dict[str, dict[str, Any] | None]:
    return {kind: kube.get(api, kind, f"{workload_name}-epp", namespace=namespace) for api, kind in PICKER}


def _controller(obj: dict[str, Any]) -> tuple[str, str, str]:
    (ref,) = [r for r in obj["metadata"].get("ownerReferences") or [] if r.get("controller")]
    return ref["kind"], ref["name"], ref["uid"]


def _pool_accepted(
    kube: KubeApi, namespace: str, name: str, status: str, reason: str, **kwargs: Any
) -> dict[str, Any]:
    return wait_condition(
        kube, namespace, name, "PoolAccepted", status, reason=reason, timeout=TIMEOUT, **kwargs
    )


def _set_spec(kube: KubeApi, namespace: str, name: str, **spec: Any) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name),
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _set_parents(kube: KubeApi, namespace: str, name: str, *parents: dict[str, Any]) -> None:
    """Write ``status.parents`` as a gateway's controller does (the status subresource)."""
    path = kube.resource_path(POOL_API, "InferencePool", namespace=namespace, name=name) + "/status"
    kube.request(
        "PATCH",
        path,
        json={"status": {"parents": list(parents)}},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _parent(namespace: str, accepted: str, reason: str, message: str = "") -> dict[str, Any]:
    def cond(type_: str, status: str, why: str) -> dict[str, Any]:
        return {
            "type": type_,
            "status": status,
            "reason": why,
            "message": message,
            "lastTransitionTime": "2026-01-01T00:00:00Z",
        }

    return {
        "parentRef": {
            "group": "gateway.networking.k8s.io",
            "kind": "Gateway",
            "name": "gw",
            "namespace": namespace,
        },
        "controllerName": "example.test/gateway-controller",
        "conditions": [cond("Accepted", accepted, reason), cond("ResolvedRefs", "True", "ResolvedRefs")],
    }


def test_a_workload_gets_its_pool_and_picker_and_follows_the_gateway(
    kube: KubeApi, namespace: str, operator_factory: Factory, pool_crd: None
) -> None:
    name = "chat-a"  # NB: neither its model's nor its served name: the pool is named after it
    operator_factory(namespace, *POOLED)
    kube.apply(workload(name, namespace, model={"name": "Qwen/Qwen3-0.6B", "servedName": "assistant"}))
    obj = _pool_accepted(kube, namespace, name, "Unknown", "NoParent")
    uid = obj["metadata"]["uid"]
    assert "HTTPRoute" in condition(obj, "PoolAccepted")["message"]  # type: ignore[index]

    # NB: serving first: the pass that made the JobSets reported the pool "being created"; the
    # next pass (those JobSets' events) applies it
    pool = kube.wait(
        lambda: _pool(kube, namespace, name), timeout=TIMEOUT, what="the workload's InferencePool"
    )
    assert _controller(pool) == ("InferenceWorkload", name, uid)
    assert pool["spec"]["selector"]["matchLabels"] == {
        "sparkrun.dev/workload": name,
        "sparkrun.dev/role": "leader",
    }
    assert pool["spec"]["targetPorts"] == [{"number": ENGINE_PORT}]
    ref = pool["spec"]["endpointPickerRef"]
    assert (ref.get("kind", "Service"), ref["name"], ref["port"]) == (
        "Service",
        f"{name}-epp",
        {"number": 9002},
    )
    assert pool["metadata"]["labels"]["sparkrun.dev/inference-pool"] == name

    def complete() -> dict[str, dict[str, Any] | None] | None:
        found = _picker(kube, namespace, name)
        return found if all(found.values()) else None

    picker = kube.wait(complete, timeout=TIMEOUT, what="the managed picker's four objects")
    for kind, found in picker.items():
        assert found is not None
        assert _controller(found) == ("InferenceWorkload", name, uid), kind
    assert obj["status"]["inferencePool"]["endpointPicker"]["mode"] == "Managed"
    assert obj["status"]["inferencePool"]["endpointPicker"]["service"] == f"{name}-epp"

    # a gateway accepts the pool (as its controller writes it)
    _set_parents(kube, namespace, name, _parent(namespace, "True", "Accepted"))
    obj = _pool_accepted(kube, namespace, name, "True", "Accepted")
    assert obj["status"]["inferencePool"]["parents"] == [
        {
            "parent": f"Gateway/{namespace}/gw",
            "accepted": "True",
            "resolvedRefs": "True",
            "reason": "Accepted",
        }
    ]
    # ... and then does not
    _set_parents(kube, namespace, name, _parent(namespace, "False", "NotSupportedByParent", "no ext-proc"))
    obj = _pool_accepted(kube, namespace, name, "False", "NotSupportedByParent")
    message = condition(obj, "PoolAccepted")["message"]  # type: ignore[index]
    assert f"Gateway/{namespace}/gw" in message
    assert "no ext-proc" in message
    assert condition(obj, "Ready")["status"] == "True"  # type: ignore[index]

    # the platform's own picker: the managed one goes, the pool names the platform's
    _set_spec(
        kube,
        namespace,
        name,
        inferencePool={"endpointPicker": {"mode": "External", "service": "platform-epp"}},
    )
    kube.wait(
        lambda: not any(_picker(kube, namespace, name).values()),
        timeout=TIMEOUT,
        what="the managed picker's objects gone",
    )
    pool = kube.wait(
        lambda: (
            (p := _pool(kube, namespace, name))
            and p["spec"]["endpointPickerRef"]["name"] == "platform-epp"
            and p
        ),
        timeout=TIMEOUT,
        what="the pool naming platform-epp",
    )
    assert pool["spec"]["endpointPickerRef"]["port"] == {"number": 9002}
    assert _controller(pool)[2] == uid

    # opted out: the pool goes too
    _set_spec(kube, namespace, name, inferencePool={"enabled": False})
    kube.wait(lambda: _pool(kube, namespace, name) is None, timeout=TIMEOUT, what="the pool gone")
    obj = _pool_accepted(kube, namespace, name, "False", "Disabled")
    assert condition(obj, "Ready")["status"] == "True"  # type: ignore[index]


def test_names_taken_and_a_refused_pool_never_fail_the_workload(
    kube: KubeApi, namespace: str, operator_factory: Factory, pool_crd: None
) -> None:
    # another product's pool of a workload's name, and someone's ServiceAccount of a picker's name
    foreign = {
        "apiVersion": POOL_API,
        "kind": "InferencePool",
        "metadata": {"name": "taken", "namespace": namespace},
        "spec": {
            "selector": {"matchLabels": {"app": "theirs"}},
            "targetPorts": [{"number": 9000}],
            "endpointPickerRef": {"name": "their-epp", "port": {"number": 9002}},
        },
    }
    before = kube.create(foreign)
    account = kube.create(
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "held-epp", "namespace": namespace},
        }
    )
    operator_factory(namespace, *POOLED)
    kube.apply(workload("taken", namespace))
    kube.apply(workload("held", namespace))
    kube.apply(workload("bare", namespace, inferencePool={"endpointPicker": {"mode": "None"}}))

    obj = _pool_accepted(kube, namespace, "taken", "False", "PoolNameTaken")
    assert "InferencePool named taken" in condition(obj, "PoolAccepted")["message"]  # type: ignore[index]
    obj = _pool_accepted(kube, namespace, "held", "False", "PoolNameTaken")
    assert "ServiceAccount named held-epp" in condition(obj, "PoolAccepted")["message"]  # type: ignore[index]
    obj = _pool_accepted(kube, namespace, "bare", "False", "Refused")
    assert "endpointPickerRef" in condition(obj, "PoolAccepted")["message"]  # type: ignore[index]

    for name in ("taken", "held", "bare"):
        obj = wait_condition(kube, namespace, name, "Ready", timeout=TIMEOUT)
        assert obj["status"]["phase"] == "Running", name
        assert jobsets(kube, namespace, name), name
        assert condition(obj, "PoolAccepted")["status"] == "False", name  # type: ignore[index]

    # left alone: the foreign pool as it was made, the account without owner or label
    after = _pool(kube, namespace, "taken")
    assert after is not None
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["spec"] == before["spec"]
    assert not any(_picker(kube, namespace, "taken").values())  # its picker would serve their pool
    held = kube.get("v1", "ServiceAccount", "held-epp", namespace=namespace)
    assert held is not None
    assert held["metadata"]["resourceVersion"] == account["metadata"]["resourceVersion"]
    assert "ownerReferences" not in held["metadata"]
    # no picker object runs as (or grants) someone else's account, and no pool of the held
    # workload names a picker Service it cannot vouch for (a gateway would send it every request)
    picker = _picker(kube, namespace, "held")
    assert [kind for kind, found in picker.items() if found is not None] == ["ServiceAccount"]
    assert _pool(kube, namespace, "held") is None
    assert _pool(kube, namespace, "bare") is None
    # they stay so: no pass took anything over meanwhile
    got = get_workload(kube, namespace, "bare")
    assert got is not None
    assert condition(got, "PoolAccepted")["reason"] == "Refused"  # type: ignore[index]


def test_with_engine_policies_the_picker_has_its_own_policy(
    kube: KubeApi, namespace: str, operator_factory: Factory, pool_crd: None, netpol_eval: Path
) -> None:
    """``--engine-network-policy`` (review F2): the Managed picker's fifth object, the
    NetworkPolicy ``<workload>-epp``, owned by the workload; as the apiserver stores it, it lets
    the platform gateway's namespace reach the real picker pod on 9002 and nobody else (no
    ``metricsFrom``: 9090 closed to all). It stays when the picker goes (never deleted: it goes
    with the workload)."""
    gateway_ns = {"kubernetes.io/metadata.name": "gateway-system"}
    flag = {
        "releaseNamespace": "sparkrun-system",
        "releaseLabels": {"app.kubernetes.io/instance": "sparkrun"},
        "gatewayFrom": [{"namespaceSelector": {"matchLabels": gateway_ns}}],
    }
    operator_factory(namespace, *POOLED, f"--engine-network-policy={json.dumps(flag)}")
    name = "chat-f2"
    kube.apply(workload(name, namespace, model={"name": "Qwen/Qwen3-0.6B", "servedName": f"f2-{namespace}"}))
    obj = _pool_accepted(kube, namespace, name, "Unknown", "NoParent")
    policy = kube.wait(
        lambda: kube.get(NETPOL_API, "NetworkPolicy", f"{name}-epp", namespace=namespace),
        timeout=TIMEOUT,
        what="the picker's NetworkPolicy",
    )
    assert _controller(policy) == ("InferenceWorkload", name, obj["metadata"]["uid"])
    assert policy["metadata"]["labels"]["app.kubernetes.io/component"] == "endpoint-picker"
    pod = kube.wait(
        lambda: next(
            iter(
                kube.list_items(
                    "v1",
                    "Pod",
                    namespace=namespace,
                    label_selector=f"sparkrun.dev/inference-pool={name},app.kubernetes.io/component=endpoint-picker",
                )
            ),
            None,
        ),
        timeout=TIMEOUT,
        what="the picker's pod",
    )
    w = World()
    target = w.pod("epp", namespace, pod["metadata"]["labels"])
    envoy = w.pod("envoy", "gateway-system", {"app": "envoy"})
    stranger = w.pod("curl", namespace, {"app": "curl"})
    elsewhere = w.pod("curl", "other-team", {"app": "curl"})
    stored = {k: policy[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    queries = [
        (envoy, target, 9002, "TCP"),
        (envoy, target, 9090, "TCP"),
        (stranger, target, 9002, "TCP"),
        (elsewhere, target, 9002, "TCP"),
        (stranger, target, 9090, "TCP"),
    ]
    assert w.allowed(netpol_eval, [stored], queries) == [True, False, False, False, False]
    # the platform's own picker: the managed one goes; its policy stays (the operator holds no
    # delete on NetworkPolicies), selecting no pod, until the workload goes
    _set_spec(
        kube,
        namespace,
        name,
        inferencePool={"endpointPicker": {"mode": "External", "service": "platform-epp"}},
    )
    kube.wait(
        lambda: kube.get("apps/v1", "Deployment", f"{name}-epp", namespace=namespace) is None,
        timeout=TIMEOUT,
        what="the managed picker's Deployment gone",
    )
    kept = kube.get(NETPOL_API, "NetworkPolicy", f"{name}-epp", namespace=namespace)
    assert kept is not None
    assert kept["metadata"]["uid"] == policy["metadata"]["uid"]
    assert kube.get(NETPOL_API, "NetworkPolicy", f"{name}-engine", namespace=namespace) is not None
