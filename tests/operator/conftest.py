"""Fixtures for operator integration tests: the real operator process against the testbed.

- ``operator_factory(namespace, *extra_args)`` starts ``sparkrun-k8s operator run`` as a child
  process (standalone, serving one namespace) with the testbed's kubeconfig and returns an
  :class:`OperatorProcess`; every process is killed at the end of the test and its log is
  printed when the test failed. It runs with ``--inference-pools off`` unless ``extra_args``
  say otherwise (``"--inference-pools", "auto"``: a test of InferencePools opts in), so that what
  an operator does never depends on whether an earlier test installed the InferencePool CRD.
- ``peering_crds`` (session) installs ``manifests/kopf-peering.yaml`` for HA tests.
- helpers: :func:`workload` (a manifest), :func:`condition`, :func:`wait_condition`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi, load_manifests

REPO = Path(__file__).resolve().parents[2]
API = "sparkrun.dev/v1alpha1"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"


class OperatorProcess:
    """One ``sparkrun-k8s operator run`` child process."""

    def __init__(self, args: list[str], *, env: dict[str, str], log: Path) -> None:
        self.args = args
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        handle = self.log.open("ab")
        self.proc = subprocess.Popen(
            self.args, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
        )
        handle.close()
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        """SIGKILL: no graceful shutdown, as when a node dies."""
        if self.alive():
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self, timeout: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        return 0

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@pytest.fixture
def operator_factory(
    testbed: plane.Testbed, crds: list[str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., OperatorProcess]]:
    started: list[OperatorProcess] = []
    env = {**os.environ, "KUBECONFIG": str(testbed.kubeconfig), "PYTHONUNBUFFERED": "1"}

    def start(namespace: str | None, *extra: str, standalone: bool = True) -> OperatorProcess:
        args = [
            sys.executable,
            "-m",
            "sparkrun_operator.cli.main",
            "operator",
            "run",
            "--drift-seconds",
            "60",
        ]
        if namespace is not None:
            args += ["-n", namespace]
        if standalone:
            args.append("--standalone")
        if not any(arg.startswith("--inference-pools") for arg in extra):
            # NB: off unless the test asks: once any test installs the InferencePool CRD on the
            # session testbed, the default (auto) would make every later operator manage pools
            args += ["--inference-pools", "off"]
        args += list(extra)
        proc = OperatorProcess(args, env=env, log=tmp_path / f"operator-{len(started)}.log").start()
        started.append(proc)
        return proc

    yield start
    failed = getattr(request.node, "rep_call", None)
    for proc in started:
        proc.stop()
        if failed is not None and failed.failed:
            print(f"--- operator log {proc.log} ---\n{proc.output()[-20000:]}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    setattr(item, f"rep_{report.when}", report)
    return report


@pytest.fixture(scope="session")
def peering_crds(kube: KubeApi) -> None:
    for doc in load_manifests(REPO / "manifests" / "kopf-peering.yaml"):
        kube.apply(doc)
    # NB: what kopf reads at start: both kinds in the group's discovery (a 404 is "not yet")
    kube.wait(
        lambda: (
            {"kopfpeerings", "clusterkopfpeerings"}
            <= {r["name"] for r in kube.get_json("/apis/kopf.dev/v1")["resources"]}
        ),
        timeout=30,
        what="the peering CRDs served (discovery)",
    )


def workload(name: str, namespace: str, **spec: Any) -> dict[str, Any]:
    """An InferenceWorkload manifest (model Qwen/Qwen3-0.6B unless ``spec`` says otherwise)."""
    body: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}}
    body.update(spec)
    body = {key: value for key, value in body.items() if value is not None}  # model=None: no model
    return {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": body,
    }


def condition(obj: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    if obj is None:
        return None
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return None


def get_workload(kube: KubeApi, namespace: str, name: str) -> dict[str, Any] | None:
    return kube.get(API, "InferenceWorkload", name, namespace=namespace)


def wait_condition(
    kube: KubeApi,
    namespace: str,
    name: str,
    type_: str,
    status: str = "True",
    *,
    reason: str | None = None,
    timeout: float = 60.0,
    extra: Callable[[dict[str, Any]], bool] | None = None,
) -> dict[str, Any]:
    """Wait until the workload's condition ``type_`` has ``status`` (and ``reason``); the object."""

    def probe() -> dict[str, Any] | None:
        obj = get_workload(kube, namespace, name)
        cond = condition(obj, type_)
        if obj is None or cond is None or cond.get("status") != status:
            return None
        if reason is not None and cond.get("reason") != reason:
            return None
        if (obj.get("status") or {}).get("observedGeneration") != obj["metadata"].get("generation"):
            return None
        if extra is not None and not extra(obj):
            return None
        return obj

    return kube.wait(probe, timeout=timeout, what=f"{namespace}/{name} {type_}={status} {reason or ''}")


def jobsets(kube: KubeApi, namespace: str, name: str) -> list[dict[str, Any]]:
    """The workload's JobSets, sorted by name."""
    items = kube.list_items(
        JOBSET_API, "JobSet", namespace=namespace, label_selector=f"sparkrun.dev/workload={name}"
    )
    return sorted(items, key=lambda js: js["metadata"]["name"])


@pytest.fixture
def netns_network(testbed: plane.Testbed, require: Any) -> None:
    """Pods on process nodes with their own addresses (the operator and tests reach them)."""
    from tests.process.helpers import network_mode

    require(
        network_mode(testbed.run_dir) == "netns",
        "process-node pods run with loopback addresses here (no privilege for network namespaces)",
    )
