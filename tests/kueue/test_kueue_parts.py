"""The pure parts of Kueue on the testbed (``sparkrun_testbed.kueue``), without a testbed."""

from __future__ import annotations

import base64
from typing import Any

from sparkrun_testbed import kueue

CA = b"-----BEGIN CERTIFICATE-----\nfake\n-----END CERTIFICATE-----\n"
BASE = "https://127.0.0.1:9443"


def _hook(name: str, group: str, resource: str, path: str) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": {"service": {"name": "webhook-service", "namespace": "system", "path": path}},
        "rules": [{"apiGroups": [group], "resources": [resource], "operations": ["CREATE"]}],
    }


def test_webhooks_become_loopback_urls_and_only_served_ones_are_kept() -> None:
    upstream: list[dict[str, Any]] = [
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": "mutating-webhook-configuration"},
            "webhooks": [
                _hook("mjob.kb.io", "batch", "jobs", "/mutate-batch-v1-job"),
                _hook("mjobset.kb.io", "jobset.x-k8s.io", "jobsets", "/mutate-jobset"),
                _hook("mpod.kb.io", "", "pods", "/mutate--v1-pod"),
                _hook("mdeployment.kb.io", "apps", "deployments", "/mutate-apps-v1-deployment"),
                _hook("mworkload.kb.io", "kueue.x-k8s.io", "workloads/status", "/mutate-workload"),
            ],
        }
    ]
    (config,) = kueue.webhook_configurations(upstream, base_url=BASE, ca_pem=CA)
    assert config["metadata"] == {"name": "kueue-mutating-webhook-configuration"}
    assert [h["name"] for h in config["webhooks"]] == ["mjob.kb.io", "mjobset.kb.io", "mworkload.kb.io"]
    assert config["webhooks"][0]["clientConfig"] == {
        "url": BASE + "/mutate-batch-v1-job",
        "caBundle": base64.b64encode(CA).decode(),
    }
    # The upstream documents are left as they were.
    assert upstream[0]["metadata"]["name"] == "mutating-webhook-configuration"
    only_jobs = kueue.webhook_configurations(upstream, base_url=BASE, ca_pem=CA, frameworks=["batch/job"])
    assert [h["name"] for h in only_jobs[0]["webhooks"]] == ["mjob.kb.io", "mworkload.kb.io"]


def test_crds_upstream_converts_get_the_loopback_conversion_webhook() -> None:
    def crd(name: str) -> dict[str, Any]:
        return {"kind": "CustomResourceDefinition", "metadata": {"name": name}, "spec": {}}

    queues, flavors = kueue.crds(
        [crd("clusterqueues.kueue.x-k8s.io"), crd("resourceflavors.kueue.x-k8s.io")], base_url=BASE, ca_pem=CA
    )
    assert queues["spec"]["conversion"]["strategy"] == "Webhook"
    assert queues["spec"]["conversion"]["webhook"]["clientConfig"]["url"] == BASE + "/convert"
    assert "conversion" not in flavors["spec"]


def test_configuration_keeps_everything_on_loopback_but_the_visibility_server() -> None:
    config = kueue.controller_config(
        webhook_port=1, health_port=2, visibility_address="198.18.1.2", visibility_port=3
    )
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2"
    assert config["manageJobsWithoutQueueName"] is False
    assert config["leaderElection"] == {"leaderElect": False}
    assert config["internalCertManagement"] == {"enable": False}
    assert config["webhook"]["host"] == "127.0.0.1"
    assert config["health"]["healthProbeBindAddress"] == "127.0.0.1:2"
    assert config["metrics"]["bindAddress"] == "0"
    assert config["visibilityServer"] == {"bindAddress": "198.18.1.2", "bindPort": 3}
    assert "jobset.x-k8s.io/jobset" in config["integrations"]["frameworks"]


def test_visibility_is_routed_to_the_endpoint_and_verified_against_the_testbed_ca() -> None:
    objects = kueue.visibility_objects(address="198.18.1.2", port=8082, ca_pem=CA)
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for obj in objects:
        by_kind.setdefault(obj["kind"], []).append(obj)
    (slice_,) = by_kind["EndpointSlice"]
    assert slice_["endpoints"][0]["addresses"] == ["198.18.1.2"]
    assert slice_["metadata"]["labels"]["kubernetes.io/service-name"] == kueue.VISIBILITY_SERVICE
    services = by_kind["APIService"]
    assert {s["spec"]["version"] for s in services} == {"v1beta1", "v1beta2"}
    for service in services:
        assert "insecureSkipTLSVerify" not in service["spec"]
        assert service["spec"]["caBundle"] == base64.b64encode(CA).decode()
    assert kueue.visibility_hosts("198.18.1.2")[0] == "kueue-visibility-server.kueue-system.svc"
