"""The NetworkPolicy of one InferenceWorkload's engine pods (pure; ``docs/security.md``,
"Network policies").

One namespace-wide policy cannot say "the other ranks of the *same* workload", so the operator
renders one policy per workload, ``<workload>-engine``, owned by it (it goes with the workload).
It selects the workload's pods (label ``sparkrun.dev/workload``) and lets in exactly:

- the gateway, the operator and the shim of the release (namespace and pod labels from
  ``--engine-network-policy``), on the engine port;
- benchmark runner pods of the workload's namespace (direct InferenceBenchmarks and rollout
  gates; label ``sparkrun.dev/benchmark``), on the engine port;
- the workload's own pods, on every port (vLLM's ranks rendezvous on 29501, then NCCL and
  Gloo pick ports);
- the workload's own endpoint picker (issue 30: the operator-managed picker pods of its
  InferencePool, labels ``sparkrun.dev/inference-pool=<workload>`` and
  ``app.kubernetes.io/component=endpoint-picker``), on the engine port: it scrapes ``/metrics``;
- the platform's gateway (``gatewayFrom``: NetworkPolicy peers, e.g. the namespace of an
  Inference-Extension-conformant gateway's proxies), on the engine port: it forwards to the pod
  the picker chose;
- the ingress rules an administrator lists (Prometheus, an endpoint picker, the platform's
  Gateway API implementation), as written.

Everyone else is refused (a selected pod accepts only what some policy allows). The managed
endpoint picker's own policy (``<workload>-epp``: ``gatewayFrom`` on its ext-proc port,
``metricsFrom`` on its metrics port) is rendered with its other objects
(``render/inferencepool.py``) from the same settings. With
``egress`` set, the pods may connect only to the cluster DNS, their own workload's pods, and
the given CIDRs on the given ports (model downloads).

The policy carries a hash of what it was rendered from (:data:`ANNOTATION_POLICY_HASH`): the
planner re-applies it only when that differs, however the apiserver defaults the spec.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sparkrun_operator.api.workload import ENGINE_PORT
from sparkrun_operator.render import keys

ANNOTATION_POLICY_HASH: Final = keys.ANNOTATION_POLICY_HASH
#: The label every namespace carries with its own name (set by the apiserver).
NAMESPACE_NAME_LABEL: Final = "kubernetes.io/metadata.name"
COMPONENT_LABEL: Final = "app.kubernetes.io/component"
#: The release's components that reach engines.
DEFAULT_COMPONENTS: Final = ("gateway", "operator", "shim")
#: Bounds of ``--engine-network-policy`` (an administrator's flag; still bounded).
MAX_RULES: Final = 32
MAX_ITEMS: Final = 64
_SUFFIX: Final = "-engine"
_DNS_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


@dataclass(frozen=True, kw_only=True)
class EngineEgress:
    """Where engine pods may connect to when egress is restricted."""

    dns_namespace: str = "kube-system"
    dns_labels: Mapping[str, str] = field(default_factory=lambda: {"k8s-app": "kube-dns"})
    cidrs: tuple[str, ...] = ("0.0.0.0/0",)
    ports: tuple[int, ...] = (443,)


@dataclass(frozen=True, kw_only=True)
class EnginePolicy:
    """Who may reach engine pods besides their own workload (``--engine-network-policy``)."""

    #: The release's namespace (the gateway's, the operator's and the shim's pods run there).
    release_namespace: str
    #: Labels every pod of the release's components carries (name and instance).
    release_labels: Mapping[str, str]
    components: tuple[str, ...] = DEFAULT_COMPONENTS
    #: NetworkPolicy ingress rules appended as written (an administrator's peers).
    extra_ingress: tuple[Mapping[str, Any], ...] = ()
    #: NetworkPolicy peers of the platform's gateway (its proxies forward to engine pods an
    #: endpoint picker chose): let in on the engine port only (``gatewayFrom``), and on a managed
    #: endpoint picker's ext-proc port (its own NetworkPolicy, ``render/inferencepool.py``).
    gateway_from: tuple[Mapping[str, Any], ...] = ()
    #: NetworkPolicy peers that may scrape a managed endpoint picker's metrics port
    #: (``metricsFrom``, the chart's ``networkPolicy.metricsFrom``); empty: nobody.
    metrics_from: tuple[Mapping[str, Any], ...] = ()
    egress: EngineEgress | None = None


def policy_name(workload: str) -> str:
    """``<workload>-engine`` (workload names are at most 35 characters)."""
    return f"{workload}{_SUFFIX}"


def _labels(workload: str) -> dict[str, str]:
    return {keys.LABEL_MANAGED_BY: keys.MANAGED_BY, keys.LABEL_WORKLOAD: workload}


def _ingress(workload: str, policy: EnginePolicy) -> list[dict[str, Any]]:
    components = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: policy.release_namespace}},
        "podSelector": {
            "matchLabels": dict(sorted(policy.release_labels.items())),
            "matchExpressions": [
                {"key": COMPONENT_LABEL, "operator": "In", "values": sorted(policy.components)}
            ],
        },
    }
    runners = {
        "podSelector": {
            "matchLabels": {keys.LABEL_MANAGED_BY: keys.MANAGED_BY},
            "matchExpressions": [{"key": keys.LABEL_BENCHMARK, "operator": "Exists"}],
        }
    }
    ranks = {"podSelector": {"matchLabels": {keys.LABEL_WORKLOAD: workload}}}
    # NB: the workload's own picker only: another workload's picker (same namespace) is refused
    picker = {"podSelector": {"matchLabels": picker_labels(workload)}}
    engine_port = [{"port": ENGINE_PORT, "protocol": "TCP"}]
    rules: list[dict[str, Any]] = [
        {"from": [components, runners, picker], "ports": engine_port},
        {"from": [ranks]},
    ]
    if policy.gateway_from:
        rules.append(
            {"from": [json.loads(json.dumps(peer)) for peer in policy.gateway_from], "ports": engine_port}
        )
    rules.extend(json.loads(json.dumps(rule)) for rule in policy.extra_ingress)
    return rules


def picker_labels(workload: str) -> dict[str, str]:
    """The labels that select a workload's operator-managed endpoint picker pods."""
    return {keys.LABEL_INFERENCE_POOL: workload, keys.LABEL_COMPONENT: keys.COMPONENT_ENDPOINT_PICKER}


def _egress(workload: str, egress: EngineEgress) -> list[dict[str, Any]]:
    dns = {
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: egress.dns_namespace}},
        "podSelector": {"matchLabels": dict(sorted(egress.dns_labels.items()))},
    }
    rules: list[dict[str, Any]] = [
        {"to": [dns], "ports": [{"port": 53, "protocol": "UDP"}, {"port": 53, "protocol": "TCP"}]},
        {"to": [{"podSelector": {"matchLabels": {keys.LABEL_WORKLOAD: workload}}}]},
    ]
    if egress.cidrs and egress.ports:
        rules.append(
            {
                "to": [{"ipBlock": {"cidr": cidr}} for cidr in egress.cidrs],
                "ports": [{"port": port, "protocol": "TCP"} for port in egress.ports],
            }
        )
    return rules


def render_engine_policy(
    *, namespace: str, workload: str, policy: EnginePolicy, owner: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The NetworkPolicy ``<workload>-engine`` (``owner``: an ``ownerReferences`` entry)."""
    spec: dict[str, Any] = {
        "podSelector": {"matchLabels": {keys.LABEL_WORKLOAD: workload}},
        "policyTypes": ["Ingress"] if policy.egress is None else ["Ingress", "Egress"],
        "ingress": _ingress(workload, policy),
    }
    if policy.egress is not None:
        spec["egress"] = _egress(workload, policy.egress)
    metadata: dict[str, Any] = {
        "name": policy_name(workload),
        "namespace": namespace,
        "labels": _labels(workload),
        "annotations": {ANNOTATION_POLICY_HASH: spec_hash(spec)},
    }
    if owner is not None:
        metadata["ownerReferences"] = [dict(owner)]
    return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": metadata, "spec": spec}


def spec_hash(spec: Mapping[str, Any]) -> str:
    """12 hex digits of the canonical JSON of ``spec``."""
    raw = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:12]


# -- the operator flag -----------------------------------------------------------------------


def parse(doc: Any) -> EnginePolicy:
    """``--engine-network-policy`` (JSON, decoded): ``releaseNamespace``, ``releaseLabels``,
    optional ``components``, ``extraIngress`` (NetworkPolicy ingress rules), ``gatewayFrom``
    (NetworkPolicy peers of the platform's gateway, let in on the engine port and a managed
    picker's ext-proc port), ``metricsFrom`` (NetworkPolicy peers let in on a managed picker's
    metrics port) and ``egress`` (``{"dns": {"namespace", "podLabels"}, "cidrs", "ports"}``).
    ``ValueError`` when malformed."""
    if not isinstance(doc, dict):
        raise ValueError("an object")
    known = {
        "releaseNamespace",
        "releaseLabels",
        "components",
        "extraIngress",
        "gatewayFrom",
        "metricsFrom",
        "egress",
    }
    unknown = set(doc) - known
    if unknown:
        raise ValueError(f"unknown keys: {sorted(unknown)}")
    namespace = doc.get("releaseNamespace")
    if not isinstance(namespace, str) or not _DNS_NAME.fullmatch(namespace):
        raise ValueError("releaseNamespace: a namespace name")
    labels = _string_map(doc.get("releaseLabels"), "releaseLabels")
    if not labels:
        raise ValueError("releaseLabels: the release's pod labels (name and instance)")
    components = _strings(doc.get("components", list(DEFAULT_COMPONENTS)), "components")
    extra = doc.get("extraIngress", [])
    if not isinstance(extra, list) or len(extra) > MAX_RULES:
        raise ValueError(f"extraIngress: a list of at most {MAX_RULES} ingress rules")
    for rule in extra:
        if not isinstance(rule, dict) or set(rule) - {"from", "ports"}:
            raise ValueError('extraIngress: each rule an object with "from" and/or "ports"')
    raw_egress = doc.get("egress")
    return EnginePolicy(
        release_namespace=namespace,
        release_labels=labels,
        components=tuple(components),
        extra_ingress=tuple(extra),
        gateway_from=_peers(doc.get("gatewayFrom", []), "gatewayFrom"),
        metrics_from=_peers(doc.get("metricsFrom", []), "metricsFrom"),
        egress=None if raw_egress is None else _parse_egress(raw_egress),
    )


def _peers(value: Any, what: str) -> tuple[Mapping[str, Any], ...]:
    """A list of at most :data:`MAX_RULES` NetworkPolicy peers (``from`` entries)."""
    if not isinstance(value, list) or len(value) > MAX_RULES:
        raise ValueError(f"{what}: a list of at most {MAX_RULES} NetworkPolicy peers")
    for peer in value:
        if (
            not isinstance(peer, dict)
            or not peer
            or set(peer) - {"namespaceSelector", "podSelector", "ipBlock"}
        ):
            raise ValueError(
                f'{what}: each peer an object with "namespaceSelector", "podSelector" or "ipBlock"'
            )
    return tuple(value)


def _parse_egress(doc: Any) -> EngineEgress:
    if not isinstance(doc, dict) or set(doc) - {"dns", "cidrs", "ports"}:
        raise ValueError('egress: an object with "dns", "cidrs" and "ports"')
    dns = doc.get("dns") or {}
    if not isinstance(dns, dict) or set(dns) - {"namespace", "podLabels"}:
        raise ValueError('egress.dns: an object with "namespace" and "podLabels"')
    ports = doc.get("ports", [443])
    if (
        not isinstance(ports, list)
        or len(ports) > MAX_ITEMS
        or not all(isinstance(p, int) and not isinstance(p, bool) and 0 < p < 65536 for p in ports)
    ):
        raise ValueError("egress.ports: a list of TCP port numbers")
    default = EngineEgress()
    return EngineEgress(
        dns_namespace=str(dns.get("namespace", default.dns_namespace)),
        dns_labels=_string_map(dns.get("podLabels", dict(default.dns_labels)), "egress.dns.podLabels"),
        cidrs=tuple(_strings(doc.get("cidrs", list(default.cidrs)), "egress.cidrs")),
        ports=tuple(ports),
    )


def _string_map(value: Any, what: str) -> dict[str, str]:
    if (
        not isinstance(value, dict)
        or len(value) > MAX_ITEMS
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())
    ):
        raise ValueError(f"{what}: an object of strings")
    return dict(value)


def _strings(value: Any, what: str) -> list[str]:
    if not isinstance(value, list) or len(value) > MAX_ITEMS or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{what}: a list of strings")
    return list(value)
