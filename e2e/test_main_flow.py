"""The main flow (:mod:`e2e.main_flow`) against the session's target: the local demo testbed, or
the cluster named by ``SPARKRUN_E2E_KUBECONFIG`` (``e2e/conftest.py``)."""

from __future__ import annotations

import pytest

from e2e.main_flow import apply_ready_chat_list_delete
from e2e.target import Target

pytestmark = pytest.mark.testbed  # a whole testbed (or a real cluster) behind every flow


def test_apply_ready_chat_list_delete(target: Target) -> None:
    apply_ready_chat_list_delete(target)
