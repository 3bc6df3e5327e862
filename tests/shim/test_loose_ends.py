"""Issue 32's loose ends, through a real shim and operator on the testbed.

- ``sparkrun-k8s shim call`` (the console script of the venv, a subprocess): a query printed as
  JSON (exit 0), a job followed to its end (exit 0, its effect in the cluster), a job that fails
  and a typed refusal (exit 1, the daemon's error envelope on stderr), arguments that are not
  JSON (exit 2, before any request).
- ``DaemonJob.status.observedGeneration``: stamped with the generation each status write saw, so
  a cancel (which raises the generation) is observed by the job's end; a ``cancel`` set on a job
  that had already finished is observed too (the executor stamps it), so GitOps health checks'
  generation rule never waits on a finished job.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.shim.conftest import API, Daemon
from tests.shim.test_daemon_api import _blocked_run

pytestmark = pytest.mark.testbed

CLI = Path(sys.executable).with_name("sparkrun-k8s")


def _cli(daemon: Daemon, who: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    """``sparkrun-k8s shim call ARGS --url .. --ca-cert ..`` as a user runs it, the token in
    ``$SPARKRUN_DAEMON_TOKEN`` (never on the command line)."""
    assert CLI.exists(), f"the venv has no sparkrun-k8s console script at {CLI}"
    command = [str(CLI), "shim", "call", *args, "--url", daemon.url]
    if not daemon.runner.plaintext:
        command += ["--ca-cert", daemon.runner.ca_file]
    env = {**os.environ, "SPARKRUN_DAEMON_TOKEN": daemon.token(who)}
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False, env=env)


def test_shim_call_query_job_failure_and_refusal(daemon: Daemon) -> None:
    # a query: its answer on stdout as JSON
    listed = _cli(daemon, "reader", "catalog.recipes")
    assert listed.returncode == 0, listed.stderr
    assert "qwen3-8b-vllm" in {r["reference"] for r in json.loads(listed.stdout)["recipes"]}

    # a job, followed to its end: the result on stdout, its effect in the cluster
    name = "call-" + secrets.token_hex(3)
    args = json.dumps({"name": name, "hosts": ["gpu-0"], "description": "from shim call"})
    created = _cli(daemon, "admin", "cluster.create", "--arg", args, "--key", "k-" + name, "--timeout", "120")
    try:
        assert created.returncode == 0, created.stderr
        assert json.loads(created.stdout)["name"] == name
        cluster = daemon.kube.get(API, "InferenceCluster", name)
        assert cluster is not None
        assert cluster["spec"]["description"] == "from shim call"
        # the same Idempotency-Key answers the same job: no second execution, the same result
        again = _cli(daemon, "admin", "cluster.create", "--arg", args, "--key", "k-" + name)
        assert again.returncode == 0, again.stderr
        assert json.loads(again.stdout) == json.loads(created.stdout)
    finally:
        daemon.kube.delete(API, "InferenceCluster", name)

    # a job that fails: exit 1, the job's typed error on stderr
    failed = _cli(daemon, "operator", "plugins.k8s.stop_jobset", "--arg", '{"name": "no-such-jobset"}')
    assert failed.returncode == 1, (failed.stdout, failed.stderr)
    error = json.loads(failed.stderr)
    assert error["error"]["type"] == "LookupError"
    assert "no-such-jobset" in error["detail"]

    # a typed refusal: 403 FeatureDisabled with its reason and the way to use instead
    refused = _cli(daemon, "admin", "tailscale.join")
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    body = json.loads(refused.stderr)
    assert body["error"]["type"] == "FeatureDisabled"
    assert body["error"]["attrs"]["reason"] == "not_applicable"
    assert body["detail"].startswith("Operation tailscale.join is disabled on Kubernetes: ")

    # a permission refusal: the reader may not create clusters
    denied = _cli(daemon, "reader", "cluster.create", "--arg", args)
    assert denied.returncode == 1
    assert json.loads(denied.stderr) == {"detail": "Insufficient permission"}

    # a job still running when --timeout passes: exit 3 naming the job, which goes on
    nowhere = "nowhere-" + secrets.token_hex(3)  # NB: its nodes do not exist: never ready
    daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "InferenceCluster",
            "metadata": {"name": nowhere},
            "spec": {"nodes": {"names": ["no-such-node"]}},
        }
    )
    run = json.dumps({"recipe": "qwen3-8b-vllm", "cluster": nowhere, "workload_id_override": nowhere})
    waited = _cli(daemon, "operator", "workloads.run", "--arg", run, "--timeout", "3")
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    assert "inspect it before retrying" in waited.stderr
    job_id = waited.stderr.split("job ", 1)[1].split(" ", 1)[0]
    assert daemon.job_object(job_id)["spec"]["operation"] == "workloads.run"
    with daemon.http("operator") as client:
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 200
    assert daemon.wait_job(job_id, "operator", timeout=60)["state"] == "cancelled"

    # arguments that are not JSON: exit 2, no request
    bad = _cli(daemon, "admin", "cluster.create", "--arg", "{not json")
    assert bad.returncode == 2
    assert bad.stderr.startswith("--arg is not JSON")


def _observed(daemon: Daemon, job_id: str) -> tuple[int, int | None]:
    obj = daemon.job_object(job_id)
    return obj["metadata"]["generation"], (obj.get("status") or {}).get("observedGeneration")


def test_observed_generation_follows_cancel_and_late_cancel(daemon: Daemon) -> None:
    # a job that ran to its end observed its only generation
    done = daemon.submit("operator", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
    assert daemon.wait_job(done, "operator")["state"] == "succeeded"
    assert _observed(daemon, done) == (1, 1)

    # cancelling a running job raises the generation; the job ends having observed it
    running = _blocked_run(daemon)
    daemon.wait_job(running, "operator", states={"running"})
    assert _observed(daemon, running) == (1, 1)
    with daemon.http("operator") as client:
        assert client.delete(f"/v1/jobs/{running}").status_code == 200
    assert daemon.wait_job(running, "operator", timeout=60)["state"] == "cancelled"
    assert _observed(daemon, running) == (2, 2)

    # a cancel set on a job that had already finished (kubectl patch, or a GitOps sync of a
    # DaemonJob manifest): the executor observes it, the job stays succeeded
    daemon.kube.request(
        "PATCH",
        f"/apis/{API}/namespaces/{daemon.namespace}/daemonjobs/{done}",
        content=json.dumps({"spec": {"cancel": True}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )

    def observed() -> dict[str, Any] | None:
        obj = daemon.job_object(done)
        status = obj.get("status") or {}
        return obj if status.get("observedGeneration") == obj["metadata"]["generation"] == 2 else None

    late = daemon.kube.wait(observed, timeout=30, what="the late cancel observed")
    assert late["status"]["state"] == "succeeded"
