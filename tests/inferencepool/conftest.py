"""Fixtures of the InferencePool tests: the operator process (tests/operator), the picker binary
and the Gateway API Inference Extension's CRDs on the session testbed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from sparkrun_testbed import epp, plane
from sparkrun_testbed.binaries import BinariesMissing
from tests.operator.conftest import netns_network, operator_factory, pytest_runtest_makereport

__all__ = ["netns_network", "operator_factory", "pytest_runtest_makereport"]

IN_CI = os.environ.get("CI", "").lower() == "true"
REPO = Path(__file__).resolve().parents[2]


def _binary() -> Path:
    """The reference picker (hack/epp-bin.sh): built under CI=true when missing, else a skip."""
    try:
        path: Path | None = epp.locate(REPO)
        why = f"{path} is not built (hack/epp-bin.sh)"
    except BinariesMissing as exc:
        path, why = None, str(exc)
    if path is not None and os.access(path, os.X_OK):
        return path
    if not IN_CI:
        pytest.skip(why)
    try:
        return epp.build(REPO)
    except Exception as exc:  # any failure to build fails the test under CI
        pytest.fail(f"prerequisite missing under CI=true: {why}; the build failed: {exc}", pytrace=False)


@pytest.fixture(scope="module")
def picker_binary(testbed: plane.Testbed) -> Path:
    """The picker binary, with the InferencePool CRD (v1, from the same module) installed."""
    binary = _binary()
    crd = yaml.safe_load(epp.inferencepool_crd(binary).read_text())
    assert testbed.apply_crds([crd]) == ["inferencepools.inference.networking.k8s.io"]
    return binary


@pytest.fixture(scope="module")
def gateway_api_crds(testbed: plane.Testbed, picker_binary: Path) -> list[str]:
    """Gateway API's standard GatewayClass, Gateway and HTTPRoute CRDs (no implementation)."""
    docs = [yaml.safe_load(path.read_text()) for path in epp.gateway_api_crds(picker_binary)]
    return testbed.apply_crds(docs)
