"""Whole flows, on the local testbed or on any cluster given ``KUBECONFIG``.

Target selection:

- ``SPARKRUN_E2E_KUBECONFIG`` set: a cluster where sparkrun-operator is installed (the operator,
  the daemon API and the gateway); also set ``SPARKRUN_E2E_GATEWAY_URL``,
  ``SPARKRUN_E2E_DAEMON_URL``, ``SPARKRUN_E2E_TOKEN`` (a bearer token with the daemon API's
  ``operate`` scope), optionally ``SPARKRUN_E2E_DAEMON_CA`` (PEM file),
  ``SPARKRUN_E2E_NAMESPACE`` (default ``default``; the namespace the daemon API serves),
  ``SPARKRUN_E2E_IMAGE`` (an engine image the cluster can pull) and, where the gateway is reached
  through kube-apiserver or needs a key, ``SPARKRUN_E2E_GATEWAY_TOKEN`` and
  ``SPARKRUN_E2E_GATEWAY_CA`` (PEM file).
- otherwise the local testbed: ``sparkrun-k8s demo`` runs once for the session (its own
  testbed ``e2e`` in a temporary directory; the chart installed there, its components as pods,
  reached through kube-apiserver), the flows run against what it started, and it is
  stopped afterwards (the local Hub of its ModelCache step too: the fixture checks that it no
  longer answers). Its output is kept for ``test_demo.py``.

Without the testbed binaries the local target fails under ``CI=true`` and skips elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.target import Target, admin_token

IN_CI = os.environ.get("CI", "").lower() == "true"
DEMO_TIMEOUT = 840


def _remote() -> Target | None:
    kubeconfig = os.environ.get("SPARKRUN_E2E_KUBECONFIG")
    if not kubeconfig:
        return None
    missing = [
        name
        for name in ("SPARKRUN_E2E_GATEWAY_URL", "SPARKRUN_E2E_DAEMON_URL", "SPARKRUN_E2E_TOKEN")
        if not os.environ.get(name)
    ]
    if missing:
        pytest.fail(f"SPARKRUN_E2E_KUBECONFIG is set: also set {', '.join(missing)}")
    return Target(
        kubeconfig=Path(kubeconfig),
        gateway_url=os.environ["SPARKRUN_E2E_GATEWAY_URL"].rstrip("/"),
        daemon_url=os.environ["SPARKRUN_E2E_DAEMON_URL"].rstrip("/"),
        daemon_ca=os.environ.get("SPARKRUN_E2E_DAEMON_CA"),
        token=os.environ["SPARKRUN_E2E_TOKEN"],
        namespace=os.environ.get("SPARKRUN_E2E_NAMESPACE", "default"),
        image=os.environ.get("SPARKRUN_E2E_IMAGE"),
        gateway_token=os.environ.get("SPARKRUN_E2E_GATEWAY_TOKEN"),
        gateway_ca=os.environ.get("SPARKRUN_E2E_GATEWAY_CA"),
    )


def _require_binaries() -> None:
    from sparkrun_testbed import binaries

    try:
        missing = binaries.locate().missing()
    except binaries.BinariesMissing as error:
        missing = [str(error)]
    if missing:
        reason = f"testbed binaries missing: {missing} (make testbed-bin)"
        if IN_CI:
            pytest.fail(reason)
        pytest.skip(reason)


@pytest.fixture(scope="session")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    remote = _remote()
    if remote is not None:
        yield remote
        return
    _require_binaries()
    from sparkrun_testbed import plane

    run_root = tmp_path_factory.mktemp("e2e") / "run"
    run_dir = run_root / "e2e"
    argv = [sys.executable, "-m", "sparkrun_operator.cli.main", "demo", "--run-root", str(run_root),
            "--name", "e2e", "--timeout", "420"]  # fmt: skip
    try:
        result = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            timeout=DEMO_TIMEOUT,
            env={**os.environ, "COLUMNS": "160"},
            check=False,
        )
        output = result.stdout + result.stderr
        endpoints_file = run_dir / "endpoints.json"
        if result.returncode != 0 or not endpoints_file.exists():
            pytest.fail(f"sparkrun-k8s demo failed (exit {result.returncode}):\n{output[-6000:]}")
        endpoints = json.loads(endpoints_file.read_text())
        kubeconfig = Path(endpoints["kubeconfig"])
        behind_apiserver = bool(endpoints.get("gateway_token_from_kubeconfig"))
        yield Target(
            kubeconfig=kubeconfig,
            gateway_url=endpoints["gateway_url"],
            gateway_token=admin_token(kubeconfig) if behind_apiserver else None,
            gateway_ca=endpoints.get("gateway_ca"),
            daemon_url=endpoints["daemon_url"],
            daemon_ca=endpoints["daemon_ca"],
            token=admin_token(kubeconfig),
            namespace=endpoints["namespace"],
            demo_output=output,
            demo_returncode=result.returncode,
            run_dir=run_dir,
        )
    finally:
        testbed = plane.Testbed.attach(run_dir)
        if testbed is not None:
            testbed.stop()
            assert not testbed.running(), "processes of the e2e testbed are still running after stop"
        _assert_hub_stopped(run_dir / "endpoints.json")


def _assert_hub_stopped(endpoints_file: Path) -> None:
    """The demo's local Hub is one of the testbed's daemons: gone once the testbed is stopped."""
    import httpx

    if not endpoints_file.exists():
        return
    hub = json.loads(endpoints_file.read_text()).get("hub_url")
    if not hub:
        return
    try:
        httpx.get(f"{hub}/api/models", timeout=2.0)
    except httpx.HTTPError:
        return
    raise AssertionError(f"the demo's local Hub still answers on {hub} after the testbed stopped")
