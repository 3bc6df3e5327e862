"""Fixtures of the InferencePool tests: the operator process (tests/operator), the picker binary
and the Gateway API Inference Extension's CRDs on the session testbed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkrun_testbed import epp, plane
from tests.gobinary import picker
from tests.operator.conftest import netns_network, operator_factory, pytest_runtest_makereport

__all__ = ["netns_network", "operator_factory", "pytest_runtest_makereport"]


@pytest.fixture(scope="module")
def picker_binary(testbed: plane.Testbed) -> Path:
    """The picker binary, with the InferencePool CRD (v1, from the same module) installed."""
    return picker(testbed)


@pytest.fixture(scope="module")
def gateway_api_crds(testbed: plane.Testbed, picker_binary: Path) -> list[str]:
    """Gateway API's standard GatewayClass, Gateway and HTTPRoute CRDs (no implementation)."""
    docs = [yaml.safe_load(path.read_text()) for path in epp.gateway_api_crds(picker_binary)]
    return testbed.apply_crds(docs)
