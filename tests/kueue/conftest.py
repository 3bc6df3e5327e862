"""Kueue on the session testbed (``sparkrun_testbed.kueue_run``), for the tests in this directory.

``kueue`` (module scope): starts Kueue v0.17.0 on the session testbed (its CRDs, the controller
with its webhooks, the visibility API routed through kube-apiserver) and takes all of it away
after the module's last test, so later modules on the same testbed see a cluster without Kueue.
The binary is built under CI=true when missing (``hack/kueue-bin.sh``), else the test skips;
without root, iproute2 or chroot it skips too (fails under CI=true).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from sparkrun_testbed import kueue as kueue_tool
from sparkrun_testbed import kueue_run, plane
from tests.gobinary import go_binary

IN_CI = os.environ.get("CI", "").lower() == "true"


@pytest.fixture(scope="module")
def kueue(testbed: plane.Testbed) -> Iterator[kueue_run.Kueue]:
    binary = go_binary(kueue_tool.locate, kueue_tool.build, "hack/kueue-bin.sh")
    if reason := kueue_run.unavailable(binary):
        if IN_CI:
            pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
        pytest.skip(reason)
    handle = kueue_run.start(testbed, binary)
    try:
        yield handle
    finally:
        handle.stop()
