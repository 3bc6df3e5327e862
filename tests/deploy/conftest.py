"""Fixtures of the deploy tests: the operator as a local process (``operator_factory`` of
tests/operator/conftest.py) for the GitOps tests, which let it reconcile what they applied; the
pinned helm (``helm_bin``) and the chart rendered with its defaults (``default``), once a module.

When a collected test needs ``hack/ssa-check`` (the ``ssa_check`` fixture of test_gitops.py) and
it is not built, it is built once after collection (``hack/ssa-check.sh``; minutes when cold),
outside the per-test timeouts. ``make test`` builds it before pytest runs.
"""

from __future__ import annotations

import sys

import pytest

from tests.deploy.chart import Rendered, render, require_helm
from tests.deploy.gitops import SsaCheckMissing, ssa_check_binary
from tests.operator.conftest import operator_factory, pytest_runtest_makereport

__all__ = ["operator_factory", "pytest_collection_finish", "pytest_runtest_makereport"]


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return require_helm()


@pytest.fixture(scope="module")
def default(helm_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Rendered:
    return render(helm_bin, tmp_path_factory.mktemp("default"))


def pytest_collection_finish(session: pytest.Session) -> None:
    if not any("ssa_check" in getattr(item, "fixturenames", ()) for item in session.items):
        return
    try:
        ssa_check_binary()
    except SsaCheckMissing as error:  # the fixture skips, or fails under CI=true
        print(f"\n[deploy] {error}", file=sys.stderr)
