"""A DaemonJob outside the daemon API's namespace fails at once, with a reason, and its
executor holds its Lease only in the operator's own namespace.

The executor's liveness Lease lives in the operator's own namespace (the release namespace,
where the chart's Role grants Leases), whatever namespace a job is in. Jobs run only in that
namespace (ADR 0021, amended): the daemon scopes mean something only there, and an operation
takes the job's namespace for the API's, so a job in a tenant's namespace would let the tenant's
own RoleBindings stand in for the daemon API's (binding a cluster role to its ServiceAccount,
editing cluster-scoped InferenceClusters). Before, such a job stayed ``pending`` for ever under
the chart's RBAC (its executor was refused a Lease there); with the Lease at home it would have
run.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.ops import leases
from sparkrun_operator.ops.jobargs import request_digest
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import start_daemon, stop_daemon

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]
API = "sparkrun.dev/v1alpha1"


def _job(name: str, namespace: str) -> dict[str, Any]:
    operation, version, arguments, manager = "workloads.list", 1, {}, "daemon"
    return {
        "apiVersion": API,
        "kind": "DaemonJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "operation": operation,
            "operationVersion": version,
            "arguments": arguments,
            # NB: a cluster admin's own job (system:masters holds every daemon scope).
            "principal": {"username": "tenant-admin", "groups": ["system:masters"]},
            "manager": manager,
            "requestDigest": request_digest(operation, version, arguments, manager),
        },
    }


def test_a_job_in_another_namespace_is_refused_and_the_lease_stays_at_home(
    testbed: Testbed, kube: KubeApi, tmp_path: Path
) -> None:
    other = "tenant-" + secrets.token_hex(4)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    daemon = start_daemon(testbed, kube, tmp_path, chart_rbac=True, extra_operator_args=("-n", other))
    try:
        kube.create(_job("elsewhere", other))

        def finished() -> dict[str, Any] | None:
            found = kube.get(API, "DaemonJob", "elsewhere", namespace=other) or {}
            status = found.get("status") or {}
            return status if status.get("state") in ("succeeded", "failed", "lost") else None

        deadline = time.monotonic() + 60
        status = None
        while status is None and time.monotonic() < deadline:
            status = finished()
            time.sleep(0.5)
        log = daemon.runner.operator.tail(400)
        assert status is not None, f"the job never finished:\n{log}"
        assert status["state"] == "failed", status
        error = status["error"]
        assert error["type"] == "PermissionError", error
        assert (error.get("details") or {}).get("reason") == "namespace_not_served", error
        assert daemon.namespace in error["message"], error
        assert "result" not in status or status["result"] is None, status
        home = kube.list_items("coordination.k8s.io/v1", "Lease", namespace=daemon.namespace)
        there = kube.list_items("coordination.k8s.io/v1", "Lease", namespace=other)
        executor = status["executor"]
        assert leases.lease_name(executor) in {lease["metadata"]["name"] for lease in home}
        assert [lease["metadata"]["name"] for lease in there] == []
        assert "forbidden" not in log.lower(), log
    finally:
        stop_daemon(daemon)
        kube.delete("v1", "Namespace", other)
