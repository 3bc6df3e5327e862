"""Fixtures for the daemon API tests on the testbed.

- ``daemon`` (module): a :class:`Daemon`: a prepared namespace (roles, ServiceAccounts, tokens,
  the example Recipe) with ``sparkrun-k8s shim serve`` and ``sparkrun-k8s operator run`` running
  against the testbed; its logs are printed when a test of the module fails.
- ``ref_python`` (session): the reference sparkrun interpreter (``tests/reference.py``).
"""

from __future__ import annotations

import secrets
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.reference import reference_python
from tests.shim.chart_rbac import ChartRbac, apply_chart_rbac
from tests.shim.harness import DaemonEnv, ShimRunner

REPO = Path(__file__).resolve().parents[2]
API = "sparkrun.dev/v1alpha1"
TERMINAL = {"succeeded", "failed", "cancelled", "lost"}


@dataclass
class Daemon:
    """A running shim + operator and the principals that may call it."""

    env: DaemonEnv
    runner: ShimRunner
    kube: KubeApi
    #: The chart's RBAC the shim and the operator run with (``start_daemon(chart_rbac=True)``).
    rbac: ChartRbac | None = None

    @property
    def namespace(self) -> str:
        return self.env.namespace

    @property
    def url(self) -> str:
        return self.runner.url

    def http(self, who: str | None = None, **headers: str) -> httpx.Client:
        all_headers = dict(headers)
        if who is not None:
            all_headers["Authorization"] = "Bearer " + self.env.tokens[who]
        verify: Any = (
            False if self.runner.plaintext else ssl.create_default_context(cafile=self.runner.ca_file)
        )
        return httpx.Client(base_url=self.url, verify=verify, headers=all_headers, timeout=30)

    def token(self, who: str) -> str:
        return self.env.tokens[who]

    def wait_job(
        self, job_id: str, who: str = "admin", *, timeout: float = 120, states: set[str] = TERMINAL
    ) -> Any:
        """Poll ``GET /v1/jobs/{id}`` until the job reaches one of ``states``."""
        deadline = time.monotonic() + timeout
        with self.http(who) as client:
            while True:
                job = client.get(f"/v1/jobs/{job_id}").json()
                if job.get("state") in states:
                    return job
                if time.monotonic() > deadline:
                    raise AssertionError(f"job {job_id} still {job.get('state')} after {timeout} s: {job}")
                time.sleep(0.2)

    def submit(self, who: str, name: str, arguments: dict[str, Any], **headers: str) -> str:
        answer = self.post_op(who, name, arguments, **headers)
        assert answer.status_code == 202, answer.text
        job_id: str = answer.json()["job_id"]
        return job_id

    def post_op(self, who: str, name: str, arguments: dict[str, Any], **headers: str) -> httpx.Response:
        with self.http(who, **headers) as client:
            return client.post(f"/v1/ops/{name}", json=arguments)

    def refused_at_submission(self, who: str, name: str, arguments: dict[str, Any]) -> str:
        """``POST /v1/ops/{name}`` answers 422 (the daemon's ValueError envelope) and no
        DaemonJob is created; the refusal's detail."""
        before = len(self.kube.list_items(API, "DaemonJob", namespace=self.namespace))
        answer = self.post_op(who, name, arguments)
        assert answer.status_code == 422, answer.text
        body = answer.json()
        assert body["error"] == {"type": "ValueError", "retryable": False, "attrs": {}}, body
        assert len(self.kube.list_items(API, "DaemonJob", namespace=self.namespace)) == before
        detail: str = body["detail"]
        return detail

    def job_object(self, job_id: str) -> dict[str, Any]:
        found = self.kube.get(API, "DaemonJob", job_id, namespace=self.namespace)
        assert found is not None
        return found


def start_daemon(
    testbed: Testbed, kube: KubeApi, workdir: Path, *, chart_rbac: bool = False, **kwargs: Any
) -> Daemon:
    """A shim and an operator serving a new namespace; with ``chart_rbac`` both authenticate as
    their ServiceAccounts with exactly the chart's RBAC (``tests/shim/chart_rbac.py``) instead of
    as the testbed admin."""
    env = DaemonEnv(kube, "shim-" + secrets.token_hex(4)).setup()
    rbac = apply_chart_rbac(testbed, kube, env.namespace, workdir) if chart_rbac else None
    if rbac is not None:
        kwargs["kubeconfigs"] = rbac.kubeconfigs
    recipe = yaml.safe_load((REPO / "examples" / "recipe.yaml").read_text())
    recipe["metadata"]["namespace"] = env.namespace
    deadline = time.monotonic() + 30
    while True:  # NB: discovery can lag behind the CRD becoming Established
        try:
            kube.create(recipe)
            break
        except KeyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)
    runner = ShimRunner(testbed, env.namespace, workdir, **kwargs)
    try:
        runner.start()
    except BaseException:
        runner.stop()
        env.teardown()
        if rbac is not None:
            rbac.teardown()
        raise
    return Daemon(env=env, runner=runner, kube=kube, rbac=rbac)


def stop_daemon(daemon: Daemon) -> None:
    daemon.runner.stop()
    daemon.env.teardown()
    if daemon.rbac is not None:
        daemon.rbac.teardown()


@pytest.fixture(scope="module")
def daemon(
    request: pytest.FixtureRequest,
    testbed: Testbed,
    crds: list[str],
    kube: KubeApi,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Daemon]:
    # NB: a module that sets CHART_RBAC = True gets a shim and operator with the chart's RBAC; one
    # that sets EXECUTOR = False gets no operator until it starts one (tests/shim/test_if_match.py).
    chart_rbac = bool(getattr(request.module, "CHART_RBAC", False))
    extra = {} if getattr(request.module, "EXECUTOR", True) else {"executor": False}
    running = start_daemon(testbed, kube, tmp_path_factory.mktemp("shim"), chart_rbac=chart_rbac, **extra)
    failed_before = request.session.testsfailed
    yield running
    if request.session.testsfailed > failed_before:
        print(running.runner.logs())
    stop_daemon(running)


@pytest.fixture(scope="session")
def ref_python() -> str:
    return reference_python()
