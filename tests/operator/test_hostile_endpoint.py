"""A hostile endpoint's error bodies on the testbed (issue 23): bounded, and never a forged report.

``huggingface_hub`` puts a server's error body into its exception text. A server on the process
nodes' ``InternalIP`` (the host address pods reach, as in ``test_credential_endpoints.py``) stands
in for a caller's or a tenant's own endpoint and answers every request with a body it chose:

- ``model_cache.resolve`` (read scope) with ``endpoint`` at it, answering ``500`` with 3 MB: the
  job fails with a bounded error (it was 3 MB, in the DaemonJob's status);
- the same with ``500`` and a body holding a line ``{"event": "manifest", ...}``: the job fails
  (it succeeded with the forged manifest as its result: the downloader printed the body raw on
  stderr, and the operator took the log's last JSON line for the tool's report);
- a ModelCache whose ``source.huggingFace.endpoint`` is it, answering ``404`` ``EntryNotFound``
  with 3 MB: the cache turns ``Failed`` with bounded conditions (``set_condition`` raised on the
  3 MB message, so the status froze and every pass repeated).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.canned import Answer, CannedServer
from tests.conftest import Require
from tests.operator.conftest import condition
from tests.operator.test_modelcache import CLASS, MOUNT, ON_PROCESS_NODES, _node_ip, host_volume
from tests.process.helpers import network_mode
from tests.shim.conftest import API, Daemon, start_daemon, stop_daemon

MB3 = b"A" * 3_000_000
FORGED = {
    "event": "manifest",
    "manifest": {
        "repo": "org/model",
        "revision": "f" * 40,
        "endpoint": "",
        "selection": "auto",
        "files": [{"path": "config.json", "size": 2, "checksum_algorithm": "git-sha1", "checksum": "0" * 40}],
        "weight_path": None,
        "projector_path": None,
        "weight_files": [],
        "provenance": "origin",
        "schema_version": 1,
        "selection_version": 1,
    },
}
#: A job error and a condition message stay within these (``api/clip.py``: 4 KiB per message).
MESSAGE_MAX = 4096


@pytest.fixture(scope="module")
def hostile(testbed: Testbed, crds: list[str], kube: KubeApi) -> Iterator[CannedServer]:
    Require()(
        network_mode(testbed.run_dir) == "netns",
        "process-node pods run with loopback addresses here (no privilege for network namespaces)",
    )
    with CannedServer(_node_ip(kube)) as server:
        yield server


@pytest.fixture(scope="module")
def daemon(
    testbed: Testbed, kube: KubeApi, hostile: CannedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    workdir = tmp_path_factory.mktemp("hostile")
    args = ("--cache-mount-path", MOUNT, "--cache-tool-scheduling", json.dumps(ON_PROCESS_NODES))
    found = start_daemon(testbed, kube, workdir, extra_operator_args=args)
    try:
        yield found
    except BaseException:
        print(found.runner.logs())
        raise
    finally:
        stop_daemon(found)


def _resolve(daemon: Daemon, hostile: CannedServer, answer: Answer) -> dict[str, Any]:
    # NB: Retry-After 0: the downloader's retries are quick
    hostile.answer = Answer(answer.status, answer.body, {"Retry-After": "0", **answer.headers})
    before = hostile.count()
    job_id = daemon.submit("reader", "model_cache.resolve", {"model": "org/model", "endpoint": hostile.url})
    job: dict[str, Any] = daemon.wait_job(job_id, "reader", timeout=180)
    assert hostile.count() > before, "the tool Job never reached the hostile server"
    return job


def test_a_huge_error_body_fails_resolve_with_a_bounded_error(daemon: Daemon, hostile: CannedServer) -> None:
    job = _resolve(daemon, hostile, Answer(500, MB3))
    assert job["state"] == "failed", json.dumps(job)[:2000]
    error = job["error"]
    assert len(error["detail"]) <= MESSAGE_MAX, len(error["detail"])
    assert error["error"]["type"] == "HostsUnreachable", json.dumps(job)[:2000]
    assert "is unavailable for org/model" in error["detail"]


def test_an_error_body_cannot_forge_the_resolved_manifest(daemon: Daemon, hostile: CannedServer) -> None:
    line = json.dumps(FORGED).encode()
    job = _resolve(daemon, hostile, Answer(500, b"oops\n" + line + b"\n" + line + b"\n" + line))
    assert job["state"] == "failed", json.dumps(job)[:2000]
    assert job.get("result") is None
    assert job["error"]["error"]["type"] == "HostsUnreachable", json.dumps(job)[:2000]


def test_a_huge_error_body_fails_a_modelcache_with_bounded_conditions(
    daemon: Daemon, hostile: CannedServer, kube: KubeApi, tmp_path: Path
) -> None:
    hostile.answer = Answer(404, MB3, {"Retry-After": "0", "X-Error-Code": "EntryNotFound"})
    namespace = daemon.namespace
    pv = host_volume(kube, tmp_path / "pv", namespace, "hostile")
    try:
        kube.apply(
            {
                "apiVersion": API,
                "kind": "ModelCache",
                "metadata": {"name": "hostile", "namespace": namespace},
                "spec": {
                    "source": {
                        "huggingFace": {"repo": "org/model", "revision": "main", "endpoint": hostile.url}
                    },
                    "storage": {
                        "create": {"size": "1Gi", "storageClassName": CLASS, "accessModes": ["ReadWriteOnce"]}
                    },
                    "download": ON_PROCESS_NODES,
                },
            }
        )
        last: list[Any] = [None]

        def failed() -> dict[str, Any] | None:
            last[0] = kube.get(API, "ModelCache", "hostile", namespace=namespace)
            return last[0] if ((last[0] or {}).get("status") or {}).get("phase") == "Failed" else None

        try:
            cache = kube.wait(failed, timeout=180, what="ModelCache hostile Failed")
        except Exception as error:
            status = json.dumps((last[0] or {}).get("status"))
            raise AssertionError(f"{error}; last status: {status[:2000]}") from error
        ready = condition(cache, "Ready")
        assert ready is not None
        assert ready["reason"] == "EntryNotFound", ready
        assert len(ready["message"]) <= MESSAGE_MAX + 512, len(ready["message"])
        assert len(cache["status"]["message"]) <= MESSAGE_MAX
        assert "is not served" in ready["message"]
    finally:
        kube.delete(API, "ModelCache", "hostile", namespace=namespace)
        kube.delete("v1", "PersistentVolume", pv)
