"""The chart refuses typos (values.schema.json, validated by the real `helm`), ships
PodDisruptionBudgets for the operator and the shim, and passes the tools image to the operator.

Each refusal must name the key in Helm's own message; every values file the repository ships
must pass; the budgets are rendered (and, on the testbed, accepted by a real apiserver) with the
Deployments' selectors; `--tools-image` is parsed with the product's own argument parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.cli.main import build_parser
from sparkrun_operator.render.modelcache import DEFAULT_TOOLS_IMAGE
from tests.deploy.chart import CHART, NAMESPACE, REPO, Rendered, helm, render

DIGEST = "sha256:" + "0123456789abcdef" * 4
VALUES_FILES = [
    REPO / "hack" / "manifests-values.yaml",
    REPO / "hack" / "testbed-values.yaml",
    REPO / "hack" / "checkov-values.yaml",
    *sorted((REPO / "examples" / "helm").glob("*.yaml")),
]


def test_the_chart_ships_its_schema() -> None:
    assert (CHART / "values.schema.json").is_file(), "make generate writes it (hack/chart-values-schema.py)"


@pytest.mark.parametrize(
    ("setting", "named"),
    [
        (["--set", "noSuchValue=1"], ["at '': additional properties 'noSuchValue' not allowed"]),
        (
            ["--set", "operator.replicass=2"],
            ["at '/operator': additional properties 'replicass' not allowed"],
        ),
        (["--set", "shim.tls.existingSecrett=x"], ["at '/shim/tls'", "'existingSecrett' not allowed"]),
        (["--set", "operator.replicas=two"], ["at '/operator/replicas'", "want integer"]),
        (["--set-string", "crds.install=yes"], ["at '/crds/install'", "want boolean"]),
        (["--set", "gateway.auth.mode=oidc"], ["at '/gateway/auth/mode'", "'kubernetes'"]),
        (["--set", "gateway.podAntiAffinity=sometimes"], ["at '/gateway/podAntiAffinity'", "'soft'"]),
        (["--set", "podSecurity.enforce=strict"], ["at '/podSecurity/enforce'", "'restricted'"]),
        (["--set", "image.digest=latest"], ["at '/image/digest'", "does not match pattern"]),
        (["--set", "toolsImage.digest=sha256:abc"], ["at '/toolsImage/digest'", "does not match pattern"]),
        (["--set", "shim.podDisruptionBudget.maxUnavailable=half"], ["at '/shim/podDisruptionBudget/"]),
        (["--set", "operator.metricsPort=70000"], ["at '/operator/metricsPort'"]),
    ],
)
def test_helm_refuses_a_bad_value_naming_the_key(helm_bin: str, setting: list[str], named: list[str]) -> None:
    template = helm(helm_bin, "template", "sparkrun", str(CHART), "-n", NAMESPACE, *setting, check=False)
    assert template.returncode != 0, f"{setting} was accepted"
    assert "values don't meet the specifications of the schema" in template.stderr
    for part in named:
        assert part in template.stderr, template.stderr
    lint = helm(helm_bin, "lint", "--strict", str(CHART), *setting, check=False)
    assert lint.returncode != 0
    assert all(part in lint.stdout + lint.stderr for part in named), lint.stdout


@pytest.mark.parametrize("values", [None, *VALUES_FILES], ids=lambda v: v.name if v else "defaults")
def test_every_shipped_values_file_passes(helm_bin: str, values: Path | None) -> None:
    extra = ["--values", str(values)] if values else []
    lint = helm(helm_bin, "lint", "--strict", str(CHART), *extra, check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    template = helm(helm_bin, "template", "sparkrun", str(CHART), "-n", NAMESPACE, *extra, check=False)
    assert template.returncode == 0, template.stderr


def test_open_maps_take_any_key(helm_bin: str, tmp_path: Path) -> None:
    values = {
        "commonLabels": {"team": "platform"},
        "operator": {"nodeSelector": {"pool": "cpu"}, "resources": {"limits": {"cpu": "2"}}},
        "shim": {"podDisruptionBudget": {"maxUnavailable": "50%"}},
    }
    rendered = render(helm_bin, tmp_path, values)
    budget = rendered.get("PodDisruptionBudget", "sparkrun-shim")
    assert budget["spec"]["maxUnavailable"] == "50%"
    assert budget["metadata"]["labels"]["team"] == "platform"


def _budget_selects_its_deployment(rendered: Rendered, component: str) -> dict[str, Any]:
    budget = rendered.get("PodDisruptionBudget", f"sparkrun-{component}", NAMESPACE)
    deployment = rendered.get("Deployment", f"sparkrun-{component}")
    assert budget["spec"]["selector"] == deployment["spec"]["selector"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert budget["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    return budget


def test_operator_and_shim_budgets_never_block_a_drain(default: Rendered) -> None:
    for component in ("operator", "shim"):
        spec = _budget_selects_its_deployment(default, component)["spec"]
        assert spec["maxUnavailable"] == 1
        assert "minAvailable" not in spec
        assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


@pytest.mark.parametrize(
    ("values", "left"),
    [
        ({"operator": {"replicas": 1}}, "sparkrun-shim"),
        ({"shim": {"replicas": 1}}, "sparkrun-operator"),
        ({"shim": {"enabled": False}}, "sparkrun-operator"),
        ({"operator": {"podDisruptionBudget": {"enabled": False}}}, "sparkrun-shim"),
        ({"shim": {"podDisruptionBudget": {"enabled": False}}}, "sparkrun-operator"),
    ],
)
def test_one_replica_or_off_renders_no_budget(
    helm_bin: str, tmp_path: Path, values: dict[str, Any], left: str
) -> None:
    rendered = render(helm_bin, tmp_path, values)
    names = {d["metadata"]["name"] for d in rendered.of("PodDisruptionBudget")}
    assert names == {left, "sparkrun-gateway"}


def _tools_image(rendered: Rendered) -> str:
    args = rendered.container("sparkrun-operator")["args"]
    image: str = build_parser().parse_args(args).tools_image
    return image


def test_the_tools_image_reaches_the_operator(default: Rendered, helm_bin: str, tmp_path: Path) -> None:
    assert _tools_image(default) == DEFAULT_TOOLS_IMAGE, "the chart's default is the product's"
    tagged = render(helm_bin, tmp_path, {"toolsImage": {"repository": "registry.local/tools", "tag": "7"}})
    assert _tools_image(tagged) == "registry.local/tools:7"
    pinned = {"toolsImage": {"repository": "registry.local/tools", "tag": "7", "digest": DIGEST}}
    assert _tools_image(render(helm_bin, tmp_path, pinned)) == f"registry.local/tools@{DIGEST}"


def test_values_without_a_tools_image_keep_the_operators_default(helm_bin: str, tmp_path: Path) -> None:
    """`helm upgrade --reuse-values` from a release older than `toolsImage` has no such key."""
    rendered = render(helm_bin, tmp_path, None, "--set", "toolsImage=null")
    args = rendered.container("sparkrun-operator")["args"]
    assert not [arg for arg in args if arg.startswith("--tools-image")]
    assert build_parser().parse_args(args).tools_image == DEFAULT_TOOLS_IMAGE


def test_the_apiserver_accepts_the_budgets(
    helm_bin: str, tmp_path: Path, kubectl: Any, namespace: str
) -> None:
    out = helm(
        helm_bin, "template", "sparkrun", str(CHART), "-n", namespace,
        "--show-only", "templates/operator/disruption-budget.yaml",
        "--show-only", "templates/shim/disruption-budget.yaml",
    ).stdout  # fmt: skip
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == ["PodDisruptionBudget", "PodDisruptionBudget"]
    manifest = tmp_path / "budgets.yaml"
    manifest.write_text(out)
    applied = kubectl("apply", "--server-side", "--dry-run=server", "--validate=strict", "-f", str(manifest))
    assert applied.stdout.count("serverside-applied (server dry run)") == 2, applied.stdout
