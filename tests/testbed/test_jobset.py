"""The JobSet controller and its webhooks run against the testbed: a JobSet becomes Jobs and pods."""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.topology import GPU_RESOURCE

pytestmark = pytest.mark.testbed

JOBSET = "jobset.x-k8s.io/v1alpha2"


def replicated_job(name: str, *, replicas: int, parallelism: int) -> dict[str, Any]:
    return {
        "name": name,
        "replicas": replicas,
        "template": {
            "spec": {
                "parallelism": parallelism,
                "completions": parallelism,
                "backoffLimit": 0,
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "registry.invalid/none:0",
                                "resources": {"limits": {GPU_RESOURCE: "1"}},
                            }
                        ],
                    }
                },
            }
        },
    }


def jobset(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": JOBSET,
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "replicatedJobs": [
                replicated_job("leader", replicas=1, parallelism=1),
                replicated_job("workers", replicas=1, parallelism=2),
            ],
            **spec,
        },
    }


def test_a_jobset_creates_its_jobs_and_running_pods(kube: KubeApi, namespace: str) -> None:
    kube.create(jobset("serve"), namespace=namespace)
    stored = kube.get(JOBSET, "JobSet", "serve", namespace=namespace)
    assert stored is not None
    # The mutating webhook ran: upstream defaults Indexed completion and a success policy.
    assert stored["spec"]["replicatedJobs"][0]["template"]["spec"]["completionMode"] == "Indexed"
    assert stored["spec"]["successPolicy"]["operator"] == "All"

    jobs = kube.wait(
        lambda: len(found := kube.list_items("batch/v1", "Job", namespace=namespace)) == 2 and found,
        timeout=60,
        what="the JobSet controller to create 2 Jobs",
    )
    assert sorted(j["metadata"]["name"] for j in jobs) == ["serve-leader-0", "serve-workers-0"]
    for job in jobs:
        assert job["metadata"]["ownerReferences"][0]["kind"] == "JobSet"

    def running_pods() -> list[dict[str, Any]]:
        pods = kube.list_items(
            "v1", "Pod", namespace=namespace, label_selector="jobset.sigs.k8s.io/jobset-name=serve"
        )
        return [p for p in pods if p["status"].get("phase") == "Running"]

    pods = kube.wait(lambda: len(p := running_pods()) == 3 and p, timeout=60, what="3 running JobSet pods")
    for pod in pods:
        # The pod webhook ran too (it is selected by the jobset-name label).
        assert pod["metadata"]["annotations"]["jobset.sigs.k8s.io/jobset-name"] == "serve"
        assert pod["spec"]["subdomain"] == "serve", "JobSet's DNS hostnames default"
        assert pod["spec"].get("nodeName")


def test_the_validating_webhook_rejects_a_bad_jobset(kube: KubeApi, namespace: str) -> None:
    bad = jobset("bad", successPolicy={"operator": "All", "targetReplicatedJobs": ["nope"]})
    with pytest.raises(ApiError) as info:
        kube.create(bad, namespace=namespace)
    assert 'admission webhook "vjobset.kb.io" denied the request' in info.value.message
    assert "invalid replicatedJob name 'nope'" in info.value.message
