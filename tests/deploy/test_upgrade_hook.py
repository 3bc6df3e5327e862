"""The chart's pre-upgrade check, rendered (issue 28, item 5): a hook Job running the new image's
``sparkrun-k8s upgrade --check`` against the chart's own CRDs from a hook ConfigMap, with a
ServiceAccount that may only get and list the seven kinds, restricted Pod Security, bounded
runtime, and a value to turn it off. ``e2e/test_upgrade_hook.py`` runs it under ``helm upgrade``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sparkrun_operator.api.resources import KINDS
from sparkrun_operator.api.upgradecheck import crds_of
from sparkrun_operator.cli.main import build_parser
from sparkrun_operator.cli.upgrade import chart_files
from tests.deploy.chart import CHART, NAMESPACE, Rendered, render

NAME = "sparkrun-upgrade-check"
#: A ConfigMap holds at most 1 MiB (data and metadata together).
CONFIGMAP_LIMIT = 1024 * 1024


def _hooked(chart: Rendered) -> list[dict[str, Any]]:
    return [
        d for d in chart.docs if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-upgrade"
    ]


def test_the_hook_runs_before_the_upgrade_and_goes_once_it_passed(default: Rendered) -> None:
    hooked = _hooked(default)
    assert sorted((d["kind"], d["metadata"]["name"]) for d in hooked) == [
        ("ClusterRole", NAME),
        ("ClusterRoleBinding", NAME),
        ("ConfigMap", NAME),
        ("Job", NAME),
        ("NetworkPolicy", NAME),
        ("ServiceAccount", NAME),
    ]
    for doc in hooked:
        annotations = doc["metadata"]["annotations"]
        policy = set(annotations["helm.sh/hook-delete-policy"].split(","))
        assert policy == {"before-hook-creation", "hook-succeeded"}, doc["kind"]
        # everything the Job needs exists before it starts
        assert int(annotations["helm.sh/hook-weight"]) == (0 if doc["kind"] == "Job" else -10)


def test_its_account_reads_the_kinds_and_nothing_else(default: Rendered) -> None:
    """It lists every stored object of each kind the operator defines (``cli/upgrade.py``
    checks them all against the new CRDs): get and list of those, nothing else."""
    role = default.get("ClusterRole", NAME)
    assert role["rules"] == [
        {
            "apiGroups": ["sparkrun.dev"],
            "resources": [
                "inferenceworkloads",
                "inferenceclusters",
                "recipes",
                "modelcaches",
                "inferencebenchmarks",
                "daemonjobs",
                "reciperegistries",
            ],
            "verbs": ["get", "list"],
        }
    ]
    binding = default.get("ClusterRoleBinding", NAME)
    assert binding["roleRef"]["name"] == NAME
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]


def test_the_job_is_restricted_bounded_and_runs_the_check(default: Rendered) -> None:
    job = default.get("Job", NAME, NAMESPACE)
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 300
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == NAME
    assert pod["restartPolicy"] == "Never"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = pod["containers"]
    context = container["securityContext"]
    assert context["readOnlyRootFilesystem"] is True
    assert context["allowPrivilegeEscalation"] is False
    assert context["privileged"] is False
    assert context["capabilities"] == {"drop": ["ALL"]}
    assert container["image"] == default.container("sparkrun-operator")["image"]
    args = build_parser(only="upgrade").parse_args(container["args"])
    assert args.check
    (mount,) = container["volumeMounts"]
    assert args.chart == mount["mountPath"]
    assert mount["readOnly"] is True
    (volume,) = pod["volumes"]
    assert volume["configMap"]["name"] == NAME
    assert volume["name"] == mount["name"]


def test_the_configmap_holds_the_charts_crds_within_the_limit(default: Rendered, tmp_path: Path) -> None:
    """The mounted files are the chart's CRDs as the chart renders them, one per kind the check
    lists (a kind without its CRD there would be a finding of every object of it), about 400 KB
    (under half of the 1 MiB a ConfigMap may hold)."""
    config_map = default.get("ConfigMap", NAME, NAMESPACE)
    size = sum(len(k) + len(v.encode()) for k, v in config_map["data"].items())
    assert size < CONFIGMAP_LIMIT // 2, size
    for key, text in config_map["data"].items():
        (tmp_path / key).write_text(text)
    mounted = crds_of(chart_files(tmp_path))
    from_chart = crds_of(chart_files(CHART))
    assert sorted(mounted) == sorted(from_chart) == sorted(k.kind for k in KINDS)
    for kind, crd in mounted.items():
        assert crd["spec"] == from_chart[kind]["spec"], kind
        assert "helm.sh/resource-policy" not in (crd["metadata"].get("annotations") or {})


def test_turned_off_or_with_crds_managed_elsewhere(helm_bin: str, tmp_path: Path) -> None:
    off = render(helm_bin, tmp_path, {"upgradeCheck": {"enabled": False}})
    assert _hooked(off) == []
    # CRDs outside the chart: the hook still checks against this version's CRDs
    outside = render(helm_bin, tmp_path, {"crds": {"install": False}})
    assert outside.of("CustomResourceDefinition") == []
    assert len(outside.get("ConfigMap", NAME, NAMESPACE)["data"]) == len(KINDS)
    no_policies = render(helm_bin, tmp_path, {"networkPolicy": {"enabled": False}})
    assert no_policies.find("NetworkPolicy", NAME, NAMESPACE) is None
    assert no_policies.find("Job", NAME, NAMESPACE) is not None


def test_an_upgrade_that_reuses_the_previous_releases_values_still_renders_the_check(
    helm_bin: str, tmp_path: Path
) -> None:
    """``helm upgrade --reuse-values`` (docs/install.md) renders the new chart with the previous
    release's values in place of the new chart's defaults: a release from before the check has
    no ``upgradeCheck``. The check runs then with its defaults (as if the value were there)."""
    reused = render(helm_bin, tmp_path, {"upgradeCheck": None})
    job = reused.get("Job", NAME, NAMESPACE)
    assert job["spec"]["activeDeadlineSeconds"] == 300
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert container["resources"]["limits"]["memory"] == "512Mi"
    assert (
        container["resources"]
        == render(helm_bin, tmp_path).get("Job", NAME, NAMESPACE)["spec"]["template"]["spec"]["containers"][
            0
        ]["resources"]
    )
