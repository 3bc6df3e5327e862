"""A copy of the chart whose InferenceWorkload CRD is tightened: ``metadata.name`` at most
:data:`TIGHT_NAME` characters instead of 35. A stored workload with a longer name is one the
new CRD would reject: what ``upgrade --check`` and the chart's pre-upgrade hook must catch
(tests/testbed/test_upgrade_check.py, e2e/test_upgrade_hook.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.deploy.chart import CHART

TIGHT_NAME = 8
WORKLOAD_CRD = Path("templates") / "crds" / "inferenceworkloads.sparkrun.dev.yaml"
_NAME_BOUND = "              name:\n                type: string\n                maxLength: 35\n"


def tightened_chart(into: Path) -> Path:
    """The chart copied under ``into`` with the workload name bound tightened; its path."""
    chart = into / "sparkrun-operator"
    shutil.copytree(CHART, chart)
    crd = chart / WORKLOAD_CRD
    text = crd.read_text()
    assert text.count(_NAME_BOUND) == 1, "the workload CRD's metadata.name bound moved"
    crd.write_text(text.replace(_NAME_BOUND, _NAME_BOUND.replace("35", str(TIGHT_NAME))))
    return chart
