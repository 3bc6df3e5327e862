"""The daemon-compatible API on a real Kubernetes control plane, through real HTTP.

Tested (the shim and the operator run as their real commands, see ``harness.py``):

- the document's cluster-create example, verbatim, with the reference daemon client;
- ``workloads.run`` to a Ready InferenceWorkload; the result's workload id is the object's;
- Idempotency-Key: a retry through either URL returns the same job; different arguments are
  409; the key is scoped to the principal;
- cancellation of a running job (cancelling -> cancelled) and of a queued one (-> cancelled);
- an approval prompt answered (and refused: wrong type, another principal), a declined prompt;
- a secret answer: needs ``answer-secret``, lands in a Secret owned by the job, never in the
  DaemonJob;
- SSE: full replay, Last-Event-ID, 410 for an expired cursor, a gap event for expiry while
  connected; the reference client's ``events`` and ``wait``;
- the 401/403 matrix; a non-admin cannot read or list another principal's job;
- unknown fields, invalid JSON and non-objects are 422 on the generic URL and on aliases;
- a resumable job whose operator stopped (killed, or stopped for an upgrade) is run again by the
  next operator; one waiting for input is ``lost`` with a retryable reason;
- ``/v1/events`` snapshots, ``/v1/streams/monitor``, ``/v1/streams/logs`` parameter checks,
  ``/v1/reservations``, maintenance drain, the diagnostics artifact, ``/openapi.json``, ``/docs``.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

import httpx
import pytest

from sparkrun_operator.api.pluginops import OPERATIONS
from sparkrun_testbed.kubeapi import KubeApi
from tests.shim.conftest import API, Daemon
from tests.shim.harness import reference_client

pytestmark = pytest.mark.testbed


def _sse(text: str) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]


def _events(daemon: Daemon, job_id: str, who: str = "admin", after: int | None = None) -> httpx.Response:
    headers = {"Last-Event-ID": str(after)} if after is not None else {}
    with daemon.http(who) as client:
        return client.get(f"/v1/jobs/{job_id}/events", headers=headers)


def _delete_cluster(kube: KubeApi, name: str) -> None:
    kube.delete(API, "InferenceCluster", name)


# -- the document's example and the reference client ---------------------------------------


def test_document_cluster_create_example_with_the_reference_client(daemon: Daemon, ref_python: str) -> None:
    try:
        out = reference_client(
            ref_python,
            daemon.url,
            daemon.token("admin"),
            [
                {
                    "call": "example",
                    "body": {"name": "lab", "hosts": ["spark-a", "spark-b"]},
                    "key": "create-lab-001",
                }
            ],
            ca_cert=daemon.runner.ca_file,
        )
        assert out[0]["ok"], out
        value = out[0]["value"]
        assert value["info"]["protocol"] == 1
        assert value["info"]["manager"] == "daemon"
        submission = value["submission"]
        assert set(submission) == {"job_id", "events_url"}
        assert submission["events_url"] == f"/v1/jobs/{submission['job_id']}/events"
        assert value["job"]["id"] == submission["job_id"]
        assert value["job"]["operation"] == "cluster.create"
        waited = reference_client(
            ref_python,
            daemon.url,
            daemon.token("admin"),
            [{"call": "wait", "id": submission["job_id"]}, {"call": "events", "id": submission["job_id"]}],
            ca_cert=daemon.runner.ca_file,
        )
        result = waited[0]["value"]
        assert result["name"] == "lab"
        assert result["hosts"] == ["spark-a", "spark-b"]
        assert result["transport"] == "kubernetes"
        states = [e["state"] for e in waited[1]["value"] if e["type"] == "state"]
        assert states == ["queued", "starting", "running", "succeeded"]
        cluster = daemon.kube.get(API, "InferenceCluster", "lab")
        assert cluster is not None
        assert cluster["spec"]["nodes"]["names"] == ["spark-a", "spark-b"]
    finally:
        _delete_cluster(daemon.kube, "lab")


# -- workloads ------------------------------------------------------------------------------


def test_workloads_run_reaches_a_ready_workload(daemon: Daemon) -> None:
    job_id = daemon.submit("operator", "workloads.run", {"recipe": "qwen3-8b-vllm"})
    job = daemon.wait_job(job_id, "operator", timeout=180)
    assert job["state"] == "succeeded", job
    result = job["result"]
    workload = daemon.kube.get(API, "InferenceWorkload", "qwen3-8b-vllm", namespace=daemon.namespace)
    assert workload is not None
    ready = [c for c in workload["status"]["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "True"
    assert result["workload_id"] == workload["status"]["workloadId"]
    assert result["recipe_fingerprint"] == workload["status"]["recipeRevision"]
    assert workload["spec"]["manager"] == "daemon"
    assert result["host_list"], result
    with daemon.http("reader") as client:
        listed = client.post("/v1/workloads/list", json={}).json()
        snapshot = client.get("/v1/snapshots/discovery.snapshot").json()
    assert [row["workload_id"] for row in listed] == [result["workload_id"]]
    assert snapshot["endpoints"][0]["healthy"] is True
    # Guarded lifecycle: status by exact id and revision; stop needs the owning manager.
    guarded = {
        "recipe": "qwen3-8b-vllm",
        "recipe_revision": result["recipe_fingerprint"],
        "workload_id": result["workload_id"],
    }
    status = daemon.wait_job(daemon.submit("reader", "workloads.status", guarded), "reader")
    assert status["result"]["state"] == "ready"
    assert status["result"]["owned"] is True
    foreign = daemon.wait_job(daemon.submit("automation", "workloads.stop", guarded), "automation")
    assert foreign["state"] == "failed"
    assert foreign["error"]["error"]["attrs"]["reason"] == "not_owner"
    stopped = daemon.wait_job(daemon.submit("operator", "workloads.stop", guarded), "operator", timeout=180)
    assert stopped["result"] == {"state": "offline", "workload_ids": [result["workload_id"]]}
    assert daemon.kube.get(API, "InferenceWorkload", "qwen3-8b-vllm", namespace=daemon.namespace) is None


# -- idempotency -------------------------------------------------------------------------------


def test_same_key_returns_the_same_job_through_either_url(daemon: Daemon) -> None:
    name = "idem-" + secrets.token_hex(3)
    body = {"name": name, "hosts": ["gpu-0"]}
    try:
        with daemon.http("admin", **{"Idempotency-Key": "k-" + name}) as client:
            first = client.post("/v1/cluster/create", json=body)
            again = client.post("/v1/ops/cluster.create", json=body)
            conflict = client.post("/v1/ops/cluster.create", json={**body, "description": "other"})
        assert first.status_code == again.status_code == 202
        assert first.json() == again.json()
        assert conflict.status_code == 409
        assert conflict.json()["error"]["type"] == "Conflict"
        assert conflict.json()["detail"] == "Idempotency key was already used for different arguments"
        job = daemon.wait_job(first.json()["job_id"])
        assert job["state"] == "succeeded"
        # After it finished the same key still answers the same job: no second execution.
        with daemon.http("admin", **{"Idempotency-Key": "k-" + name}) as client:
            assert client.post("/v1/cluster/create", json=body).json() == first.json()
    finally:
        _delete_cluster(daemon.kube, name)


def test_idempotency_keys_are_scoped_to_the_principal(daemon: Daemon) -> None:
    body = {"recipe": "qwen3-8b-vllm", "dry_run": True}
    with daemon.http("operator", **{"Idempotency-Key": "shared"}) as client:
        mine = client.post("/v1/workloads/run", json=body).json()["job_id"]
    with daemon.http("automation", **{"Idempotency-Key": "shared"}) as client:
        theirs = client.post("/v1/workloads/run", json=body).json()["job_id"]
    assert mine != theirs
    with daemon.http("operator", **{"Idempotency-Key": "x" * 201}) as client:
        too_long = client.post("/v1/workloads/run", json=body)
    assert too_long.status_code == 422
    assert daemon.wait_job(mine, "operator")["result"]["dry_run"] is True


# -- cancellation ------------------------------------------------------------------------------


def _blocked_run(daemon: Daemon, who: str = "operator", **extra: Any) -> str:
    """A workloads.run that cannot become ready: its cluster's nodes do not exist."""
    cluster = "nowhere-" + secrets.token_hex(3)
    daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "InferenceCluster",
            "metadata": {"name": cluster},
            "spec": {"nodes": {"names": ["no-such-node"]}},
        }
    )
    name = "blocked-" + secrets.token_hex(3)
    return daemon.submit(
        who,
        "workloads.run",
        {"recipe": "qwen3-8b-vllm", "cluster": cluster, "workload_id_override": name, **extra},
    )


def test_cancel_a_running_job(daemon: Daemon) -> None:
    job_id = _blocked_run(daemon)
    daemon.wait_job(job_id, "operator", states={"running"})
    time.sleep(1.0)
    with daemon.http("reader") as client:
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 404  # not the owner (ADR 0021)
    with daemon.http("operator") as client:
        answer = client.delete(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["state"] in ("cancelling", "cancelled")
    assert answer.json()["cancelled"] is not None
    job = daemon.wait_job(job_id, "operator")
    assert job["state"] == "cancelled"
    states = [e["state"] for e in _sse(_events(daemon, job_id, "operator").text) if e["type"] == "state"]
    assert states[-2:] == ["cancelling", "cancelled"]
    with daemon.http("operator") as client:
        again = client.delete(f"/v1/jobs/{job_id}")
    assert again.status_code == 409
    assert again.json()["detail"] == "Job is already finished"


def test_cancel_a_queued_job(daemon: Daemon) -> None:
    daemon.runner.operator.stop()
    try:
        job_id = daemon.submit("operator", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
        with daemon.http("operator") as client:
            job = client.get(f"/v1/jobs/{job_id}").json()
            assert job["state"] == "queued"
            assert job["seq"] == 1
            cancelled = client.delete(f"/v1/jobs/{job_id}").json()
        assert cancelled["state"] == "cancelled"
    finally:
        daemon.runner.operator.start()
    time.sleep(2)
    assert daemon.wait_job(job_id, "operator")["state"] == "cancelled"


# -- prompts ---------------------------------------------------------------------------------


def test_an_approval_prompt_is_answered(daemon: Daemon) -> None:
    job_id = daemon.submit(
        "operator",
        "workloads.run",
        {"recipe": "qwen3-8b-vllm", "confirm": True, "dry_run": False, "workload_id_override": "approved"},
    )
    job = daemon.wait_job(job_id, "operator", states={"waiting_input"})
    prompt = job["prompt"]
    assert prompt["kind"] == "approval"
    assert prompt["default"] is False
    assert prompt["deadline"] > time.time() + 200  # the 300 s default
    with daemon.http("reader") as client:
        assert (
            client.post(
                f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt["prompt_id"], "value": True}
            ).status_code
            == 404  # another principal's job (ADR 0021)
        )
    with daemon.http("operator") as client:
        wrong_type = client.post(
            f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt["prompt_id"], "value": "yes"}
        )
        extra = client.post(
            f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt["prompt_id"], "value": True, "x": 1}
        )
        stale = client.post(f"/v1/jobs/{job_id}/input", json={"prompt_id": "nope", "value": True})
        ok = client.post(f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt["prompt_id"], "value": True})
    assert wrong_type.status_code == 422
    assert extra.status_code == 422
    assert stale.status_code == 409
    assert ok.status_code == 200
    assert ok.json() == {}
    done = daemon.wait_job(job_id, "operator", timeout=180)
    assert done["state"] == "succeeded"
    kinds = [e["type"] for e in _sse(_events(daemon, job_id, "operator").text)]
    assert kinds.index("prompt") < kinds.index("answered")
    daemon.kube.delete(API, "InferenceWorkload", "approved", namespace=daemon.namespace)


def test_a_declined_prompt_fails_the_job_and_creates_nothing(daemon: Daemon) -> None:
    job_id = daemon.submit(
        "operator",
        "workloads.run",
        {"recipe": "qwen3-8b-vllm", "confirm": True, "workload_id_override": "declined"},
    )
    prompt = daemon.wait_job(job_id, "operator", states={"waiting_input"})["prompt"]
    with daemon.http("operator") as client:
        assert (
            client.post(
                f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt["prompt_id"], "value": False}
            ).status_code
            == 200
        )
    job = daemon.wait_job(job_id, "operator")
    assert job["state"] == "failed"
    assert job["error"]["detail"] == "Launch declined"
    assert daemon.kube.get(API, "InferenceWorkload", "declined", namespace=daemon.namespace) is None


def test_a_secret_answer_needs_its_permission_and_never_reaches_the_job(daemon: Daemon) -> None:
    daemon.runner.operator.stop()
    try:
        job_id = daemon.submit("admin", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
        obj = daemon.job_object(job_id)
        deadline = "2099-01-01T00:00:00Z"
        obj["status"] = {
            "state": "waiting_input",
            "executor": "elsewhere",
            "prompt": {"id": "p1", "kind": "secret", "message": "Sudo password", "expiresAt": deadline},
            "events": [
                {"id": 1, "time": deadline, "type": "state", "data": {"state": "queued"}},
                {"id": 2, "time": deadline, "type": "state", "data": {"state": "waiting_input"}},
            ],
            "firstEventId": 1,
            "nextEventId": 3,
        }
        daemon.kube.request(
            "PUT", f"/apis/{API}/namespaces/{daemon.namespace}/daemonjobs/{job_id}/status", json=obj
        )
        # The automation principal owns no such job; the operator principal lacks answer-secret.
        secret = "hunter2-" + secrets.token_hex(4)
        with daemon.http("operator") as client:
            assert client.get(f"/v1/jobs/{job_id}").status_code == 404  # not the owner (ADR 0021)
        with daemon.http("admin") as client:
            answered = client.post(f"/v1/jobs/{job_id}/input", json={"prompt_id": "p1", "value": secret})
            job = client.get(f"/v1/jobs/{job_id}").json()
        assert answered.status_code == 200, answered.text
        stored = daemon.job_object(job_id)
        assert secret not in json.dumps(stored)
        assert secret not in json.dumps(job)
        ref = stored["spec"]["answers"][0]["secretRef"]
        holder = daemon.kube.get("v1", "Secret", ref["name"], namespace=daemon.namespace)
        assert holder is not None
        assert holder["metadata"]["ownerReferences"][0]["uid"] == stored["metadata"]["uid"]
    finally:
        daemon.runner.operator.start()
    # Its executor ("elsewhere") holds no Lease: the restarted operator finds the job lost.
    assert daemon.wait_job(job_id, "admin", timeout=60)["state"] == "lost"


def test_answer_secret_permission_is_required(daemon: Daemon) -> None:
    daemon.runner.operator.stop()
    try:
        job_id = daemon.submit("operator", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
        obj = daemon.job_object(job_id)
        obj["status"] = {
            "state": "waiting_input",
            "executor": "elsewhere",
            "prompt": {"id": "p2", "kind": "secret", "message": "token", "expiresAt": "2099-01-01T00:00:00Z"},
        }
        daemon.kube.request(
            "PUT", f"/apis/{API}/namespaces/{daemon.namespace}/daemonjobs/{job_id}/status", json=obj
        )
        with daemon.http("operator") as client:
            denied = client.post(f"/v1/jobs/{job_id}/input", json={"prompt_id": "p2", "value": "s3cret"})
        assert denied.status_code == 403
        assert "answers" not in daemon.job_object(job_id)["spec"]
    finally:
        daemon.runner.operator.start()


# -- events ----------------------------------------------------------------------------------


def test_event_replay_last_event_id_and_expired_cursor(daemon: Daemon, ref_python: str) -> None:
    job_id = daemon.submit("operator", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
    job = daemon.wait_job(job_id, "operator")
    full = _sse(_events(daemon, job_id, "operator").text)
    assert [e["id"] for e in full] == list(range(1, job["seq"] + 1))
    assert full[-1] == {"id": job["seq"], "type": "state", "state": "succeeded"}
    later = _sse(_events(daemon, job_id, "operator", after=3).text)
    assert [e["id"] for e in later] == list(range(4, job["seq"] + 1))
    out = reference_client(
        ref_python,
        daemon.url,
        daemon.token("operator"),
        [{"call": "events", "id": job_id, "after": 2}],
        ca_cert=daemon.runner.ca_file,
    )
    assert [e["id"] for e in out[0]["value"]] == list(range(3, job["seq"] + 1))
    assert _events(daemon, job_id, "operator", after=-1).status_code == 422
    # Retention dropped the oldest events: a cursor before them has expired.
    obj = daemon.job_object(job_id)
    obj["status"]["events"] = [e for e in obj["status"]["events"] if e["id"] >= 4]
    obj["status"]["firstEventId"] = 4
    daemon.kube.request(
        "PUT", f"/apis/{API}/namespaces/{daemon.namespace}/daemonjobs/{job_id}/status", json=obj
    )
    time.sleep(1.0)
    gone = _events(daemon, job_id, "operator", after=1)
    assert gone.status_code == 410
    assert gone.json()["error"]["type"] == "ReplayGap"
    assert _events(daemon, job_id, "operator", after=3).status_code == 200


def test_expiry_while_connected_sends_a_gap_event(daemon: Daemon) -> None:
    daemon.runner.operator.stop()
    try:
        job_id = daemon.submit("operator", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
        with daemon.http("operator") as client, client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
            lines = stream.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[6:])["state"] == "queued"
            obj = daemon.job_object(job_id)
            obj["status"] = {"state": "queued", "events": [], "firstEventId": 10, "nextEventId": 12}
            daemon.kube.request(
                "PUT", f"/apis/{API}/namespaces/{daemon.namespace}/daemonjobs/{job_id}/status", json=obj
            )
            gap = next(line for line in lines if line.startswith("data: "))
        assert json.loads(gap[6:])["type"] == "gap"
        with daemon.http("operator") as client:
            client.delete(f"/v1/jobs/{job_id}")
    finally:
        daemon.runner.operator.start()


def test_global_events_snapshot_visible_jobs(daemon: Daemon) -> None:
    job_id = daemon.submit("reader", "workloads.inventory", {})
    daemon.wait_job(job_id, "reader")
    with daemon.http("reader") as client, client.stream("GET", "/v1/events") as stream:
        assert stream.headers["content-type"].startswith("text/event-stream")
        line = next(line for line in stream.iter_lines() if line.startswith("data: "))
    snapshot = json.loads(line[6:])
    assert snapshot["type"] == "snapshot"
    ids = {job["id"] for job in snapshot["jobs"]}
    assert job_id in ids
    assert all(job["principal"] == daemon.env.username("reader") for job in snapshot["jobs"])


# -- authentication and authorization ---------------------------------------------------------


def test_authentication_and_permission_matrix(daemon: Daemon) -> None:
    with daemon.http() as anonymous:
        assert anonymous.get("/v1/health").json() == {"status": "ok", "protocol": 1}
        for path in ("/v1/info", "/v1/ops", "/v1/jobs", "/openapi.json", "/docs"):
            answer = anonymous.get(path)
            assert answer.status_code == 401, path
            assert answer.headers["www-authenticate"] == "Bearer"
            assert answer.json() == {"detail": "Authentication required"}
        assert anonymous.get("/v1/info", headers={"Authorization": "Bearer not-a-token"}).status_code == 401
        assert anonymous.get("/v1/info", headers={"Authorization": "Basic dXNlcjpwYXNz"}).status_code == 401
    cases = [
        ("nobody", "GET", "/v1/info", None, 403),
        ("nobody", "GET", "/openapi.json", None, 200),
        ("nobody", "GET", "/docs", None, 403),
        ("reader", "GET", "/v1/info", None, 200),
        ("reader", "GET", "/docs", None, 200),
        ("reader", "POST", "/v1/workloads/list", {}, 200),
        ("reader", "POST", "/v1/workloads/run", {"recipe": "x"}, 403),
        ("reader", "POST", "/v1/cluster/create", {"name": "x", "hosts": ["a"]}, 403),
        ("reader", "GET", "/v1/reservations", None, 403),
        ("reader", "POST", "/v1/maintenance", {"drain": False}, 403),
        ("operator", "POST", "/v1/workloads/run", {"recipe": "qwen3-8b-vllm", "dry_run": True}, 202),
        ("operator", "POST", "/v1/cluster/delete", {"name": "x"}, 403),
        ("admin", "GET", "/v1/reservations", None, 200),
        ("admin", "POST", "/v1/ops/tailscale.join", {}, 403),
    ]
    for who, method, path, body, status in cases:
        with daemon.http(who) as client:
            answer = client.request(method, path, json=body)
        assert answer.status_code == status, (who, method, path, answer.text)
    with daemon.http("reader") as client:
        denied = client.post("/v1/cluster/create", json={"name": "x", "hosts": ["a"]})
    assert denied.json() == {"detail": "Insufficient permission"}
    with daemon.http("admin") as client:
        disabled = client.post("/v1/ops/tailscale.join", json={}).json()
    assert disabled["error"]["type"] == "FeatureDisabled"
    assert disabled["error"]["attrs"]["reason"] == "not_applicable"


def test_ops_are_filtered_by_permission_and_availability(daemon: Daemon) -> None:
    views = {}
    for who in ("reader", "operator", "admin"):
        with daemon.http(who) as client:
            views[who] = {op["name"]: op for op in client.get("/v1/ops").json()}
    assert set(views["reader"]) < set(views["operator"]) < set(views["admin"])
    assert all(op["scope"] == "read" for op in views["reader"].values())
    assert "cluster.create" in views["admin"]
    assert "setup.mesh_ssh_keys" not in views["admin"]
    assert "benchmarks.run" in views["operator"]
    assert "catalog.refresh" in views["operator"]
    assert "catalog.registries.add" not in views["operator"]
    assert "recipes.build" not in views["admin"]
    assert "model_cache.list" in views["reader"]
    assert len(views["admin"]) == 76 + len(OPERATIONS)  # the reference's enabled 76, the project's (ADR 0048)
    entry = views["admin"]["workloads.run"]
    assert list(entry) == [
        "name", "owner", "local_name", "version", "kind", "cacheable", "scope", "description",
        "resources", "http_path", "request_schema", "result_schema",
    ]  # fmt: skip
    assert entry["http_path"] == "/v1/workloads/run"


def test_a_non_admin_cannot_read_another_principals_job(daemon: Daemon) -> None:
    job_id = daemon.submit("reader", "workloads.inventory", {})
    daemon.wait_job(job_id, "reader")
    with daemon.http("reader2") as client:
        denied = client.get(f"/v1/jobs/{job_id}")
        events = client.get(f"/v1/jobs/{job_id}/events")
        listed = client.get("/v1/jobs").json()
    # Answered as an unknown id: no oracle for other principals' (keyed) job ids.
    assert denied.status_code == 404
    with daemon.http("reader2") as client:
        unknown = client.get(f"/v1/jobs/{secrets.token_hex(16)}")
    assert denied.json() == unknown.json()
    assert events.status_code == 404
    assert job_id not in {job["id"] for job in listed}
    with daemon.http("admin") as client:
        assert client.get(f"/v1/jobs/{job_id}").status_code == 200
        assert job_id in {job["id"] for job in client.get("/v1/jobs", params={"limit": 1000}).json()}
        assert client.get("/v1/jobs/" + "0" * 32).status_code == 404


def test_manager_identity_comes_from_the_service_account(daemon: Daemon) -> None:
    with daemon.http("automation") as client:
        assert client.get("/v1/info").json()["manager"] == "automation"
    job_id = daemon.submit("automation", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
    assert daemon.wait_job(job_id, "automation")["manager"] == "automation"
    assert daemon.job_object(job_id)["spec"]["manager"] == "automation"


# -- validation -------------------------------------------------------------------------------


def test_unknown_fields_and_bad_bodies_are_422(daemon: Daemon) -> None:
    with daemon.http("admin") as client:
        for path in ("/v1/ops/cluster.create", "/v1/cluster/create"):
            unknown = client.post(path, json={"name": "x", "hosts": ["a"], "zzz": 1})
            assert unknown.status_code == 422
            assert unknown.json() == {
                "detail": "request: unknown fields: zzz",
                "error": {"type": "ValueError", "retryable": False, "attrs": {}},
            }
            assert client.post(path, json={"name": "x"}).json()["detail"] == "request: missing fields: hosts"
            assert client.post(path, content=b"{bad").json()["detail"] == "Invalid JSON request"
            assert client.post(path, json=[1]).json()["detail"] == "Request must be a JSON object"
        nested = client.post("/v1/workloads/run", json={"recipe": "r", "overrides": {"api_token": "x"}})
        assert nested.status_code == 422
    # argument checks after the schema: an override Kubernetes has no meaning for, no job created
    detail = daemon.refused_at_submission(
        "admin", "workloads.run", {"recipe": "r", "overrides": {"port": 9000}}
    )
    assert detail.startswith("override 'port' is not supported on Kubernetes; supported: enable_sleep_mode")
    with daemon.http("admin") as client:
        assert client.post("/v1/ops/no.such", json={}).status_code == 404
        assert client.get("/v1/ops/cluster.create").status_code == 405
        assert client.get("/v1/nothing-here").json() == {"detail": "Not Found"}
        assert client.get("/v1/jobs", params={"limit": "abc"}).status_code == 422


# -- lost jobs, reservations, maintenance -----------------------------------------------------


@pytest.mark.parametrize("kill", [True, False], ids=["crash", "rolling-upgrade"])
def test_a_resumable_job_is_resumed_when_its_operator_stops(daemon: Daemon, kill: bool) -> None:
    """Kill the operator mid-job (a crash: its Lease expires) or stop it (an upgrade: SIGTERM, its
    Lease is released): the next operator runs the resumable workloads.run again, and says so."""
    job_id = _blocked_run(daemon)
    first = daemon.wait_job(job_id, "operator", states={"running"})
    old = daemon.job_object(job_id)["status"]["executor"]
    assert daemon.job_object(job_id)["status"]["attempts"] == 1
    stopped = time.monotonic()
    daemon.runner.restart_operator(kill=kill)

    def resumed() -> dict[str, Any] | None:
        status = daemon.job_object(job_id).get("status") or {}
        return status if status.get("attempts") == 2 else None

    status = daemon.kube.wait(resumed, timeout=90, what="the job resumed by the new operator")
    how = "crash" if kill else "graceful"
    print(f"hand-over ({how}): resumed {time.monotonic() - stopped:.1f} s after the stop")
    assert status["executor"] != old
    assert status["state"] == "running"
    events = json.dumps(status["events"])
    assert f"the executor {old} stopped" in events
    assert first["state"] == "running"
    with daemon.http("operator") as client:
        assert client.delete(f"/v1/jobs/{job_id}").status_code in (200, 202)
    assert daemon.wait_job(job_id, "operator", timeout=60)["state"] == "cancelled"


def test_a_job_waiting_for_input_when_its_operator_died_is_lost_with_a_reason(daemon: Daemon) -> None:
    job_id = daemon.submit(
        "operator",
        "workloads.run",
        {"recipe": "qwen3-8b-vllm", "confirm": True, "workload_id_override": "asked"},
    )
    daemon.wait_job(job_id, "operator", states={"waiting_input"})
    with daemon.http("admin") as client:
        claims = client.get("/v1/reservations").json()
    owner = next(c for c in claims if any(j["job_id"] == job_id for j in c["claims"]))
    assert owner["alive"] is True
    daemon.runner.restart_operator(kill=True)
    job = daemon.wait_job(job_id, "operator", timeout=90)
    assert job["state"] == "lost"
    error = job["error"]["error"]
    assert error["type"] == "WorkerLost"
    assert error["retryable"] is True
    assert "waiting for input" in job["error"]["detail"]
    assert error["attrs"]["operation"] == "workloads.run"


def test_gateway_deployment_operations(daemon: Daemon) -> None:
    """proxy.service_status / stop / start / sync and discovery.status act on the gateway
    Deployment (here a stand-in Deployment on KWOK nodes, named like the chart's)."""
    ns = daemon.namespace
    labels = {"app.kubernetes.io/component": "gateway"}
    daemon.kube.create(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "sparkrun-gateway", "namespace": ns},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"sparkrun.dev/testbed-pool": "gpu"},
                        "containers": [{"name": "gateway", "image": "sparkrun-operator:test"}],
                    },
                },
            },
        }
    )

    def deployment() -> dict[str, Any]:
        found = daemon.kube.get("apps/v1", "Deployment", "sparkrun-gateway", namespace=ns)
        assert found is not None
        return found

    def result(who: str, name: str, args: dict[str, Any]) -> Any:
        job = daemon.wait_job(daemon.submit(who, name, args), who)
        assert job["state"] == "succeeded", job
        return job["result"]

    daemon.kube.wait(
        lambda: (deployment().get("status") or {}).get("availableReplicas") == 2,
        timeout=60,
        what="2 replicas",
    )
    status = result("admin", "proxy.service_status", {"journal_lines": 5})
    assert (status["installed"], status["enabled"], status["active"]) == (True, "enabled", "active")
    assert status["unit"] == "deployment/sparkrun-gateway"
    stopped = result("operator", "proxy.stop", {})
    assert (stopped["stopped"], stopped["was_running"]) == (True, True)
    assert deployment()["spec"]["replicas"] == 0
    assert deployment()["metadata"]["annotations"]["sparkrun.dev/replicas-before-stop"] == "2"
    assert result("admin", "proxy.service_status", {})["enabled"] == "disabled"
    refused = daemon.wait_job(daemon.submit("operator", "proxy.start", {"port": 9999}), "operator")
    assert refused["state"] == "failed"
    assert "listens on its Service" in refused["error"]["detail"]
    started = result("operator", "proxy.start", {"auto_discover": True})
    assert started["started"] is True
    assert started["host"] == f"sparkrun-gateway.{ns}.svc"
    assert started["warnings"]  # auto_discover means nothing for a Deployment: said so
    assert deployment()["spec"]["replicas"] == 2
    assert "sparkrun.dev/replicas-before-stop" not in (deployment()["metadata"].get("annotations") or {})
    synced = result("operator", "proxy.sync", {"aliases": {"chat": "tiny"}})
    assert (synced["added"], synced["removed"]) == (1, 0)
    assert result("operator", "proxy.sync", {"aliases": {"chat": "tiny"}})["added"] == 0
    with daemon.http("admin") as client:
        discovery = client.post("/v1/proxy/discovery/status", json={}).json()
        assert discovery["backend"] == "kubernetes-watch"
        disabled = client.post("/v1/ops/proxy.install_service", json={}).json()
    assert disabled["error"]["type"] == "FeatureDisabled"
    daemon.kube.delete("apps/v1", "Deployment", "sparkrun-gateway", namespace=ns)


def test_maintenance_drain_refuses_new_operations(daemon: Daemon) -> None:
    with daemon.http("admin") as client:
        assert client.post("/v1/maintenance", json={"drain": 1}).status_code == 422
        assert client.post("/v1/maintenance", json={"drain": True}).json() == {"draining": True}
        try:
            refused = client.post("/v1/workloads/inventory", json={})
            assert refused.status_code == 409
            assert client.get("/v1/info").json()["restart_required"] is True
        finally:
            assert client.post("/v1/maintenance", json={"drain": False}).json() == {"draining": False}


# -- artifacts, streams, documents ------------------------------------------------------------


def test_diagnostics_bundle_is_an_artifact_of_the_job(daemon: Daemon) -> None:
    job_id = daemon.submit("reader", "diagnostics.collect", {"log_tail": 10})
    job = daemon.wait_job(job_id, "reader")
    assert job["state"] == "succeeded", job
    artifact = job["result"]["artifact"]
    assert artifact["url"] == f"/v1/jobs/{job_id}/artifacts/diagnostics"
    announced = [e for e in _sse(_events(daemon, job_id, "reader").text) if e["type"] == "artifact"]
    assert announced[0]["url"] == artifact["url"]
    with daemon.http("reader") as client:
        bundle = client.get(artifact["url"])
    assert bundle.status_code == 200
    assert bundle.headers["content-type"] == "application/x-ndjson"
    sections = {json.loads(line)["section"] for line in bundle.text.splitlines()}
    assert {"nodes", "workloads", "daemonjobs"} <= sections
    assert len(bundle.content) == artifact["size_bytes"]
    with daemon.http("reader2") as client:
        assert client.get(artifact["url"]).status_code == 404


def test_monitor_stream_sends_history_then_frames(daemon: Daemon) -> None:
    with daemon.http("reader") as client:
        assert client.get("/v1/streams/monitor", params={"interval": "0"}).status_code == 422
        assert (
            client.get("/v1/streams/logs", params={"bogus": "1"}).json()["detail"]
            == "request: unknown fields: bogus"
        )
        assert client.get("/v1/streams/logs", params={"follow": "maybe"}).status_code == 422
        assert client.get("/v1/streams/other").status_code == 404
        with client.stream("GET", "/v1/streams/monitor", params={"interval": "1"}) as stream:
            payloads = []
            for line in stream.iter_lines():
                if line.startswith("data: "):
                    payloads.append(json.loads(line[6:]))
                if len(payloads) == 2:
                    break
    assert payloads[0]["type"] == "history"
    assert {s["host"] for s in payloads[0]["series"]} >= {"gpu-0"}
    assert payloads[1]["type"] == "frame"
    assert payloads[1]["hosts"][0]["gpu_count"] > 0


def test_openapi_and_docs(daemon: Daemon) -> None:
    with daemon.http("reader") as client:
        document = client.get("/openapi.json").json()
        page = client.get("/docs")
        asset = client.get("/docs/static/swagger-ui-bundle.js")
    operations = document["x-sparkrun-operations"]
    assert len(operations) == 94 + len(OPERATIONS)  # the reference's, the project's (ADR 0048)
    alias = document["paths"]["/v1/setup/mesh_ssh_keys"]["post"]["x-sparkrun-operation"]
    assert alias["enabled"] is False
    assert alias["result"] == {"$ref": "#/components/schemas/setup.mesh_ssh_keysResult"}
    assert "202" in document["paths"]["/v1/cluster/create"]["post"]["responses"]
    assert {"DaemonJob", "DaemonPrompt", "DaemonInfo", "DaemonEvent", "DaemonOperationError"} <= set(
        document["components"]["schemas"]
    )
    assert page.status_code == 200
    assert "swagger-ui-bundle.js" in page.text
    assert "cdn" not in page.text.lower()
    assert asset.status_code == 200
    assert len(asset.content) > 100_000


# -- retention and the project's own client ----------------------------------------------------


def test_retention_tombstones_keyed_jobs_and_deletes_the_others(daemon: Daemon) -> None:
    import asyncio
    import datetime as dt

    from sparkrun_operator.controllers.daemonjob import JobExecutor
    from sparkrun_operator.k8s.client import DAEMON_API_MANAGER, Kube

    body = {"recipe": "qwen3-8b-vllm", "dry_run": True}
    key = "retained-" + secrets.token_hex(3)
    keyed = daemon.submit("operator", "workloads.run", body, **{"Idempotency-Key": key})
    plain = daemon.submit("operator", "workloads.run", body)
    daemon.wait_job(keyed, "operator")
    daemon.wait_job(plain, "operator")

    async def expire() -> list[tuple[str, str]]:
        rest = await Kube.connect(
            field_manager=DAEMON_API_MANAGER, kubeconfig=str(daemon.runner.testbed.kubeconfig)
        )
        try:
            later = dt.datetime.now(dt.UTC) + dt.timedelta(days=8)
            executor = JobExecutor(rest, clock=lambda: later)
            return await executor.apply_retention(daemon.namespace)
        finally:
            await rest.close()

    actions = dict(asyncio.run(expire()))
    assert actions[keyed] == "tombstone"
    assert actions[plain] == "delete"
    tombstone = daemon.job_object(keyed)
    assert tombstone["metadata"]["labels"]["sparkrun.dev/tombstone"] == "true"
    assert "result" not in tombstone["status"]
    assert not tombstone["status"].get("events")
    assert daemon.kube.get(API, "DaemonJob", plain, namespace=daemon.namespace) is None
    time.sleep(1.0)  # the shim's watch cache sees the tombstone
    with daemon.http("operator", **{"Idempotency-Key": key}) as client:
        assert client.get(f"/v1/jobs/{keyed}").status_code == 404
        again = client.post("/v1/workloads/run", json=body)
    assert again.status_code == 409
    assert again.json()["detail"] == "The previous result expired; this idempotency key cannot execute again"


def test_the_projects_python_client(daemon: Daemon) -> None:
    from sparkrun_operator.client import Client, DaemonError, JobFailed

    with Client(daemon.url, daemon.token("operator"), ca_cert=daemon.runner.ca_file) as client:
        assert client.info()["manager"] == "daemon"
        assert any(op["name"] == "workloads.run" for op in client.operations())
        assert client.call("workloads.list") == client.submit("workloads.list")
        result = client.call("workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True}, timeout=60)
        assert result["dry_run"] is True
        ack = client.submit("workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True}, key="client-1")
        assert (
            client.submit("workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True}, key="client-1")
            == ack
        )
        client.wait(ack["job_id"], timeout=60)
        events = list(client.events(ack["job_id"]))
        assert events[-1] == {"id": events[-1]["id"], "type": "state", "state": "succeeded"}
        assert [e["id"] for e in client.events(ack["job_id"], after=events[-2]["id"])] == [events[-1]["id"]]
        missing = client.submit("workloads.run", {"recipe": "no-such-recipe"})
        with pytest.raises(JobFailed) as failed:
            client.wait(missing["job_id"], timeout=60)
        assert failed.value.job["error"]["error"]["type"] == "LookupError"
        with pytest.raises(DaemonError) as refused:
            client.submit("cluster.create", {"name": "x", "hosts": ["a"]})
        assert refused.value.status == 403
        blocked = _blocked_run(daemon)
        daemon.wait_job(blocked, "operator", states={"running"})
        assert client.cancel(blocked)["state"] in ("cancelling", "cancelled")
