"""hack/chart-values-table.py: the chart README's values table, from values.yaml's `# --` comments."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests import hack_script

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "sparkrun-operator"


def _tool() -> ModuleType:
    return hack_script.load("chart-values-table.py", "chart_values_table")


def test_the_committed_table_is_current() -> None:
    tool = _tool()
    readme = (CHART / "README.md").read_text()
    assert tool.render(readme, tool.rows(CHART / "values.yaml")) == readme


def test_rows_paths_types_and_continuations(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(
        "# -- The image.\n"
        "# Second line.\n"
        "image:\n"
        "  # -- (string) Tag; empty: appVersion.\n"
        "  tag: ''\n"
        "gateway:\n"
        "  # -- Replicas.\n"
        "  replicas: 2\n"
        "  # -- A whole map.\n"
        "  resources:\n"
        "    limits: {memory: 1Gi}\n"
    )
    rows = {r.path: r for r in _tool().rows(values)}
    assert list(rows) == ["image", "image.tag", "gateway.replicas", "gateway.resources"]
    assert rows["image"].description == "The image. Second line."
    assert (rows["image.tag"].type, rows["image.tag"].default) == ("string", '""')
    assert (rows["gateway.replicas"].type, rows["gateway.replicas"].default) == ("int", "2")
    assert rows["gateway.resources"].default == '{"limits":{"memory":"1Gi"}}'


def test_an_undocumented_key_fails(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text("gateway:\n  # -- Replicas.\n  replicas: 2\n  port: 8080\n")
    with pytest.raises(SystemExit, match=r"gateway\.port"):
        _tool().rows(values)
