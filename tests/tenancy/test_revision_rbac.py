"""ControllerRevisions in the chart's RBAC (ADR 0046, 0048): the daemon API reads a workload's
kept revisions in its own namespace only. A ControllerRevision of any StatefulSet or DaemonSet
holds its whole pod template (literal env values included), so a cluster-wide list would lend the
shim every such template of the cluster."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.deploy.chart import render, require_helm
from tests.tenancy.test_rbac_table import Facts, grants_of


@pytest.mark.parametrize("values", [{}, {"watchNamespaces": ["team-a"]}], ids=["defaults", "watched"])
def test_the_shim_lists_controllerrevisions_in_its_namespace_only(
    tmp_path: Path, values: dict[str, object]
) -> None:
    chart = render(require_helm(), tmp_path, values)
    grants = [g for g in grants_of(chart, Facts.of(values)) if g.resource == "controllerrevisions"]
    shim = [g for g in grants if g.component == "shim"]
    assert [g.verb for g in shim] == ["list"]
    assert "release-namespace" in shim[0].scopes
    assert "cluster" not in shim[0].scopes
    # NB: the operator writes them wherever workloads are: its grant is not the shim's
    assert any(g.component == "operator" and g.verb == "create" for g in grants)
