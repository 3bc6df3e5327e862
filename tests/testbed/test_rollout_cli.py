"""``sparkrun-k8s rollout history|undo|apply|unpin`` against the testbed's real kube-apiserver.

The installed console script runs as a subprocess with the testbed's kubeconfig; ``-o json`` is
parsed. The namespace has no operator: the test writes what the operator would (the workload's
ControllerRevisions, owned by it, and its status through the status subresource), so every
answer is the CLI's and the ops layer's alone. Each test has a workload of its own (their order
never matters). Beside the workload's two revisions it holds ControllerRevisions the operator
would not serve (read as the planner reads them): one with the workload's label but no owner,
one owned with data that is not a ServingRevision, one whose frozen inputs do not read back;
none is listed nor a rollback target.

Tested: history lists the kept revisions oldest first with the current one marked, the pin and
the pending drift (text and JSON); a missing workload is exit 4; ``undo`` pins the previous
revision by default, writing as field manager ``sparkrun-k8s``; a revision not kept is exit 4;
``apply`` with a stale hash is exit 5 and changes nothing, with the pending hash it approves it
and removes the pin; ``undo`` and ``unpin`` remove ``spec.rollout.approve`` in the same write
(a rollback forgets earlier approvals); ``unpin`` when not pinned writes nothing; ``apply
--cluster`` approves an InferenceCluster's drift and one without drift is exit 5; a write from
a stale read is the refusal (the JSON patch tests ``metadata.generation``), not a lost write,
while status and label writes since the read do not refuse it.
"""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops import rollout
from sparkrun_operator.ops.errors import Conflict
from sparkrun_testbed.kubeapi import KubeApi
from tests.corpus import VALID
from tests.unit.plan.test_history import IMAGE_A, _image, _world

pytestmark = pytest.mark.testbed

API = "sparkrun.dev/v1alpha1"
SCRIPT = Path(sys.executable).parent / "sparkrun-k8s"
PENDING = "abcdef0123"
HASHES = {1: "0123456789", 2: "1111111111"}
SINCE = "2026-12-06T12:00:00Z"
NODES = {"nodes": {"selector": {"matchLabels": {"sparkrun.dev/pool": "rollout-cli"}}}}
#: A ServingRevision the planner made: its frozen inputs read back, so the operator would serve it.
SERVED: dict[str, Any] = _world(_image(IMAGE_A))[0].revisions[0]["data"]


def _revision(name: str, number: int, owner: dict[str, Any] | None, data: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"{name}-{number}",
        "labels": {"sparkrun.dev/workload": name, "sparkrun.dev/revision": str(data.get("hash", "x"))},
        "annotations": {"sparkrun.dev/served-from": f"2026-12-0{number}T10:00:00Z"},
    }
    if owner is not None:
        meta["ownerReferences"] = [owner]
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": meta,
        "revision": number,
        "data": data,
    }


def _data(number: int, cause: str) -> dict[str, Any]:
    return {
        **SERVED,
        "hash": HASHES[number],
        "cause": cause,
        "changes": [{"field": "engine.image", "source": "workload", "before": '"a"', "after": '"b"'}]
        if number == 2
        else [],
    }


@pytest.fixture(scope="module")
def stored(kube: KubeApi, crds: list[str]) -> Iterator[str]:
    """A namespace for the tests' workloads, and a drifted cluster beside a calm one."""
    namespace = f"t-rollout-cli-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        _clusters(kube)
        yield namespace
    finally:
        kube.delete(API, "InferenceCluster", "rollout-cli-pool")
        kube.delete(API, "InferenceCluster", "rollout-cli-calm")
        kube.delete("v1", "Namespace", namespace)


@pytest.fixture
def name(kube: KubeApi, stored: str) -> str:
    """A workload of this test's own (tests never share one, so their order never matters) with
    two revisions and a pending drift, beside ControllerRevisions the operator would not serve."""
    name = f"roll-{secrets.token_hex(3)}"
    _store(kube, stored, name)
    return name


def _store(kube: KubeApi, namespace: str, name: str) -> None:
    workload = copy.deepcopy(next(d for d in VALID if d["kind"] == "InferenceWorkload"))
    workload["metadata"] = {"name": name}
    workload["spec"]["rollout"] = {"apply": "OnRequest"}
    made = kube.apply(workload, namespace=namespace)
    owner = {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "name": name,
        "uid": made["metadata"]["uid"],
        "controller": True,
    }
    kube.create(_revision(name, 1, owner, _data(1, "Created")), namespace=namespace)
    kube.create(_revision(name, 2, owner, _data(2, "SpecChanged")), namespace=namespace)
    kube.create(_revision(name, 9, None, _data(1, "Created")), namespace=namespace)  # not owned
    kube.create(
        _revision(name, 8, owner, {"kind": "Something"}), namespace=namespace
    )  # not a ServingRevision
    unreadable = {**_data(1, "Created"), "inputs": {"spec": {"image": 7}}}  # its inputs do not read back
    kube.create(_revision(name, 7, owner, unreadable), namespace=namespace)
    ref = {"number": 2, "hash": HASHES[2], "name": f"{name}-2"}
    status = {
        "history": {
            "current": ref,
            "previous": {"number": 1, "hash": HASHES[1], "name": f"{name}-1"},
            "kept": 2,
        },
        "drift": {"reason": "OnRequest", "revision": PENDING, "since": SINCE, "changes": []},
    }
    path = kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name) + "/status"
    kube.request(
        "PATCH",
        path,
        content=json.dumps({"status": status}),
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _clusters(kube: KubeApi) -> None:
    cluster = {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": "rollout-cli-pool"},
        "spec": NODES,
    }
    kube.apply(cluster)
    calm = {
        "apiVersion": API,
        "kind": "InferenceCluster",
        "metadata": {"name": "rollout-cli-calm"},
        "spec": NODES,
    }
    kube.apply(calm)
    drift = {
        "revision": PENDING,
        "since": SINCE,
        "items": [{"field": "gpuResource", "applied": "a", "desired": "b"}],
    }
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceCluster", name="rollout-cli-pool") + "/status",
        content=json.dumps({"status": {"drift": drift}}),
        headers={"Content-Type": "application/merge-patch+json"},
    )


def _cli(kubeconfig: Path, namespace: str, *args: str) -> subprocess.CompletedProcess[str]:
    argv = [str(SCRIPT), "rollout", *args, "--kubeconfig", str(kubeconfig), "-n", namespace]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def _json(done: subprocess.CompletedProcess[str]) -> Any:
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def _workload(kube: KubeApi, namespace: str, name: str) -> dict[str, Any]:
    found = kube.get(API, "InferenceWorkload", name, namespace=namespace)
    assert found is not None
    return found


def test_history_lists_the_kept_revisions(kubeconfig: Path, stored: str, name: str) -> None:
    data = _json(_cli(kubeconfig, stored, "history", name, "-o", "json"))
    # 7 (inputs that do not read back), 8 (not a ServingRevision), 9 (not owned): not served, not listed
    assert [(r["number"], r["hash"], r["current"]) for r in data["revisions"]] == [
        (1, HASHES[1], False),
        (2, HASHES[2], True),
    ]
    assert data["revisions"][1]["changes"][0]["field"] == "engine.image"
    assert data["revisions"][0]["served_from"] == "2026-12-01T10:00:00Z"
    assert (data["apply"], data["drift"]["revision"], data["history"]["previous"]["number"]) == (
        "OnRequest",
        PENDING,
        1,
    )
    text = _cli(kubeconfig, stored, "history", name)
    assert text.returncode == 0, text.stderr
    current = next(line for line in text.stdout.splitlines() if HASHES[2] in line)
    assert current.lstrip().startswith("*")
    assert f"drift pending: {PENDING}" in text.stdout
    missing = _cli(kubeconfig, stored, "history", "no-such-workload")
    assert missing.returncode == 4
    assert missing.stderr.startswith("error: InferenceWorkload no-such-workload not found")


def test_undo_apply_and_unpin(kubeconfig: Path, stored: str, name: str, kube: KubeApi) -> None:
    for number in ("7", "8", "9"):  # inputs that do not read back, not a revision, not owned
        assert _cli(kubeconfig, stored, "undo", name, "--to-revision", number).returncode == 4, number
    assert "revision" not in _workload(kube, stored, name)["spec"]["rollout"]
    undone = _json(_cli(kubeconfig, stored, "undo", name, "-o", "json"))
    assert (undone["revision"], undone["changed"]) == (1, True)
    workload = _workload(kube, stored, name)
    assert workload["spec"]["rollout"]["revision"] == 1
    managers = {m["manager"] for m in workload["metadata"]["managedFields"] if "f:rollout" in json.dumps(m)}
    assert "sparkrun-k8s" in managers
    again = _json(_cli(kubeconfig, stored, "undo", name, "--to-revision", "1", "-o", "json"))
    assert again["changed"] is False

    stale = _cli(kubeconfig, stored, "apply", name, "--revision", "0000000000")
    assert stale.returncode == 5
    assert PENDING in stale.stderr
    assert "approve" not in _workload(kube, stored, name)["spec"]["rollout"]
    applied = _json(_cli(kubeconfig, stored, "apply", name, "--revision", PENDING, "-o", "json"))
    assert (applied["approved"], applied["unpinned"], applied["changed"]) == (PENDING, 1, True)
    rollout_spec = _workload(kube, stored, name)["spec"]["rollout"]
    assert rollout_spec["approve"] == PENDING
    assert "revision" not in rollout_spec

    # a rollback forgets earlier approvals: the pin and the approve's removal are one write
    _json(_cli(kubeconfig, stored, "undo", name, "--to-revision", "1", "-o", "json"))
    rollout_spec = _workload(kube, stored, name)["spec"]["rollout"]
    assert (rollout_spec.get("revision"), rollout_spec.get("approve")) == (1, None)
    unpinned = _json(_cli(kubeconfig, stored, "unpin", name, "-o", "json"))
    assert (unpinned["before"], unpinned["changed"]) == (1, True)
    assert "revision" not in _workload(kube, stored, name)["spec"]["rollout"]
    # unpin when not pinned writes nothing
    unpinned = _json(_cli(kubeconfig, stored, "unpin", name, "-o", "json"))
    assert unpinned["changed"] is False
    assert "revision" not in unpinned


def test_apply_cluster_drift(kubeconfig: Path, stored: str, kube: KubeApi) -> None:
    done = _json(_cli(kubeconfig, stored, "apply", "rollout-cli-pool", "--cluster", "-o", "json"))
    assert (done["cluster"], done["approved"], done["items"][0]["field"]) == (
        "rollout-cli-pool",
        PENDING,
        "gpuResource",
    )
    cluster = kube.get(API, "InferenceCluster", "rollout-cli-pool")
    assert cluster is not None
    assert cluster["spec"]["approve"] == PENDING
    calm = _cli(kubeconfig, stored, "apply", "rollout-cli-calm", "--cluster")
    assert calm.returncode == 5
    assert "no pending drift" in calm.stderr
    assert _cli(kubeconfig, stored, "apply", "no-such-pool", "--cluster").returncode == 4


async def test_a_write_from_a_stale_read_is_refused(
    kubeconfig: Path, stored: str, name: str, kube: KubeApi
) -> None:
    """A status or label write since the read does not refuse the write; a spec change does."""
    path = kube.resource_path(API, "InferenceWorkload", namespace=stored, name=name)
    rest = await Kube.connect(field_manager="test-rollout", kubeconfig=str(kubeconfig))
    try:
        read = await rollout.find_workload(rest, stored, name)
        kube.request(
            "PATCH",
            path + "/status",
            content=json.dumps({"status": {"restarts": 3}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        kube.request(
            "PATCH",
            path,
            content=json.dumps({"metadata": {"labels": {"touched": "yes"}}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        done = await rollout.rollback(rest, read, revision=2)
        assert done.changed
        assert _workload(kube, stored, name)["spec"]["rollout"]["revision"] == 2
        read = await rollout.find_workload(rest, stored, name)
        kube.request(
            "PATCH",
            path,
            content=json.dumps({"spec": {"replicas": 2}}),
            headers={"Content-Type": "application/merge-patch+json"},
        )
        with pytest.raises(Conflict) as refused:
            await rollout.rollback(rest, read, revision=1)
        assert refused.value.attrs["reason"] == "changed"
    finally:
        await rest.close()
    assert _workload(kube, stored, name)["spec"]["rollout"]["revision"] == 2
