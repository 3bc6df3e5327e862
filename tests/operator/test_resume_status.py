"""A replica that resumes after a pause never writes a status from indexes its pause left stale.

kopf holds handlers back until every index has its first listing, but only once per process:
a replica paused by a peer of higher priority stops watching, and when it resumes its daemons
start at once while the watches list again. What was created during the pause is not in its
indexes yet, so its first pass saw a Ready workload with no JobSet and wrote
``Ready=False, "0 of 1 replicas Ready; no pods yet"`` (issue 32: the e2e helm upgrade, where a
rolling update resumes paused replicas). Here: replica ``low`` works, ``high`` takes over,
workloads are created and get Ready while ``low`` is paused, then ``high`` stops and ``low``
resumes. Every status write of the workloads is watched from before the handover: Ready stays
True in each, and ``low`` is the one working afterwards.
"""

from __future__ import annotations

import base64
import json
import ssl
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import yaml

from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from tests.operator.conftest import API, OperatorProcess, condition, wait_condition, workload
from tests.operator.test_ha import _replica, _wait_log, _writes

Factory = Callable[..., OperatorProcess]
WORKLOADS = 6


def _client(kubeconfig: Path) -> httpx.Client:
    config = yaml.safe_load(kubeconfig.read_text())
    context = next(c["context"] for c in config["contexts"] if c["name"] == config["current-context"])
    cluster = next(c["cluster"] for c in config["clusters"] if c["name"] == context["cluster"])
    user = next(u["user"] for u in config["users"] if u["name"] == context["user"])
    verify = ssl.create_default_context(
        cadata=base64.b64decode(cluster["certificate-authority-data"]).decode()
    )
    return httpx.Client(
        base_url=cluster["server"],
        verify=verify,
        headers={"Authorization": f"Bearer {user['token']}"},
        timeout=httpx.Timeout(10, read=None),
    )


class StatusWatch:
    """Every version of the namespace's workloads from ``version`` on (a watch stream)."""

    def __init__(self, kubeconfig: Path, namespace: str, version: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self._http = _client(kubeconfig)
        self._path = f"/apis/{API}/namespaces/{namespace}/inferenceworkloads"
        self._version = version
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        params = {"watch": "1", "resourceVersion": self._version, "timeoutSeconds": "300"}
        try:
            with self._http.stream("GET", self._path, params=params) as response:
                for line in response.iter_lines():
                    if self._stop.is_set():
                        return
                    if line:
                        self.seen.append(json.loads(line))
        except httpx.HTTPError:
            if not self._stop.is_set():
                raise

    def stop(self) -> None:
        self._stop.set()
        self._http.close()
        self._thread.join(timeout=10)


def test_a_resumed_replica_keeps_ready_workloads_ready(
    testbed: plane.Testbed, kube: KubeApi, namespace: str, operator_factory: Factory, peering_crds: None
) -> None:
    low, low_metrics, _ = _replica(operator_factory, namespace, priority=100)
    _wait_log(low, "Resuming operations")
    high, _, _ = _replica(operator_factory, namespace, priority=200)
    _wait_log(high, "Resuming operations")
    _wait_log(low, "Pausing operations")
    names = [f"r{i}" for i in range(WORKLOADS)]
    for name in names:
        kube.apply(workload(name, namespace))
    for name in names:
        wait_condition(kube, namespace, name, "Ready", timeout=120)
    # NB: from the list's resourceVersion: every write after it is seen, none before
    listed = kube.get_json(f"/apis/{API}/namespaces/{namespace}/inferenceworkloads")
    watch = StatusWatch(testbed.kubeconfig, namespace, listed["metadata"]["resourceVersion"])
    try:
        before = _writes(low_metrics)
        high.stop()  # graceful: it leaves the peering, and low resumes at once
        _wait_log(low, "Resuming operations after the pause")
        # NB: low's daemons start on the resume and plan every workload from its indexes
        time.sleep(5.0)
    finally:
        watch.stop()
    flips = [
        (event["object"]["metadata"]["name"], cond)
        for event in watch.seen
        if (cond := condition(event.get("object"), "Ready")) is not None and cond.get("status") != "True"
    ]
    assert not flips, flips
    for name in names:
        assert (condition(kube.get(API, "InferenceWorkload", name, namespace=namespace), "Ready") or {}).get(
            "status"
        ) == "True"
    print(
        f"workload versions seen across the resume: {len(watch.seen)}; low's writes since: "
        f"{_writes(low_metrics) - before:.0f}"
    )
