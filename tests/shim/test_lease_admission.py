"""The daemon API shim writes only ownership Leases (ADR 0049; the chart's shim/lease-admission).

The shim's Role lets it create and update Leases of its namespace (the ownership Leases of the
daemon API's ephemeral workloads), and the operator's executor liveness Leases live there too.
On the testbed, with the shim running as its ServiceAccount with exactly the chart's RBAC and the
chart's Lease admission policy (rendered for this module's release, bound to its namespace only):

- the shim's own identity can neither rewrite an executor's Lease, nor create a Lease outside
  the ownership Leases' name and label, nor turn an executor's Lease into an ownership Lease;
- the daemon API's claim, renew and release of an ownership lease pass the policy.
"""

from __future__ import annotations

import copy
import secrets
import subprocess
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import yaml

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from tests.deploy.chart import CHART, require_helm
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed
CHART_RBAC = True

POLICY = "templates/shim/lease-admission.yaml"
ALIAS = "/v1/plugins/sparkrun-k8s/ops/workloads/"
COORDINATION = "coordination.k8s.io/v1"


def _lease(namespace: str, name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": COORDINATION,
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {"holderIdentity": "someone", "leaseDurationSeconds": 30},
    }


def _refused(call: Callable[[], Any]) -> ApiError:
    try:
        call()
    except ApiError as error:
        return error
    raise AssertionError("the write was let through")


@pytest.fixture(scope="module")
def shim(daemon: Daemon) -> Iterator[KubeApi]:
    """The shim's own identity (its ServiceAccount, the chart's RBAC), with the policy bound."""
    assert daemon.rbac is not None
    ns, release = daemon.namespace, daemon.rbac.release
    argv = [require_helm(), "template", release, str(CHART), "--namespace", ns, "--show-only", POLICY]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert sorted(d["kind"] for d in docs) == [
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert f"system:serviceaccount:{ns}:{release}-shim" in out
    for doc in docs:
        if doc["kind"] == "ValidatingAdmissionPolicyBinding":
            doc["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
            }
        daemon.kube.apply(doc)
    try:
        with KubeApi.from_kubeconfig(daemon.rbac.kubeconfigs["shim"]) as client:
            _wait_for_policy(daemon, client)
            yield client
    finally:
        for doc in docs:
            daemon.kube.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _wait_for_policy(daemon: Daemon, shim: KubeApi) -> None:
    """A policy takes effect within seconds of its creation: probe with a Lease the shim may
    create by RBAC but not by the policy (deleted again when it got through)."""
    deadline = time.monotonic() + 30
    while True:
        name = "probe-" + secrets.token_hex(4)
        try:
            shim.create(_lease(daemon.namespace, name, {}))
        except ApiError as error:
            refused = error
            break
        daemon.kube.delete(COORDINATION, "Lease", name, namespace=daemon.namespace)
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.5)
    assert refused.status == 403, refused
    assert "ownership Leases" in str(refused), refused  # the policy's refusal, not RBAC's


def test_the_shim_cannot_write_an_executor_lease(daemon: Daemon, shim: KubeApi) -> None:
    ns = daemon.namespace
    name = "sparkrun-executor-" + secrets.token_hex(8)
    executor = daemon.kube.create(_lease(ns, name, {"sparkrun.dev/executor": "true"}))
    path = f"/apis/{COORDINATION}/namespaces/{ns}/leases/{name}"
    forged = copy.deepcopy(executor)
    forged["spec"]["holderIdentity"] = "forged"
    refused = _refused(lambda: shim.request("PUT", path, json=forged))
    assert refused.status == 403, refused
    assert "never an executor's Lease" in str(refused)
    # nor by making it look like an ownership Lease
    disguised = copy.deepcopy(executor)
    disguised["metadata"]["labels"] = {"sparkrun.dev/ownership": "true"}
    assert _refused(lambda: shim.request("PUT", path, json=disguised)).status == 403
    kept = daemon.kube.get(COORDINATION, "Lease", name, namespace=ns)
    assert kept is not None
    assert kept["spec"]["holderIdentity"] == "someone"
    # a new Lease: only an ownership Lease's name and label, never an executor's label
    for bad in (
        _lease(ns, "sparkrun-executor-" + secrets.token_hex(8), {"sparkrun.dev/executor": "true"}),
        _lease(ns, "sparkrun-lease-x" + secrets.token_hex(3), {"sparkrun.dev/executor": "true"}),
        _lease(ns, "elsewhere-" + secrets.token_hex(3), {"sparkrun.dev/ownership": "true"}),
    ):
        assert _refused(lambda bad=bad: shim.create(bad)).status == 403, bad["metadata"]


def test_the_daemon_api_still_claims_renews_and_releases(daemon: Daemon, shim: KubeApi) -> None:
    name = "eph-adm-" + secrets.token_hex(3)
    manifest = {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": name},
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}, "state": "Stopped", "lease": {"ttlSeconds": 600}},
    }
    daemon.kube.apply(manifest, namespace=daemon.namespace)
    with daemon.http("operator") as client:
        for local, arguments in (
            ("lease", {"workload": name}),
            ("lease", {"workload": name}),
            ("release", {"workload": name}),
        ):
            answer = client.post(ALIAS + local, json=arguments)
            assert answer.status_code == 200, answer.text
    lease = daemon.kube.get(COORDINATION, "Lease", "sparkrun-lease-" + name, namespace=daemon.namespace)
    assert lease is not None
    assert "holderIdentity" not in lease["spec"]
    daemon.kube.delete(API, "InferenceWorkload", name, namespace=daemon.namespace)
