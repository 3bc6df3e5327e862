"""Engines are reachable only by who needs them (issue 26, part 4; docs/security.md, "Network
policies").

The testbed enforces no NetworkPolicy, so the policies are *evaluated*: ``hack/netpol-eval``
runs the per-connection verdict of SIG Network's reference implementation
(sigs.k8s.io/kube-network-policies, built by ``hack/netpol-eval.sh``) over namespaces, pods and
policies given as objects. The pods carry the labels the product's renderers give them (engine
leader and worker, benchmark runner) or the chart's Deployments (gateway, operator, shim).

- The matrix: every source below against an engine of the workload ``chat-np`` (its model is
  another name) in the namespace ``serving``, with the policies of the chart (default values,
  with an administrator's peers, with the deprecated values) plus the operator's policy for that
  workload, rendered from the ``--engine-network-policy`` the chart gives the operator.
- The operator-rendered policy's golden file, the flag's parsing, and the planner (applied when
  missing or changed, not again when current).
- On the testbed's real apiserver: the operator creates the policy for a workload, owned by it;
  the object read back is evaluated against the workload's real pods; it goes with the workload.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.workload import plan
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import benchmark, inferencepool, keys, networkpolicy
from sparkrun_operator.render.workload import ServingInputs, render_jobset
from sparkrun_testbed.kubeapi import KubeApi
from tests.deploy.chart import NAMESPACE, Rendered, render, require_helm
from tests.gobinary import go_tool
from tests.operator.conftest import API, OperatorProcess, operator_factory, wait_condition, workload
from tests.unit.plan.served_obs import observation

__all__ = ["operator_factory"]  # the fixture, for the testbed test

GOLDEN = Path(__file__).resolve().parent / "golden"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
SERVING, OTHER, MONITORING = "serving", "other-team", "monitoring"
#: The platform's Gateway API implementation (an Inference-Extension-conformant gateway's proxies).
PLATFORM_GATEWAY = "gateway-system"
GATEWAY_FROM = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": PLATFORM_GATEWAY}}}]
WORKLOAD, OTHER_WORKLOAD = "chat-np", "summaries"
ENGINE_PORT, RENDEZVOUS = 8000, 29501
#: An administrator's peer: Prometheus in ``monitoring``, on the engine port.
PROMETHEUS_RULE = {
    "from": [
        {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING}},
            "podSelector": {"matchLabels": {"app.kubernetes.io/name": "prometheus"}},
        }
    ],
    "ports": [{"port": ENGINE_PORT, "protocol": "TCP"}],
}


# -- the evaluator ----------------------------------------------------------------------------


@pytest.fixture(scope="session")
def netpol_eval() -> Path:
    """``hack/netpol-eval``: built by ``hack/netpol-eval.sh`` when missing (Go needed)."""
    return go_tool("netpol-eval")


class World:
    """Namespaces and pods (labels, an IP each) that connections are asked about."""

    def __init__(self) -> None:
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.pods: dict[str, dict[str, Any]] = {}

    def pod(self, key: str, namespace: str, labels: dict[str, str]) -> str:
        """Pod ``key`` in ``namespace`` with ``labels``; its ``namespace/name``."""
        if namespace not in self.namespaces:
            labels_ns = {"kubernetes.io/metadata.name": namespace}
            self.namespaces[namespace] = {"metadata": {"name": namespace, "labels": labels_ns}}
        ip = f"10.0.{len(self.pods) // 250}.{len(self.pods) % 250 + 1}"
        self.pods[f"{namespace}/{key}"] = {
            "metadata": {"name": key, "namespace": namespace, "labels": dict(labels)},
            "spec": {"nodeName": "node-a"},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
        }
        return f"{namespace}/{key}"

    def allowed(
        self, binary: Path, policies: list[dict[str, Any]], queries: list[tuple[str, str, int, str]]
    ) -> list[bool]:
        doc = {
            "namespaces": list(self.namespaces.values()),
            "pods": list(self.pods.values()),
            "policies": policies,
            "queries": [{"from": s, "to": d, "port": p, "protocol": proto} for s, d, p, proto in queries],
        }
        done = subprocess.run(
            [str(binary)], input=json.dumps(doc), capture_output=True, text=True, check=False, timeout=60
        )
        assert done.returncode == 0, done.stderr
        verdicts: list[bool] = json.loads(done.stdout)["allowed"]
        assert len(verdicts) == len(queries)
        return verdicts


# -- pods as the product renders them ------------------------------------------------------------


def engine_templates(name: str, model: str) -> dict[str, dict[str, Any]]:
    """Leader and worker pod templates of a two-node workload ``name`` serving ``model``."""
    spec = InferenceWorkloadSpec.model_validate(
        {
            "model": {"name": model, "servedName": "qwen-chat"},
            "topology": {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
        }
    )
    resolution = resolve(workload=spec, recipe=None)
    assert resolution.spec is not None, resolution.issues
    inputs = ServingInputs(spec=resolution.spec, scheduling=spec.scheduling)
    js = render_jobset(namespace=SERVING, workload=name, inputs=inputs, replica=0, suspend=False)
    return {rj["name"]: rj["template"]["spec"]["template"] for rj in js["spec"]["replicatedJobs"]}


def runner_labels(namespace: str) -> dict[str, str]:
    spec = InferenceBenchmarkSpec.model_validate(
        {"target": {"workloadRef": {"name": WORKLOAD}}, "scenarios": [{"name": "one", "requests": 4}]}
    )
    owner = benchmark.BenchmarkOwner(name="latency", namespace=namespace, uid="u1")
    job = benchmark.render_job(
        owner,
        spec=spec,
        scenario=spec.scenarios[0],
        attempt=0,
        target=benchmark.Target(base_url=f"http://{WORKLOAD}.{namespace}.svc:8000", model="qwen-chat"),
        options=benchmark.BenchOptions(),
        deadline_seconds=60,
    )
    labels: dict[str, str] = job["spec"]["template"]["metadata"]["labels"]
    return labels


def pod_labels(chart: Rendered, kind: str, name: str) -> dict[str, str]:
    obj = chart.get(kind, name)
    template = obj["spec"]["template"] if kind != "Pod" else obj
    labels: dict[str, str] = template["metadata"]["labels"]
    return labels


#: Every source of the matrix: (key, whether it may reach the engine port by default).
SOURCES = {
    "gateway": True,
    "operator": True,
    "shim": True,
    "benchmark-runner": True,
    "same-workload-worker": True,
    "other-workload-engine": False,
    "random-pod": False,
    "other-namespace-pod": False,
    "other-namespace-runner": False,
    "other-namespace-same-name-engine": False,
    "prometheus": False,
    "release-namespace-non-component": False,
    "helm-test-pod": False,
    # issue 30: the workload's own managed endpoint picker scrapes its engines; no other picker
    "own-endpoint-picker": True,
    "other-workload-endpoint-picker": False,
    "other-namespace-endpoint-picker": False,
    # the platform's gateway only with inferencePool.gatewayFrom
    "platform-gateway": False,
}


def picker_pod_labels(namespace: str, workload: str) -> dict[str, str]:
    """The labels of a managed endpoint picker's pods, as the operator renders them."""
    objects = inferencepool.render_picker(
        namespace=namespace, workload=workload, spec=None, settings=inferencepool.PickerSettings()
    )
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    labels: dict[str, str] = deployment["spec"]["template"]["metadata"]["labels"]
    return labels


def world(chart: Rendered) -> tuple[World, dict[str, str], str]:
    """The world, each source's ``namespace/name``, and the target engine (the leader)."""
    w = World()
    engine = engine_templates(WORKLOAD, "Qwen/Qwen3-0.6B")
    other_engine = engine_templates(OTHER_WORKLOAD, "Qwen/Qwen3-0.6B")
    target = w.pod("chat-np-leader", SERVING, engine["leader"]["metadata"]["labels"])
    test_pod = next(p for p in chart.of("Pod") if "test" in p["metadata"]["name"])
    src = {
        "gateway": w.pod("gw", NAMESPACE, pod_labels(chart, "Deployment", "sparkrun-gateway")),
        "operator": w.pod("op", NAMESPACE, pod_labels(chart, "Deployment", "sparkrun-operator")),
        "shim": w.pod("shim", NAMESPACE, pod_labels(chart, "Deployment", "sparkrun-shim")),
        "benchmark-runner": w.pod("runner", SERVING, runner_labels(SERVING)),
        "same-workload-worker": w.pod("chat-np-worker", SERVING, engine["worker"]["metadata"]["labels"]),
        "other-workload-engine": w.pod("summaries", SERVING, other_engine["leader"]["metadata"]["labels"]),
        "random-pod": w.pod("curl", SERVING, {"app": "curl"}),
        "other-namespace-pod": w.pod("curl", OTHER, {"app": "curl"}),
        "other-namespace-runner": w.pod("runner", OTHER, runner_labels(OTHER)),
        "other-namespace-same-name-engine": w.pod("twin", OTHER, engine["worker"]["metadata"]["labels"]),
        "prometheus": w.pod("prom", MONITORING, {"app.kubernetes.io/name": "prometheus"}),
        "release-namespace-non-component": w.pod("debug", NAMESPACE, {"app": "debug"}),
        "helm-test-pod": w.pod("helm-test", NAMESPACE, test_pod["metadata"]["labels"]),
        "own-endpoint-picker": w.pod("chat-np-epp", SERVING, picker_pod_labels(SERVING, WORKLOAD)),
        "other-workload-endpoint-picker": w.pod(
            "summaries-epp", SERVING, picker_pod_labels(SERVING, OTHER_WORKLOAD)
        ),
        "other-namespace-endpoint-picker": w.pod("chat-np-epp", OTHER, picker_pod_labels(OTHER, WORKLOAD)),
        "platform-gateway": w.pod("envoy", PLATFORM_GATEWAY, {"app": "envoy"}),
    }
    return w, src, target


def engine_flag(chart: Rendered) -> networkpolicy.EnginePolicy | None:
    """What the chart passes to the operator as ``--engine-network-policy``, parsed."""
    args = chart.container("sparkrun-operator")["args"]
    found = [a.split("=", 1)[1] for a in args if a.startswith("--engine-network-policy=")]
    return networkpolicy.parse(json.loads(found[0])) if found else None


def policies_for(chart: Rendered) -> list[dict[str, Any]]:
    """The chart's NetworkPolicies and the operator's for ``WORKLOAD`` and ``OTHER_WORKLOAD``."""
    flag = engine_flag(chart)
    assert flag is not None, "the chart enables the engines' policies by default"
    made = [
        networkpolicy.render_engine_policy(namespace=SERVING, workload=name, policy=flag)
        for name in (WORKLOAD, OTHER_WORKLOAD)
    ]
    return [*chart.of("NetworkPolicy"), *made]


def matrix(binary: Path, chart: Rendered) -> dict[str, bool]:
    w, src, target = world(chart)
    queries = [(src[key], target, ENGINE_PORT, "TCP") for key in SOURCES]
    return dict(zip(SOURCES, w.allowed(binary, policies_for(chart), queries), strict=True))


@pytest.fixture(scope="module")
def helm_bin() -> str:
    return require_helm()


# -- the matrix -----------------------------------------------------------------------------------


def test_default_values_let_in_exactly_who_needs_the_engine(
    netpol_eval: Path, helm_bin: str, tmp_path: Path
) -> None:
    chart = render(helm_bin, tmp_path)
    assert not [p for p in chart.of("NetworkPolicy") if p["metadata"].get("namespace") == SERVING]
    assert matrix(netpol_eval, chart) == SOURCES


def test_without_any_policy_everyone_gets_in(netpol_eval: Path, helm_bin: str, tmp_path: Path) -> None:
    """The control: the same world with no policy at all allows every source."""
    chart = render(helm_bin, tmp_path, {"networkPolicy": {"enabled": False}})
    assert chart.of("NetworkPolicy") == []
    assert engine_flag(chart) is None
    w, src, target = world(chart)
    assert all(w.allowed(netpol_eval, [], [(s, target, ENGINE_PORT, "TCP") for s in src.values()]))


def test_administrator_peers_are_let_in_and_nobody_else(
    netpol_eval: Path, helm_bin: str, tmp_path: Path
) -> None:
    chart = render(helm_bin, tmp_path, {"networkPolicy": {"engines": {"extraIngress": [PROMETHEUS_RULE]}}})
    assert matrix(netpol_eval, chart) == {**SOURCES, "prometheus": True}
    deprecated = render(helm_bin, tmp_path, {"networkPolicy": {"engineExtraIngress": [PROMETHEUS_RULE]}})
    assert matrix(netpol_eval, deprecated) == {**SOURCES, "prometheus": True}


def test_the_platform_gateway_is_let_in_on_the_engine_port_only(
    netpol_eval: Path, helm_bin: str, tmp_path: Path
) -> None:
    """``inferencePool.gatewayFrom``: the platform gateway's proxies reach the engine port (they
    forward to the pod the picker chose), not the ranks' ports; the picker not those either."""
    chart = render(helm_bin, tmp_path, {"inferencePool": {"gatewayFrom": GATEWAY_FROM}})
    assert matrix(netpol_eval, chart) == {**SOURCES, "platform-gateway": True}
    w, src, target = world(chart)
    queries = [
        (src["platform-gateway"], target, RENDEZVOUS, "TCP"),
        (src["own-endpoint-picker"], target, RENDEZVOUS, "TCP"),
    ]
    assert w.allowed(netpol_eval, policies_for(chart), queries) == [False, False]


def test_ports_ranks_and_disabled_components(netpol_eval: Path, helm_bin: str, tmp_path: Path) -> None:
    """Ranks of the workload reach every port (rendezvous, NCCL); the components and runners
    only the engine port; a disabled gateway is not let in; Prometheus only on its port."""
    values = {
        "gateway": {"enabled": False},
        "networkPolicy": {"engines": {"extraIngress": [PROMETHEUS_RULE]}},
    }
    chart = render(helm_bin, tmp_path, values)
    w, src, target = world(render(helm_bin, tmp_path))
    queries = {
        "worker rendezvous": (src["same-workload-worker"], target, RENDEZVOUS, "TCP"),
        "worker udp": (src["same-workload-worker"], target, 40001, "UDP"),
        "gateway rendezvous": (src["gateway"], target, RENDEZVOUS, "TCP"),
        "runner rendezvous": (src["benchmark-runner"], target, RENDEZVOUS, "TCP"),
        "other engine rendezvous": (src["other-workload-engine"], target, RENDEZVOUS, "TCP"),
        "prometheus other port": (src["prometheus"], target, 9000, "TCP"),
        "gateway disabled": (src["gateway"], target, ENGINE_PORT, "TCP"),
        "operator": (src["operator"], target, ENGINE_PORT, "TCP"),
    }
    verdicts = dict(
        zip(queries, w.allowed(netpol_eval, policies_for(chart), list(queries.values())), strict=True)
    )
    assert verdicts == {
        "worker rendezvous": True,
        "worker udp": True,
        "gateway rendezvous": False,
        "runner rendezvous": False,
        "other engine rendezvous": False,
        "prometheus other port": False,
        "gateway disabled": False,
        "operator": True,
    }


def test_restricted_egress(netpol_eval: Path, helm_bin: str, tmp_path: Path) -> None:
    """With ``engines.restrictEgress``: DNS, the workload's own pods and the CIDRs on the ports;
    not another workload's engine, nor the gateway."""
    chart = render(helm_bin, tmp_path, {"networkPolicy": {"engines": {"restrictEgress": True}}})
    w, src, target = world(chart)
    dns = w.pod("coredns", "kube-system", {"k8s-app": "kube-dns"})
    queries = {
        "dns": (target, dns, 53, "UDP"),
        "own worker, any port": (target, src["same-workload-worker"], RENDEZVOUS, "TCP"),
        "a hub on 443": (target, src["other-namespace-pod"], 443, "TCP"),
        "a hub on 80": (target, src["other-namespace-pod"], 80, "TCP"),
        "another engine": (target, src["other-workload-engine"], ENGINE_PORT, "TCP"),
        "the gateway": (target, src["gateway"], 8080, "TCP"),
    }
    verdicts = dict(
        zip(queries, w.allowed(netpol_eval, policies_for(chart), list(queries.values())), strict=True)
    )
    assert verdicts == {
        "dns": True,
        "own worker, any port": True,
        "a hub on 443": True,
        "a hub on 80": False,
        "another engine": False,
        "the gateway": False,
    }


def test_the_old_namespace_wide_policy_is_gone_and_its_values_are_deprecated(
    helm_bin: str, tmp_path: Path
) -> None:
    values = {"networkPolicy": {"workloadNamespaces": [SERVING], "engineRestrictEgress": True}}
    chart = render(helm_bin, tmp_path, values)
    assert chart.find("NetworkPolicy", "sparkrun-engines") is None
    flag = engine_flag(chart)
    assert flag is not None
    assert flag.egress is not None
    assert flag.egress.ports == (443,)
    assert engine_flag(render(helm_bin, tmp_path, {"networkPolicy": {"engines": {"enabled": False}}})) is None


# -- the managed endpoint picker's own policy (issue 30, review F2) -----------------------------

#: Prometheus' namespace, as ``networkPolicy.metricsFrom``.
METRICS_FROM = [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": MONITORING}}}]
GRPC, HEALTH, METRICS = 9002, 9003, 9090


def picker_world(chart: Rendered) -> tuple[World, dict[str, str], str, list[dict[str, Any]]]:
    """The matrix's world plus ``WORKLOAD``'s picker pod (the target), and every policy: the
    chart's, the engines' and the pickers' of ``WORKLOAD`` and ``OTHER_WORKLOAD``, rendered
    from the ``--engine-network-policy`` the chart gives the operator."""
    w, src, _ = world(chart)
    target = w.pod("chat-np-epp-target", SERVING, picker_pod_labels(SERVING, WORKLOAD))
    flag = engine_flag(chart)
    assert flag is not None
    pickers = [
        doc
        for name in (WORKLOAD, OTHER_WORKLOAD)
        for doc in inferencepool.render_picker(
            namespace=SERVING, workload=name, spec=None, settings=inferencepool.PickerSettings(), policy=flag
        )
        if doc["kind"] == "NetworkPolicy"
    ]
    assert len(pickers) == 2
    return w, src, target, [*policies_for(chart), *pickers]


PICKER_SOURCES = ("platform-gateway", "prometheus", "gateway", "random-pod", "other-namespace-pod")


def picker_matrix(binary: Path, chart: Rendered) -> dict[tuple[str, int], bool]:
    w, src, target, policies = picker_world(chart)
    cases = [(key, port) for key in PICKER_SOURCES for port in (GRPC, METRICS)]
    cases += [("other-workload-endpoint-picker", GRPC), ("same-workload-worker", GRPC)]
    queries = [(src[key], target, port, "TCP") for key, port in cases]
    return dict(zip(cases, w.allowed(binary, policies, queries), strict=True))


def test_picker_policy_lets_in_only_the_gateway_and_metrics_peers(
    netpol_eval: Path, helm_bin: str, tmp_path: Path
) -> None:
    """``inferencePool.gatewayFrom`` reaches the picker's ext-proc port, ``networkPolicy.metricsFrom``
    its metrics port; neither the other's port, and nobody else either (the release's own
    gateway, a random pod, another namespace, another workload's picker, the engines)."""
    values = {"inferencePool": {"gatewayFrom": GATEWAY_FROM}, "networkPolicy": {"metricsFrom": METRICS_FROM}}
    verdicts = picker_matrix(netpol_eval, render(helm_bin, tmp_path, values))
    allowed = {case for case, ok in verdicts.items() if ok}
    assert allowed == {("platform-gateway", GRPC), ("prometheus", METRICS)}, verdicts


def test_picker_ports_are_closed_without_peers(netpol_eval: Path, helm_bin: str, tmp_path: Path) -> None:
    """Default values: no ``gatewayFrom``, no ``metricsFrom``: the picker accepts nobody (a
    gateway could reach no engine either); the health port neither (the kubelet probes from the
    node, which a NetworkPolicy never blocks: the evaluator has no node source)."""
    chart = render(helm_bin, tmp_path)
    verdicts = picker_matrix(netpol_eval, chart)
    assert not any(verdicts.values()), verdicts
    w, src, target, policies = picker_world(chart)
    assert w.allowed(netpol_eval, policies, [(src["random-pod"], target, HEALTH, "TCP")]) == [False]
    # the control: without any policy the picker accepts everyone
    assert all(w.allowed(netpol_eval, [], [(src[key], target, GRPC, "TCP") for key in PICKER_SOURCES]))


# -- the renderer, the flag and the planner ----------------------------------------------------


RELEASE_LABELS = {"app.kubernetes.io/name": "sparkrun-operator", "app.kubernetes.io/instance": "sparkrun"}
FLAG = {
    "releaseNamespace": NAMESPACE,
    "releaseLabels": RELEASE_LABELS,
    "components": ["gateway", "operator", "shim"],
    "extraIngress": [PROMETHEUS_RULE],
}


@pytest.mark.parametrize(
    ("case", "flag"),
    [
        ("engine-policy", FLAG),
        ("engine-policy-egress", {**FLAG, "extraIngress": [], "egress": {"ports": [443, 8443]}}),
        ("engine-policy-gateway", {**FLAG, "extraIngress": [], "gatewayFrom": GATEWAY_FROM}),
    ],
)
def test_golden(case: str, flag: dict[str, Any]) -> None:
    owner = {"apiVersion": API, "kind": "InferenceWorkload", "name": WORKLOAD, "uid": "u-1"}
    doc = networkpolicy.render_engine_policy(
        namespace=SERVING, workload=WORKLOAD, policy=networkpolicy.parse(flag), owner=owner
    )
    text = yaml.safe_dump(doc, sort_keys=False)
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        path.parent.mkdir(exist_ok=True)
        path.write_text(text)
    assert text == path.read_text(), f"{path} differs (UPDATE_GOLDEN=1 rewrites it; review the diff)"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ([], "an object"),
        ({**FLAG, "releaseNamespace": "Not_A_Namespace"}, "releaseNamespace"),
        ({**FLAG, "releaseLabels": {}}, "releaseLabels"),
        ({**FLAG, "extraIngress": [{"from": [], "to": []}]}, "extraIngress"),
        ({**FLAG, "extraIngress": [{}] * (networkpolicy.MAX_RULES + 1)}, "at most"),
        ({**FLAG, "egress": {"ports": ["443"]}}, "egress.ports"),
        ({**FLAG, "egress": {"ports": [True]}}, "egress.ports"),
        ({**FLAG, "surprise": 1}, "unknown keys"),
        ({**FLAG, "gatewayFrom": {}}, "gatewayFrom"),
        ({**FLAG, "gatewayFrom": [{}]}, "gatewayFrom"),
        ({**FLAG, "gatewayFrom": [{"to": []}]}, "gatewayFrom"),
        ({**FLAG, "gatewayFrom": GATEWAY_FROM * (networkpolicy.MAX_RULES + 1)}, "at most"),
        ({**FLAG, "metricsFrom": {}}, "metricsFrom"),
        ({**FLAG, "metricsFrom": [{}]}, "metricsFrom"),
        ({**FLAG, "metricsFrom": [{"ports": []}]}, "metricsFrom"),
        ({**FLAG, "metricsFrom": GATEWAY_FROM * (networkpolicy.MAX_RULES + 1)}, "at most"),
    ],
)
def test_flag_refuses_malformed(bad: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        networkpolicy.parse(bad)


def test_planner_applies_the_policy_when_missing_or_changed_only() -> None:
    flag = networkpolicy.parse(FLAG)
    spec = InferenceWorkloadSpec.model_validate({"model": {"name": "Qwen/Qwen3-0.6B", "servedName": "q"}})
    fresh = plan(observation(spec, name=WORKLOAD, engine_policy=flag))
    (policy,) = [d for d in fresh.apply if d["kind"] == "NetworkPolicy"]
    assert policy["metadata"]["name"] == f"{WORKLOAD}-engine"
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "InferenceWorkload"
    current = policy["metadata"]["annotations"][keys.ANNOTATION_POLICY_HASH]
    again = plan(observation(spec, name=WORKLOAD, engine_policy=flag, network_policy=current))
    assert not [d for d in again.apply if d["kind"] == "NetworkPolicy"]
    stale = plan(observation(spec, name=WORKLOAD, engine_policy=flag, network_policy="0" * 12))
    assert [d["kind"] for d in stale.apply].count("NetworkPolicy") == 1
    off = plan(observation(spec, name=WORKLOAD))
    assert not [d for d in off.apply if d["kind"] == "NetworkPolicy"]


# -- on the testbed: the operator makes it, and it goes with the workload --------------------------


def test_operator_creates_the_policy_and_it_goes_with_the_workload(
    kube: KubeApi, namespace: str, operator_factory: Any, netpol_eval: Path
) -> None:
    flag = {**FLAG, "extraIngress": []}
    proc: OperatorProcess = operator_factory(namespace, f"--engine-network-policy={json.dumps(flag)}")
    name = "chat-np"
    model = {"name": "Qwen/Qwen3-0.6B", "servedName": f"np-{namespace}"}
    kube.apply(workload(name, namespace, model=model))
    found = kube.wait(
        lambda: kube.get("networking.k8s.io/v1", "NetworkPolicy", f"{name}-engine", namespace=namespace),
        timeout=90,
        what="the workload's NetworkPolicy",
    )
    owners = found["metadata"]["ownerReferences"]
    created = kube.get(API, "InferenceWorkload", name, namespace=namespace)
    assert created is not None
    uid = created["metadata"]["uid"]
    assert [(o["kind"], o["name"], o["uid"]) for o in owners] == [("InferenceWorkload", name, uid)]
    # The object as the apiserver stores it, against the workload's real leader pod.
    leader = kube.wait(
        lambda: next(
            iter(
                kube.list_items(
                    "v1", "Pod", namespace=namespace, label_selector=f"{keys.LABEL_WORKLOAD}={name}"
                )
            ),
            None,
        ),
        timeout=90,
        what="the workload's pod",
    )
    w = World()
    target = w.pod("leader", namespace, leader["metadata"]["labels"])
    operator = w.pod("op", NAMESPACE, {**RELEASE_LABELS, "app.kubernetes.io/component": "operator"})
    stranger = w.pod("curl", namespace, {"app": "curl"})
    policy = {k: found[k] for k in ("apiVersion", "kind", "metadata", "spec")}
    queries = [(operator, target, ENGINE_PORT, "TCP"), (stranger, target, ENGINE_PORT, "TCP")]
    assert w.allowed(netpol_eval, [policy], queries) == [True, False]
    # deleted by someone else: put back by the next pass at once, not at the drift timer (60 s
    # here): meanwhile no policy selects the engines and they accept every connection
    wait_condition(kube, namespace, name, "Ready", timeout=120)  # quiet: no pod events poke it
    kube.delete("networking.k8s.io/v1", "NetworkPolicy", f"{name}-engine", namespace=namespace)
    back = kube.wait(
        lambda: kube.get("networking.k8s.io/v1", "NetworkPolicy", f"{name}-engine", namespace=namespace),
        timeout=20,
        what="the deleted NetworkPolicy put back",
    )
    assert back["metadata"]["uid"] != found["metadata"]["uid"]
    kube.delete(API, "InferenceWorkload", name, namespace=namespace)
    kube.wait(
        lambda: (
            kube.get("networking.k8s.io/v1", "NetworkPolicy", f"{name}-engine", namespace=namespace) is None
        ),
        timeout=90,
        what="the NetworkPolicy garbage-collected with its workload",
    )
    assert proc.alive()
