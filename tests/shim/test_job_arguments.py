"""A DaemonJob's ``arguments`` are bounded in depth by the apiserver and pinned by their digest
(issue 23, follow-up F1; ``api/bounds.py``, ``ops/jobargs.py``, ADR 0006 amended).

The finding: a user who may create DaemonJobs could store a 2,000-level ``arguments`` value;
every Python reader of DaemonJobs (kopf's watch in the operator, the shim's ``JobCache``) then
failed with ``RecursionError``: the operator process exited and the shim's job cache stopped
updating, for every tenant. Now the apiserver refuses such an object (422, with the path where
the depth runs out), a job nested up to the bound still runs through the shim, and a change of
``arguments`` after creation, which the apiserver can no longer refuse (a depth-bounded schema
has no CEL type for an immutability rule), is executed by nobody: the operator runs only the
arguments whose digest is the job's immutable ``spec.requestDigest``.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrun_operator.api import bounds
from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.ops import jobs
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import API, TERMINAL, Daemon
from tests.shim.harness import with_digest
from tests.testbed.test_spec_bounds import renamed_crd, spec_schema

pytestmark = pytest.mark.testbed

MERGE = {"Content-Type": "application/merge-patch+json"}
RUN = {"recipe": "qwen3-8b-vllm", "dry_run": True}


def _nest(depth: int, leaf: Any = 1) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"a": value}
    return value


def _job(daemon: Daemon, operation: str, arguments: dict[str, Any], **spec: Any) -> dict[str, Any]:
    principal = {"username": daemon.env.username("admin")}
    body = {"operation": operation, "arguments": arguments, "principal": principal, **spec}
    return {
        "apiVersion": API,
        "kind": "DaemonJob",
        "metadata": {"name": secrets.token_hex(16), "namespace": daemon.namespace},
        "spec": body if "requestDigest" in spec else with_digest(body),
    }


def _create_raw(daemon: Daemon, name: str, text: str) -> tuple[int, str]:
    """POST the DaemonJob ``name`` given as JSON text (Python's json cannot encode 2,000
    levels); on success it is deleted again at once, its answers never decoded."""
    path = f"/apis/{API}/namespaces/{daemon.namespace}/daemonjobs"
    try:
        daemon.kube.request("POST", path, content=text.encode(), headers={"Content-Type": "application/json"})
    except ApiError as error:
        return error.status, error.message
    daemon.kube.request("DELETE", f"{path}/{name}")
    return 201, "created"


def _finished(daemon: Daemon, name: str, timeout: float = 90) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = daemon.job_object(name)
        if (found.get("status") or {}).get("state") in TERMINAL:
            return found
        assert time.monotonic() < deadline, found.get("status")
        time.sleep(0.2)


@pytest.mark.parametrize("levels", [2000, 100])
def test_arguments_nested_past_the_bound_are_refused_by_the_apiserver_with_the_path(
    daemon: Daemon, levels: int
) -> None:
    job = _job(daemon, "workloads.status", {"deep": "DEEP"}, requestDigest="0" * 64)
    text = json.dumps(job).replace('"DEEP"', '{"a":' * levels + "1" + "}" * levels)
    status, message = _create_raw(daemon, job["metadata"]["name"], text)
    assert status == 422, (status, message)
    where = "spec.arguments.deep" + ".a" * (bounds.ARGUMENTS_DEPTH - 1)
    assert f"{where}: Too many: " in message, message
    # DaemonJob reads keep working: a Python list, and a job through the shim end to end.
    daemon.kube.list_items(API, "DaemonJob", namespace=daemon.namespace)
    assert daemon.wait_job(daemon.submit("admin", "workloads.run", RUN))["state"] == "succeeded"


def test_arguments_within_the_bound_run_through_the_shim_and_deeper_ones_are_its_422(daemon: Daemon) -> None:
    # strategy_options is accepted and ignored on Kubernetes: any JSON object. Level 1 is the
    # arguments, so strategy_options may nest ARGUMENTS_DEPTH - 1 levels of containers. The leaves
    # are values the apiserver returns differently from how Python sends them (1.0 comes back as 1,
    # 2**64 as a float, a lone surrogate as U+FFFD): the digest of the stored arguments still
    # matches the one the shim computed. A null is kept as null (the schema is nullable).
    leaf = {"whole": 1.0, "big": 2**64, "text": "\ud800x", "nothing": None}
    options = _nest(bounds.ARGUMENTS_DEPTH - 3, [leaf])  # levels 2 to 6, the list 7, leaf 8
    body = json.dumps({**RUN, "strategy_options": options})
    with daemon.http("operator", **{"Content-Type": "application/json"}) as client:
        answer = client.post("/v1/ops/workloads.run", content=body.encode())
    assert answer.status_code == 202, answer.text
    job_id = answer.json()["job_id"]
    assert daemon.wait_job(job_id, "operator")["state"] == "succeeded"
    stored = daemon.job_object(job_id)["spec"]
    assert stored["requestDigest"] == jobs.request_digest("workloads.run", 1, stored["arguments"], "daemon")
    innermost = stored["arguments"]["strategy_options"]
    for _ in range(bounds.ARGUMENTS_DEPTH - 3):
        innermost = innermost["a"]
    # 2**64 went through a float64: Go prints it as 18446744073709552000.
    assert innermost == [{"whole": 1, "big": 18446744073709552000, "text": "\ufffdx", "nothing": None}]

    detail = daemon.refused_at_submission(
        "operator", "workloads.run", {**RUN, "strategy_options": _nest(bounds.ARGUMENTS_DEPTH)}
    )
    where = "request.strategy_options" + ".a" * (bounds.ARGUMENTS_DEPTH - 1)
    assert detail == f"{where}: nests deeper than {bounds.ARGUMENTS_DEPTH} levels (a job's bound)", detail


def test_arguments_changed_after_creation_are_never_executed(daemon: Daemon) -> None:
    ns = daemon.namespace
    path = f"/apis/{API}/namespaces/{ns}/daemonjobs"
    kept, changed, forged = ("nowhere-" + secrets.token_hex(3) for _ in range(3))
    swapped = "nowhere-" + secrets.token_hex(3)
    daemon.runner.operator.stop()  # the jobs stay queued while they are tampered with
    try:
        control = daemon.kube.create(_job(daemon, "cluster.create", {"name": kept, "hosts": ["gpu-0"]}))
        patched = daemon.kube.create(_job(daemon, "cluster.create", {"name": changed, "hosts": ["gpu-0"]}))
        name = patched["metadata"]["name"]
        new_arguments = {"spec": {"arguments": {"name": swapped, "hosts": ["gpu-0"]}}}
        # Accepted: no CEL rule can see a depth-bounded value; the digest below is what holds.
        daemon.kube.request("PATCH", f"{path}/{name}", json=new_arguments, headers=MERGE)
        # The digest that pins the arguments cannot be changed or removed.
        for digest in (
            jobs.request_digest("cluster.create", 1, new_arguments["spec"]["arguments"], "daemon"),
            None,
        ):
            with pytest.raises(ApiError) as refused:
                daemon.kube.request(
                    "PATCH", f"{path}/{name}", json={"spec": {"requestDigest": digest}}, headers=MERGE
                )
            assert refused.value.status == 422, refused.value
            assert "spec.requestDigest" in refused.value.message, refused.value
        # Created with the digest of other arguments: the same as a change after creation.
        other = jobs.request_digest("cluster.create", 1, {"name": kept, "hosts": ["gpu-0"]}, "daemon")
        mismatched = daemon.kube.create(
            _job(daemon, "cluster.create", {"name": forged, "hosts": ["gpu-0"]}, requestDigest=other)
        )
    finally:
        daemon.runner.operator.start()

    assert _finished(daemon, control["metadata"]["name"])["status"]["state"] == "succeeded"
    assert daemon.kube.get(API, "InferenceCluster", kept) is not None
    for job in (patched, mismatched):
        status = _finished(daemon, job["metadata"]["name"])["status"]
        assert status["state"] == "failed", status
        assert status["error"]["type"] == "PermissionError", status["error"]
        assert status["error"]["details"] == {"reason": "arguments_changed"}, status["error"]
    for cluster in (changed, swapped, forged):
        assert daemon.kube.get(API, "InferenceCluster", cluster) is None, cluster


# -- a job stored before the digest was required ------------------------------------------------

PROBE_GROUP = "digest-probe.sparkrun.dev"


def _probe_crd(*, current: bool) -> dict[str, Any]:
    """The generated DaemonJob CRD under a group of its own; unless ``current``, as it was before
    issue 23 made ``requestDigest`` required (no ``required`` entry, no presence rule)."""
    doc = renamed_crd(DAEMON_JOB, PROBE_GROUP, "DigestProbe")
    if not current:
        spec = spec_schema(doc)
        spec["required"].remove("requestDigest")
        del spec["x-kubernetes-validations"]
    return doc


@pytest.fixture
def probe(testbed: Testbed, kube: KubeApi) -> Iterator[str]:
    testbed.apply_crds([_probe_crd(current=False)])
    yield f"{PROBE_GROUP}/v1alpha1"
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"digestprobes.{PROBE_GROUP}")


def test_a_job_stored_without_a_digest_stays_served_and_cannot_be_given_one(
    testbed: Testbed, kube: KubeApi, namespace: str, probe: str
) -> None:
    arguments = {"name": "nowhere", "hosts": ["gpu-0"]}
    old = {
        "apiVersion": probe,
        "kind": "DigestProbe",
        "metadata": {"name": "stored-before", "namespace": namespace},
        "spec": {"operation": "cluster.create", "arguments": arguments, "principal": {"username": "u"}},
    }
    kube.create(old)
    testbed.apply_crds([_probe_crd(current=True)])
    fresh = {**old, "metadata": {"name": "fresh", "namespace": namespace}}
    collection = kube.resource_path(probe, "DigestProbe", namespace=namespace)

    def digest_required() -> bool:
        try:
            kube.request("POST", collection, params={"dryRun": "All"}, json=fresh)
        except ApiError as e:
            return e.status == 422
        return False

    kube.wait(digest_required, timeout=30, what="the current schema in force")
    path = f"{collection}/stored-before"
    # Served, and labels and status may change (tombstoning, the executor failing it).
    assert kube.get(probe, "DigestProbe", "stored-before", namespace=namespace) is not None
    kube.request("PATCH", path, json={"metadata": {"labels": {"t": "1"}}}, headers=MERGE)
    kube.request("PATCH", f"{path}/status", json={"status": {"state": "failed"}}, headers=MERGE)
    # It cannot be given a digest after the fact (its arguments would then run under it).
    digest = jobs.request_digest("cluster.create", 1, arguments, "daemon")
    with pytest.raises(ApiError) as refused:
        kube.request("PATCH", path, json={"spec": {"requestDigest": digest}}, headers=MERGE)
    assert refused.value.status == 422, refused.value
    assert "spec.requestDigest: Invalid value" in refused.value.message, refused.value
    assert "requestDigest cannot be added or removed" in refused.value.message, refused.value
