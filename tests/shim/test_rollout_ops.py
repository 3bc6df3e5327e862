"""The project's own daemon operations (ADR 0048) over real HTTP: ``plugins.sparkrun-k8s.*``.

A shim and an operator serve a namespace of the testbed (``tests/shim/conftest.py``).

Tested: ``GET /v1/ops`` lists the project's operations with owner ``sparkrun-k8s``, their local
names and HTTP aliases, filtered by scope (a reader sees only the read ones, ``workloads.history``
among them); ``/openapi.json`` has each alias; a reader is refused a rollback (403, by name and
by alias) and nothing runs; a missing workload is a typed ``LookupError`` (404 for the query, the
job's error for a job).

End to end with the operator (ADR 0046): a workload changed once has two revisions; a rollback
through the alias with no revision pins the previous one (written as field manager
``sparkrun-daemon-api``) and the operator serves it as a new revision copying its settings
(cause Rollback, rollbackOf 1, the first revision's hash serving); a spec change while pinned is
drift; ``apply_drift`` with a hash that is not the pending one fails ``Conflict`` and writes
nothing; with the pending hash the pin is removed and the drift is served as the next revision.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from sparkrun_operator.api.pluginops import OPERATIONS
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed

P = "plugins.sparkrun-k8s."
ALIAS = "/v1/plugins/sparkrun-k8s/ops/"
NAME = "rolling"


def _job(daemon: Daemon, who: str, local: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run a project job through its alias to the end."""
    with daemon.http(who) as client:
        answer = client.post(ALIAS + local.replace(".", "/"), json=arguments)
    assert answer.status_code == 202, answer.text
    job: dict[str, Any] = daemon.wait_job(answer.json()["job_id"], who, timeout=120)
    return job


def _history(daemon: Daemon, who: str = "reader") -> dict[str, Any]:
    with daemon.http(who) as client:
        answer = client.post(ALIAS + "workloads/history", json={"workload": NAME})
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def _workload(daemon: Daemon) -> dict[str, Any]:
    found = daemon.kube.get(API, "InferenceWorkload", NAME, namespace=daemon.namespace)
    assert found is not None
    return found


def _until(daemon: Daemon, what: str, check: Any, timeout: float = 240.0) -> dict[str, Any]:
    """The workload once ``check(workload)`` holds (the operator's status is eventual)."""
    deadline = time.monotonic() + timeout
    while True:
        workload = _workload(daemon)
        if check(workload):
            return workload
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s; status {workload.get('status')}")
        time.sleep(0.3)


def _current(number: int) -> Any:
    def check(workload: dict[str, Any]) -> bool:
        current = ((workload.get("status") or {}).get("history") or {}).get("current") or {}
        return current.get("number") == number

    return check


def test_listed_in_the_plugin_namespace_and_refused_below_their_scope(daemon: Daemon) -> None:
    with daemon.http("admin") as client:
        listed = {op["name"]: op for op in client.get("/v1/ops").json()}
        document = client.get("/openapi.json").json()
    with daemon.http("reader") as client:
        seen_by_reader = {op["name"] for op in client.get("/v1/ops").json()}
        by_alias = client.post(ALIAS + "workloads/rollback", json={"workload": NAME})
        by_name = client.post(f"/v1/ops/{P}workloads.rollback", json={"workload": NAME})
        missing = client.post(ALIAS + "workloads/history", json={"workload": "no-such-workload"})
    for op in OPERATIONS:
        entry = listed[op.name]
        assert (entry["owner"], entry["local_name"], entry["kind"], entry["scope"]) == (
            "sparkrun-k8s",
            op.local_name,
            op.kind,
            op.scope,
        )
        assert entry["http_path"] == ALIAS + op.local_name.replace(".", "/")
        assert document["paths"][entry["http_path"]]["post"]["x-sparkrun-operation"]["name"] == op.name
    assert {n for n in seen_by_reader if n.startswith(P)} == {
        op.name for op in OPERATIONS if op.scope == "read"
    }
    for refused in (by_alias, by_name):
        assert (refused.status_code, refused.json()) == (403, {"detail": "Insufficient permission"})
    assert not [
        job
        for job in daemon.kube.list_items(API, "DaemonJob", namespace=daemon.namespace)
        if job["spec"].get("operation") == P + "workloads.rollback"
    ]
    assert missing.status_code == 404
    assert missing.json()["error"]["type"] == "LookupError"
    gone = _job(daemon, "operator", "workloads.rollback", {"workload": "no-such-workload"})
    assert (gone["state"], gone["error"]["error"]["type"]) == ("failed", "LookupError")


def test_a_rollback_through_the_alias_is_served_by_the_operator(daemon: Daemon) -> None:
    manifest = {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": NAME},
        "spec": {"recipe": {"name": "qwen3-8b-vllm"}, "engine": {"maxModelLen": 4096}},
    }
    daemon.kube.apply(manifest, namespace=daemon.namespace)
    try:
        _until(daemon, "revision 1", _current(1))
        manifest["spec"]["engine"]["maxModelLen"] = 8192
        daemon.kube.apply(manifest, namespace=daemon.namespace)
        _until(daemon, "revision 2", _current(2))
        before = _history(daemon)
        assert [(r["number"], r["current"]) for r in before["revisions"]] == [(1, False), (2, True)]
        first = before["revisions"][0]["hash"]

        done = _job(daemon, "operator", "workloads.rollback", {"workload": NAME})
        assert done["state"] == "succeeded", done
        assert (done["result"]["revision"], done["result"]["changed"]) == (1, True)
        workload = _workload(daemon)
        assert workload["spec"]["rollout"]["revision"] == 1
        writers = {m["manager"] for m in workload["metadata"]["managedFields"] if "f:revision" in str(m)}
        assert "sparkrun-daemon-api" in writers

        served = _until(
            daemon,
            "the rollback served",
            lambda w: _current(3)(w) and (w.get("status") or {}).get("revision") == first,
        )
        assert served["status"]["history"]["rollbackOf"] == 1
        after = _history(daemon)
        newest = after["revisions"][-1]
        assert (newest["number"], newest["cause"], newest["rollback_of"], newest["hash"]) == (
            3,
            "Rollback",
            1,
            first,
        )
        assert after["pinned"] == 1

        manifest["spec"]["engine"]["maxModelLen"] = 2048
        # NB: the pin stays: this applier never owned spec.rollout.revision
        generation = daemon.kube.apply(manifest, namespace=daemon.namespace)["metadata"]["generation"]
        # NB: pinned, the spec already drifted (8192); the drift to wait for is this generation's
        drifted = _until(
            daemon,
            "drift while pinned",
            lambda w: (
                (w.get("status") or {}).get("observedGeneration") == generation
                and ((w.get("status") or {}).get("drift") or {}).get("revision")
            ),
        )
        pending = drifted["status"]["drift"]["revision"]
        assert pending not in {r["hash"] for r in after["revisions"]}
        assert drifted["status"]["drift"]["reason"] == "RevisionPinned"
        stale = _job(
            daemon, "operator", "workloads.apply_drift", {"workload": NAME, "revision": "0000000000"}
        )
        assert (stale["state"], stale["error"]["error"]["type"]) == ("failed", "Conflict")
        assert stale["error"]["error"]["attrs"] == {"reason": "stale_revision", "pending": pending}
        assert _workload(daemon)["spec"]["rollout"].get("revision") == 1
        applied = _job(daemon, "operator", "workloads.apply_drift", {"workload": NAME, "revision": pending})
        assert applied["state"] == "succeeded", applied["error"]
        assert applied["result"]["unpinned"] == 1
        _until(
            daemon,
            f"the drift {pending} served",
            lambda w: _current(4)(w) and (w.get("status") or {}).get("revision") == pending,
        )
    finally:
        daemon.kube.delete(API, "InferenceWorkload", NAME, namespace=daemon.namespace)
