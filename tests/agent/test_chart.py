"""The chart's GPU agent (``gpuAgent``): off by default; on, a DaemonSet whose command the product
parses, the contract's labels and port, hostPID and nothing else widened, get+patch nodes only."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api.telemetry import AGENT_COMPONENT, AGENT_DEFAULT_PORT, AGENT_PORT_NAME
from sparkrun_operator.cli.main import build_parser
from tests.deploy.chart import CHART, NAMESPACE, Rendered, helm, render, require_helm

NAME = "sparkrun-gpu-agent"


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return require_helm()


def _pod(chart: Rendered) -> dict[str, Any]:
    spec: dict[str, Any] = chart.get("DaemonSet", NAME, NAMESPACE)["spec"]["template"]["spec"]
    return spec


def test_off_by_default(helm_bin: str, tmp_path: Path) -> None:
    chart = render(helm_bin, tmp_path)
    assert not [
        d
        for d in chart.docs
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == AGENT_COMPONENT
    ]


def test_the_daemonset(helm_bin: str, tmp_path: Path) -> None:
    chart = render(helm_bin, tmp_path, {"gpuAgent": {"enabled": True, "runtimeClassName": "nvidia"}})
    daemonset = chart.get("DaemonSet", NAME, NAMESPACE)
    labels = daemonset["spec"]["template"]["metadata"]["labels"]
    assert labels["app.kubernetes.io/component"] == AGENT_COMPONENT
    assert labels["app.kubernetes.io/name"] == "sparkrun-operator"
    pod = _pod(chart)
    assert pod["hostPID"] is True
    assert pod["runtimeClassName"] == "nvidia"
    assert "hostNetwork" not in pod
    assert "volumes" not in pod
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["securityContext"]["privileged"] is False
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert "nvidia.com/gpu" not in str(container["resources"]), "the agent takes no GPU"
    assert container["ports"] == [
        {"name": AGENT_PORT_NAME, "containerPort": AGENT_DEFAULT_PORT, "protocol": "TCP"}
    ]
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": AGENT_PORT_NAME}
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    args = build_parser(only="agent").parse_args(container["args"])
    assert (args.command, args.port, args.interval, args.no_labels) == (
        "agent",
        AGENT_DEFAULT_PORT,
        5.0,
        False,
    )
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert [t["matchExpressions"][0]["key"] for t in terms] == [
        "nvidia.com/gpu.present",
        "feature.node.kubernetes.io/pci-10de.present",
    ]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["automountServiceAccountToken"] is True
    role = chart.get("ClusterRole", NAME)
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]
    binding = chart.get("ClusterRoleBinding", NAME)
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": NAME, "namespace": NAMESPACE}]
    assert not chart.find("PodMonitor", NAME)


def test_without_node_labels_no_rights_and_no_token(helm_bin: str, tmp_path: Path) -> None:
    chart = render(
        helm_bin, tmp_path, {"gpuAgent": {"enabled": True, "nodeLabels": False, "visibleDevices": ""}}
    )
    pod = _pod(chart)
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    assert "--no-labels" in container["args"]
    assert "--process-names" not in container["args"]  # NB: off by default
    assert "NVIDIA_VISIBLE_DEVICES" not in {e["name"] for e in container["env"]}
    assert not chart.find("ClusterRole", NAME)
    assert not chart.find("ClusterRoleBinding", NAME)


def test_network_policy_and_pod_monitor(helm_bin: str, tmp_path: Path) -> None:
    prometheus = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}
    values = {
        "gpuAgent": {"enabled": True, "podMonitor": {"enabled": True, "labels": {"release": "kps"}}},
        "networkPolicy": {"metricsFrom": [prometheus]},
    }
    chart = render(helm_bin, tmp_path, values)
    policy = chart.get("NetworkPolicy", NAME, NAMESPACE)
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"port": AGENT_PORT_NAME, "protocol": "TCP"}]
    shim = rule["from"][0]["podSelector"]["matchLabels"]
    assert shim["app.kubernetes.io/component"] == "shim"
    assert rule["from"][1] == prometheus
    monitor = chart.get("PodMonitor", NAME, NAMESPACE)
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == AGENT_PORT_NAME
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == AGENT_COMPONENT
    open_policy = render(helm_bin, tmp_path, {"gpuAgent": {"enabled": True}}).get(
        "NetworkPolicy", NAME, NAMESPACE
    )
    assert "from" not in open_policy["spec"]["ingress"][0], (
        "metricsFrom empty: anyone, as other metrics ports"
    )


def test_lint_and_bad_values(helm_bin: str, tmp_path: Path) -> None:
    values = tmp_path / "agent.yaml"
    values.write_text("gpuAgent: {enabled: true, podMonitor: {enabled: true}}\n")
    lint = helm(helm_bin, "lint", "--strict", str(CHART), "--values", str(values), check=False)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    bad = helm(helm_bin, "template", "x", str(CHART), "--set", "gpuAgent.port=0", check=False)
    assert bad.returncode != 0
    assert "gpuAgent" in bad.stderr


def test_no_workload_may_borrow_the_agents_account(helm_bin: str, tmp_path: Path) -> None:
    chart = render(helm_bin, tmp_path, {"tenancy": {"serviceAccounts": {"*": ["*"]}}})
    policy = chart.get("ValidatingAdmissionPolicy", "sparkrun-workload-pod")
    own = [v["expression"] for v in policy["spec"]["variables"] if NAME in v["expression"]]
    assert own, "the agent's ServiceAccount is one of the release's own, never lent to an engine"


def test_process_names_are_a_value(helm_bin: str, tmp_path: Path) -> None:
    chart = render(helm_bin, tmp_path, {"gpuAgent": {"enabled": True, "processNames": True}})
    (container,) = _pod(chart)["containers"]
    assert "--process-names" in container["args"]
