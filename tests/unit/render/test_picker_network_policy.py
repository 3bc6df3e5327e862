"""The engine NetworkPolicy lets in exactly the workload's own Managed endpoint picker (issue 30,
review R2): the pods the operator renders for ``W``'s picker match the policy's picker peer of
``W``, and neither another workload's picker pods nor an engine pod of ``W`` match it as a picker
(the policy and the picker take their labels from one definition).

And the picker's own NetworkPolicy (review F2; with engine policies only): it selects exactly
its picker's pods and lets in ``gatewayFrom`` on 9002 and ``metricsFrom`` on 9090, nobody else
(the verdicts: ``tests/tenancy/test_network_policy.py``)."""

from __future__ import annotations

import dataclasses
from typing import Any

from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PickerSettings, render_picker
from sparkrun_operator.render.networkpolicy import EnginePolicy, render_engine_policy
from sparkrun_operator.render.workload import workload_labels

NS = "team-a"
POLICY = EnginePolicy(release_namespace="sparkrun-system", release_labels={"app": "sparkrun"})


def _pod_labels(workload: str) -> dict[str, str]:
    (deployment,) = [
        d
        for d in render_picker(namespace=NS, workload=workload, spec=None, settings=PickerSettings())
        if d["kind"] == "Deployment"
    ]
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    return labels


def _picker_peers(workload: str) -> list[dict[str, Any]]:
    policy = render_engine_policy(namespace=NS, workload=workload, policy=POLICY)
    return [
        peer
        for rule in policy["spec"]["ingress"]
        for peer in rule.get("from", ())
        if set(peer) == {"podSelector"} and keys.LABEL_COMPONENT in peer["podSelector"].get("matchLabels", {})
    ]


def _selects(peer: dict[str, Any], labels: dict[str, str]) -> bool:
    """A same-namespace ``podSelector`` peer (matchLabels only) selects a pod with ``labels``."""
    selector = peer["podSelector"]
    assert set(selector) == {"matchLabels"}
    wanted: dict[str, str] = selector["matchLabels"]
    return wanted.items() <= labels.items()


def test_the_policy_lets_in_its_own_picker_and_no_other() -> None:
    (peer,) = _picker_peers("chat")
    assert _selects(peer, _pod_labels("chat"))
    assert not _selects(peer, _pod_labels("chat-2"))
    assert not _selects(peer, _pod_labels("cha"))
    assert not _selects(peer, workload_labels("chat"))


# -- the picker's own NetworkPolicy (review F2) -------------------------------------------------

GATEWAY = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "gateway-system"}}}
MONITORING = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}


def _picker_policy(policy: EnginePolicy | None, workload: str = "chat") -> dict[str, Any] | None:
    docs = render_picker(namespace=NS, workload=workload, spec=None, settings=PickerSettings(), policy=policy)
    found = [d for d in docs if d["kind"] == "NetworkPolicy"]
    assert len(found) <= 1
    return found[0] if found else None


def test_without_engine_policies_the_picker_has_no_policy() -> None:
    assert _picker_policy(None) is None
    kinds = [
        d["kind"] for d in render_picker(namespace=NS, workload="chat", spec=None, settings=PickerSettings())
    ]
    assert kinds == ["ServiceAccount", "RoleBinding", "Deployment", "Service"]


def test_the_picker_policy_selects_exactly_its_own_picker_pods() -> None:
    doc = _picker_policy(POLICY)
    assert doc is not None
    assert doc["metadata"]["name"] == "chat-epp"
    assert doc["metadata"]["namespace"] == NS
    assert doc["metadata"]["labels"] == {
        keys.LABEL_MANAGED_BY: keys.MANAGED_BY,
        keys.LABEL_INFERENCE_POOL: "chat",
        keys.LABEL_COMPONENT: keys.COMPONENT_ENDPOINT_PICKER,
    }
    assert keys.ANNOTATION_POOL_HASH in doc["metadata"]["annotations"]
    selector = {"podSelector": doc["spec"]["podSelector"]}
    assert _selects(selector, _pod_labels("chat"))
    assert not _selects(selector, _pod_labels("chat-2"))
    assert not _selects(selector, workload_labels("chat"))
    assert doc["spec"]["policyTypes"] == ["Ingress"]


def test_no_peers_close_every_port() -> None:
    """Neither ``gatewayFrom`` nor ``metricsFrom``: a policy with no ``ingress`` field at all
    (deny all; an explicit empty list is read as allow-all by kube-network-policies)."""
    doc = _picker_policy(POLICY)
    assert doc is not None
    assert "ingress" not in doc["spec"]
    assert doc["spec"]["policyTypes"] == ["Ingress"]


def test_the_gateway_peers_get_the_ext_proc_port_and_the_metrics_peers_the_metrics_port() -> None:
    policy = EnginePolicy(
        release_namespace="sparkrun-system",
        release_labels={"app": "sparkrun"},
        gateway_from=(GATEWAY,),
        metrics_from=(MONITORING,),
    )
    doc = _picker_policy(policy)
    assert doc is not None
    assert doc["spec"]["ingress"] == [
        {"from": [GATEWAY], "ports": [{"port": 9002, "protocol": "TCP"}]},
        {"from": [MONITORING], "ports": [{"port": 9090, "protocol": "TCP"}]},
    ]
    only_metrics = _picker_policy(dataclasses.replace(POLICY, metrics_from=(MONITORING,)))
    assert only_metrics is not None
    assert only_metrics["spec"]["ingress"] == [
        {"from": [MONITORING], "ports": [{"port": 9090, "protocol": "TCP"}]}
    ]
    # the peers are copies: the settings stay as they were
    doc["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"].clear()
    assert GATEWAY["namespaceSelector"]["matchLabels"]


def test_the_picker_policy_hash_follows_the_peers() -> None:
    base = _picker_policy(POLICY)
    gateway = _picker_policy(dataclasses.replace(POLICY, gateway_from=(GATEWAY,)))
    assert base is not None
    assert gateway is not None
    hashes = {d["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH] for d in (base, gateway)}
    assert len(hashes) == 2
    # the engines' policy does not follow metricsFrom (it is about the picker only)
    engines = {
        render_engine_policy(namespace=NS, workload="chat", policy=p)["metadata"]["annotations"][
            keys.ANNOTATION_POLICY_HASH
        ]
        for p in (POLICY, dataclasses.replace(POLICY, metrics_from=(MONITORING,)))
    }
    assert len(engines) == 1
