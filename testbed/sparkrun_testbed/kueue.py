"""Kueue (``sigs.k8s.io/kueue`` v0.17.0) on the testbed: its binary, CRDs and configuration.

``hack/kueue-bin.sh`` builds the controller manager (``cmd/kueue``) from the pinned wrapper module
``hack/kueue/`` into ``<cache>/kueue-<key>/bin/kueue`` and copies beside it, into
``<cache>/kueue-<key>/share/``, the module's CRDs (``crd/``), webhook configurations
(``webhook/manifests.yaml``) and visibility APIServices (``visibility/``). The binary comes from
env ``SPARKRUN_KUEUE_BIN`` (a path to the executable) when set, else from
``hack/kueue-bin.sh --print``. Kueue is optional: a testbed starts without it and
:mod:`.kueue_run` starts it on a running testbed for the tests that ask.

This module is pure (it builds dicts): the controller's Configuration, the webhook
configurations and CRD conversion webhooks rewritten to loopback URLs with the testbed CA (as
:mod:`.jobset` does), and the Service, EndpointSlice and APIServices that route Kueue's
visibility API (an aggregated API) through kube-apiserver.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .binaries import BinariesMissing, GoTool
from .kubeapi import load_manifests

BIN_ENV = "SPARKRUN_KUEUE_BIN"
NAME = "kueue"
VERSION = "v0.17.0"
NAMESPACE = "kueue-system"
VISIBILITY_SERVICE = "kueue-visibility-server"
VISIBILITY_GROUP = "visibility.kueue.x-k8s.io"
VISIBILITY_VERSIONS = ("v1beta2", "v1beta1")
#: The integrations the testbed enables: the product runs JobSets; plain Jobs for tests.
FRAMEWORKS = ("batch/job", "jobset.x-k8s.io/jobset")
#: Paths inside the controller's root directory (the binary hard-codes two of them).
ROOT_BINARY = "/kueue"
ROOT_CONFIG = "/config.yaml"
ROOT_KUBECONFIG = "/kubeconfig"
ROOT_WEBHOOK_CERTS = "/webhook-certs"
ROOT_VISIBILITY_CERTS = "/visibility"  # pkg/visibility: certDir, fixed
ROOT_METRICS_CERTS = "/etc/kueue/metrics/certs"  # cmd/kueue: read at start even with metrics off
# The CRDs upstream serves through its conversion webhook (config/components/crd/kustomization.yaml).
_CONVERTED = frozenset(
    f"{plural}.kueue.x-k8s.io"
    for plural in ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")
)
# Webhooks kept: Kueue's own kinds and the enabled integrations (the others would answer 404, and
# failurePolicy Fail would then refuse every Deployment, Pod, ... on the testbed).
_FRAMEWORK_RESOURCES = {
    "batch/job": ("batch", "jobs"),
    "jobset.x-k8s.io/jobset": ("jobset.x-k8s.io", "jobsets"),
}
_NAME_PREFIX = "kueue-"  # upstream's kustomize namePrefix
_SCRIPT = Path("hack") / "kueue-bin.sh"
_TOOL = GoTool(NAME, BIN_ENV, _SCRIPT)


def locate(repo: Path | None = None) -> Path:
    """The configured binary's path (it may not be built yet: check ``os.access(path, X_OK)``)."""
    return _TOOL.locate(repo)


def build(repo: Path | None = None) -> Path:
    """Run ``hack/kueue-bin.sh`` (a cold build takes many minutes); its log goes to stderr."""
    return _TOOL.build(repo)


def share_dir(binary: Path) -> Path:
    """``<cache>/kueue-<key>/share`` for the binary at ``<cache>/kueue-<key>/bin/kueue``."""
    return binary.parent.parent / "share"


def upstream_crds(binary: Path) -> list[dict[str, Any]]:
    files = sorted((share_dir(binary) / "crd").glob("*.yaml"))
    if not files:
        raise BinariesMissing(f"{share_dir(binary) / 'crd'} has no CRDs: run {_SCRIPT}")
    return [doc for f in files for doc in load_manifests(f) if doc.get("kind") == "CustomResourceDefinition"]


def upstream_webhooks(binary: Path) -> list[dict[str, Any]]:
    path = share_dir(binary) / "webhook" / "manifests.yaml"
    if not path.is_file():
        raise BinariesMissing(f"{path} is missing: run {_SCRIPT}")
    return load_manifests(path)


def controller_config(
    *,
    webhook_port: int,
    health_port: int,
    visibility_address: str,
    visibility_port: int,
    frameworks: Sequence[str] = FRAMEWORKS,
) -> dict[str, Any]:
    """The ``config.kueue.x-k8s.io/v1beta2`` Configuration of a controller outside the cluster.

    Leader election and internal cert management (a Secret, a Service, CA injection) are off;
    the webhook server listens on 127.0.0.1 with a testbed certificate; metrics are off
    (``bindAddress: "0"``); the visibility server listens on ``visibility_address`` (kube-apiserver
    refuses loopback endpoints). Only jobs that carry ``kueue.x-k8s.io/queue-name`` are managed.
    """
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "manageJobsWithoutQueueName": False,
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": ROOT_WEBHOOK_CERTS},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "visibilityServer": {"bindAddress": visibility_address, "bindPort": visibility_port},
        "integrations": {"frameworks": list(frameworks)},
        "featureGates": {"VisibilityOnDemand": True},
    }


def crds(upstream: Iterable[Mapping[str, Any]], *, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """Upstream's CRDs; those upstream converts by webhook get ``base_url + /convert``."""
    result = []
    for doc in upstream:
        crd = copy.deepcopy(dict(doc))
        if crd["metadata"]["name"] in _CONVERTED:
            crd["spec"]["conversion"] = {
                "strategy": "Webhook",
                "webhook": {
                    "clientConfig": {"url": base_url + "/convert", "caBundle": _b64(ca_pem)},
                    "conversionReviewVersions": ["v1"],
                },
            }
        result.append(crd)
    return result


def webhook_configurations(
    upstream: Iterable[Mapping[str, Any]],
    *,
    base_url: str,
    ca_pem: bytes,
    frameworks: Sequence[str] = FRAMEWORKS,
) -> list[dict[str, Any]]:
    """Upstream's webhook configurations, each ``clientConfig.service`` turned into a URL, keeping
    only the webhooks of Kueue's own kinds and of the enabled ``frameworks``."""
    kept: set[tuple[str, str | None]] = {("kueue.x-k8s.io", None)}
    kept |= {_FRAMEWORK_RESOURCES[f] for f in frameworks}
    result = []
    for doc in upstream:
        config = copy.deepcopy(dict(doc))
        config["metadata"] = {"name": _NAME_PREFIX + config["metadata"]["name"]}
        hooks = []
        for hook in config.get("webhooks", []):
            if not any(_matches(rule, kept) for rule in hook.get("rules", [])):
                continue
            service = hook["clientConfig"].get("service")
            if service is None:
                raise ValueError(f"webhook {hook['name']} has no clientConfig.service to rewrite")
            hook["clientConfig"] = {"url": base_url + service["path"], "caBundle": _b64(ca_pem)}
            hooks.append(hook)
        config["webhooks"] = hooks
        result.append(config)
    return result


def visibility_objects(*, address: str, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """The Service (no selector), its EndpointSlice at ``address:port`` and an APIService per
    version of ``visibility.kueue.x-k8s.io``, verified against the testbed CA (upstream skips
    TLS verification; the testbed issues the visibility server a certificate instead)."""
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": VISIBILITY_SERVICE, "namespace": NAMESPACE},
            "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{VISIBILITY_SERVICE}-1",
                "namespace": NAMESPACE,
                "labels": {"kubernetes.io/service-name": VISIBILITY_SERVICE},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
            "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
        },
    ]
    for priority, version in enumerate(VISIBILITY_VERSIONS):
        objects.append(
            {
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": f"{version}.{VISIBILITY_GROUP}"},
                "spec": {
                    "group": VISIBILITY_GROUP,
                    "version": version,
                    "groupPriorityMinimum": 100,
                    "versionPriority": 100 - priority,
                    "service": {"name": VISIBILITY_SERVICE, "namespace": NAMESPACE, "port": 443},
                    "caBundle": _b64(ca_pem),
                },
            }
        )
    return objects


def visibility_hosts(address: str) -> tuple[str, ...]:
    """Names the visibility server's certificate carries (the aggregator verifies the first)."""
    return (f"{VISIBILITY_SERVICE}.{NAMESPACE}.svc", address, "127.0.0.1")


def _matches(rule: Mapping[str, Any], kept: set[tuple[str, str | None]]) -> bool:
    for group in rule.get("apiGroups", []):
        for resource in rule.get("resources", []):
            if (group, None) in kept or (group, resource.split("/")[0]) in kept:
                return True
    return False


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
