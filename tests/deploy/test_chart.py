"""The Helm chart (helm/sparkrun-operator), rendered by the real `helm` with several values.

Each case parses the output as YAML and checks what matters: the commands (parsed by the
product's own argument parsers), probes, RBAC rules, TLS material (a real X.509 chain),
NetworkPolicy selectors, the optional objects, and that `helm lint --strict` is clean.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa

from sparkrun_operator.api.crdgen import all_crds
from sparkrun_operator.cli.main import build_parser
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.gateway.metrics import GatewayMetrics
from sparkrun_operator.gateway.server import _parser as gateway_parser
from tests.deploy.chart import CHART, NAMESPACE, REPO, Rendered, helm, render

SHIM_DNS = f"sparkrun-shim.{NAMESPACE}.svc"
SHIM_TLS_DIR = "/var/run/secrets/sparkrun.dev/shim-tls"
TESTBED_VALUES = REPO / "hack" / "testbed-values.yaml"


def _rules(role: dict[str, Any]) -> list[dict[str, Any]]:
    rules: list[dict[str, Any]] = role["rules"]
    return rules


def _grants(role: dict[str, Any], resource: str, verb: str, group: str = "") -> bool:
    return any(
        group in r["apiGroups"] and resource in r["resources"] and verb in r["verbs"] for r in _rules(role)
    )


def test_lint_is_clean(helm_bin: str, tmp_path: Path) -> None:
    combos = {"gateway": {"apiKeys": {"enabled": True}, "autoscaling": {"enabled": True}}}
    combos |= {"certManager": {"enabled": True}, "metrics": {"serviceMonitor": {"enabled": True}}}
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump(combos))
    for extra in ([], ["--values", str(values)], ["--values", str(TESTBED_VALUES)]):
        lint = helm(helm_bin, "lint", "--strict", str(CHART), *extra, check=False)
        assert lint.returncode == 0, lint.stdout + lint.stderr
        assert "0 chart(s) failed" in lint.stdout


def test_commands_parse_with_the_products_own_parsers(default: Rendered) -> None:
    parser = build_parser()
    for name in ("sparkrun-operator", "sparkrun-shim", "sparkrun-gateway"):
        container = default.container(name)
        assert "command" not in container, "the image's ENTRYPOINT (sparkrun-k8s) runs the args"
        if container["args"][0] == "gateway":  # main() hands the gateway its whole command line
            gw = gateway_parser().parse_args(container["args"][1:])
            assert gw.kubernetes
            assert not gw.secret_keys
            continue
        args = parser.parse_args(container["args"])
        if args.command == "operator":
            assert args.all_namespaces
            assert not args.standalone, "two replicas: peering on"
            assert args.liveness == "http://0.0.0.0:8080/healthz"
            assert args.metrics_port == 9090
        else:
            assert args.command == "shim"
            assert (args.port, args.aggregated_port) == (8443, 8444)
            assert args.tls_cert == f"{SHIM_TLS_DIR}/tls.crt"
    assert default.get("Deployment", "sparkrun-operator")["spec"]["replicas"] == 2


def test_probes_drain_and_security(default: Rendered) -> None:
    gateway = default.container("sparkrun-gateway")
    # The gateway's metrics listener (no API key there): probes and the ServiceMonitor use it.
    assert gateway["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert gateway["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert "--metrics-port=9090" in gateway["args"]
    assert {"name": "metrics", "containerPort": 9090, "protocol": "TCP"} in gateway["ports"]
    pod = default.get("Deployment", "sparkrun-gateway")["spec"]["template"]["spec"]
    sleep = gateway["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert 0 < sleep < pod["terminationGracePeriodSeconds"]
    shim = default.container("sparkrun-shim")
    health = {"path": "/v1/health", "port": "daemon-api", "scheme": "HTTPS"}
    assert shim["readinessProbe"]["httpGet"] == health
    operator = default.container("sparkrun-operator")
    assert operator["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    for name in ("sparkrun-operator", "sparkrun-shim", "sparkrun-gateway"):
        spec = default.get("Deployment", name)["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True
        context = default.container(name)["securityContext"]
        assert context["readOnlyRootFilesystem"] is True
        assert context["capabilities"]["drop"] == ["ALL"]
        assert spec["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]


def _pods(rendered: Rendered) -> dict[str, dict[str, Any]]:
    """Every pod spec of the chart: the Deployments' templates and the `helm test` pods."""
    specs = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in rendered.of("Deployment")}
    return specs | {p["metadata"]["name"]: p["spec"] for p in rendered.of("Pod")}


def test_mounts_lie_where_any_runtime_can_make_mount_points(default: Rendered) -> None:
    """Under /var/run/secrets, like the ServiceAccount token: also with readOnlyRootFilesystem,
    and on the testbed's process nodes, which mount only at existing paths or under /run."""
    mounts = {
        (name, m["mountPath"])
        for name, spec in _pods(default).items()
        for c in spec["containers"]
        for m in c.get("volumeMounts", ())
    }
    assert mounts == {("sparkrun-shim", SHIM_TLS_DIR), ("sparkrun-test-shim", SHIM_TLS_DIR)}
    script = default.get("Pod", "sparkrun-test-shim")["spec"]["containers"][0]["args"][0]
    assert f"cafile='{SHIM_TLS_DIR}/ca.crt'" in script


def test_operator_pods_are_their_own_peering_identity(default: Rendered) -> None:
    env = default.container("sparkrun-operator")["env"]
    assert {"name": "POD_ID", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in env


def test_testbed_values_put_every_pod_on_process_nodes(helm_bin: str, tmp_path: Path) -> None:
    values = yaml.safe_load(TESTBED_VALUES.read_text())
    out = render(helm_bin, tmp_path, values)
    pods = _pods(out)
    assert set(pods) == {f"sparkrun-{c}" for c in ("operator", "shim", "gateway")} | {
        f"sparkrun-test-{c}" for c in ("operator", "shim", "gateway")
    }
    toleration = {"key": "sparkrun.dev/testbed-runtime", "operator": "Equal", "value": "process"}
    for name, spec in pods.items():
        assert spec["nodeSelector"] == {"sparkrun.dev/testbed-runtime": "process"}, name
        assert spec["tolerations"] == [{**toleration, "effect": "NoSchedule"}], name
        images = {c["image"] for c in spec["containers"]}
        assert images == {"sparkrun-operator:testbed"}, "the process runtime maps sparkrun* images"
    assert out.get("Deployment", "sparkrun-operator")["spec"]["replicas"] == 2


def test_least_privilege_by_default(default: Rendered) -> None:
    operator = default.get("ClusterRole", "sparkrun-operator")
    assert not _grants(operator, "secrets", "get")
    # ConfigMaps cluster-wide: never listed or watched, so the operator cannot enumerate other
    # tenants' ConfigMaps; every one it reads it reads by name (an InferenceBenchmark's raw
    # output; a RecipeRegistry's mod and profile ConfigMaps, by the names its status records).
    # update: a registry replaces its ConfigMaps whole (resourceVersion precondition); delete: a
    # registry removes the ConfigMaps of mods and profiles that left its repository, each with
    # the UID precondition of the object it controls (tests/unit/plan/test_registry_plan.py;
    # tests/shim/test_registry_admission.py runs a registry with exactly these rights).
    assert not _grants(operator, "configmaps", "list")
    assert not _grants(operator, "configmaps", "watch")
    (config_maps,) = [r for r in _rules(operator) if "configmaps" in r["resources"]]
    assert config_maps["verbs"] == ["get", "create", "update", "patch", "delete"]
    assert not _grants(operator, "clusterrolebindings", "create", "rbac.authorization.k8s.io")
    # ServiceAccounts: created only for managed endpoint pickers (inferencePool.enabled, the
    # default), by the pool rules alone (test_pool_rights_exist_only_with_pools)
    assert [r for r in _rules(operator) if _creates_accounts(r)] == [PICKER_ACCOUNTS]
    assert [r for r in _rules(operator) if "bind" in r["verbs"]] == [PICKER_BIND]
    assert not _grants(operator, "pods", "create")
    assert _grants(operator, "jobsets", "create", "jobset.x-k8s.io")
    # the served rules name every kind but RecipeRegistry, which has rules of its own (below)
    plurals = sorted(p for d in all_crds() if (p := d["spec"]["names"]["plural"]) != "reciperegistries")
    own = [r["resources"] for r in _rules(operator) if r["apiGroups"] == ["sparkrun.dev"]]
    assert [sorted(r) for r in own] == [
        plurals,
        sorted(f"{p}/status" for p in plurals),
        ["reciperegistries"],
        ["reciperegistries/status"],
    ]
    # RecipeRegistries (cluster-scoped): synced (status) and written by the catalog.registries.*
    # operations; never updated whole
    registries = [r for r in _rules(operator) if r["resources"][0].startswith("reciperegistries")]
    assert [r["verbs"] for r in registries] == [
        ["get", "list", "watch", "create", "patch", "delete"],
        ["get", "patch"],
    ]
    local = default.get("Role", "sparkrun-operator", NAMESPACE)
    assert _grants(local, "secrets", "get")
    assert not _grants(local, "secrets", "list"), "answer Secrets are read by name"
    gateway = default.get("ClusterRole", "sparkrun-gateway")
    assert not _grants(gateway, "secrets", "get"), "Secrets only with gateway.apiKeys.enabled"
    (aliases,) = [r for r in _rules(gateway) if "configmaps" in r["resources"]]
    assert aliases["resourceNames"] == ["sparkrun-gateway-aliases"]
    assert _grants(gateway, "inferenceworkloads", "patch", "sparkrun.dev")
    shim_local = default.get("Role", "sparkrun-shim", NAMESPACE)
    assert _grants(shim_local, "secrets", "create")
    # get: the redacted diagnostic bundles, Secrets <job id>-diagnostics, read by name (ADR 0021)
    assert _grants(shim_local, "secrets", "get")
    assert not _grants(shim_local, "secrets", "list")
    for role in default.of("ClusterRole") + default.of("Role"):
        for rule in _rules(role):
            assert "*" not in rule["verbs"], role["metadata"]["name"]
            assert not {"escalate", "impersonate"} & set(rule["verbs"]), role["metadata"]["name"]
    bindings = {b["metadata"]["name"]: b["roleRef"]["name"] for b in default.of("ClusterRoleBinding")}
    assert "cluster-admin" not in bindings.values()


def test_model_cache_tool_settings_are_values(helm_bin: str, tmp_path: Path) -> None:
    scheduling = {"nodeSelector": {"pool": "io"}, "tolerations": [{"key": "a b", "operator": "Exists"}]}
    values = {"operator": {"modelCache": {"toolScheduling": scheduling, "hubTokenSecret": "hf/tok"}}}
    out = render(helm_bin, tmp_path, values)
    args = build_parser().parse_args(out.container("sparkrun-operator")["args"])
    assert args.cache_tool_scheduling == scheduling
    assert args.hub_token_secret == ("hf", "tok")
    plain = render(helm_bin, tmp_path / "d").container("sparkrun-operator")["args"]
    default = build_parser().parse_args(plain)
    assert (default.cache_tool_scheduling, default.hub_token_secret) == ({}, None)


def test_credential_endpoints_are_a_value(helm_bin: str, tmp_path: Path) -> None:
    """The hub token goes to the public Hub only unless the administrator lists more (ADR 0040)."""
    mirror = ["https://hf.mirror.internal:8443", "https://huggingface.co"]
    for listed, expected in ((None, ["https://huggingface.co"]), (mirror, mirror), ([], [])):
        values = (
            None
            if listed is None
            else {"operator": {"credentials": {"allowedEndpoints": {"huggingFace": listed}}}}
        )
        args = render(helm_bin, tmp_path, values).container("sparkrun-operator")["args"]
        assert build_parser().parse_args(args).credential_endpoints.to_wire() == {"huggingFace": expected}


def test_the_modelcache_token_policy_checks_the_requester_may_get_the_secret(default: Rendered) -> None:
    policy = default.get("ValidatingAdmissionPolicy", "sparkrun-modelcache-token")
    assert policy["spec"]["failurePolicy"] == "Fail"
    assert policy["spec"]["matchConstraints"]["resourceRules"][0]["resources"] == ["modelcaches"]
    [check] = policy["spec"]["validations"]
    assert "resource('secrets')" in check["expression"]
    assert ".check('get').allowed()" in check["expression"]
    binding = default.get("ValidatingAdmissionPolicyBinding", "sparkrun-modelcache-token")
    assert binding["spec"] == {"policyName": "sparkrun-modelcache-token", "validationActions": ["Deny"]}


def test_the_workload_secrets_policy_checks_every_reference(default: Rendered) -> None:
    """ADR 0041: every Secret and ConfigMap an engine's env names, one authorization check per
    expression (a check costs 350,000 of CEL's 1,000,000 per expression), 16 in all (5,600,000 of
    the 10,000,000 a policy may spend per request)."""
    name = "sparkrun-workload-secrets"
    policy = default.get("ValidatingAdmissionPolicy", name)
    assert policy["spec"]["failurePolicy"] == "Fail"
    [rule] = policy["spec"]["matchConstraints"]["resourceRules"]
    assert (rule["resources"], rule["operations"]) == (["inferenceworkloads"], ["CREATE", "UPDATE"])
    checks = [v["expression"] for v in policy["spec"]["validations"] if "authorizer" in v["expression"]]
    assert len(checks) == 16
    for i, check in enumerate(checks):
        assert check.count(".check('get').allowed()") == 1, check
        assert f"size(variables.all) <= {i} ||" in check, check
    limit = [v for v in policy["spec"]["validations"] if v["expression"] == "size(variables.all) <= 16"]
    assert limit, "no bound on the number of references"
    binding = default.get("ValidatingAdmissionPolicyBinding", name)
    assert binding["spec"] == {"policyName": name, "validationActions": ["Deny"]}


def test_service_account_provisioning_is_a_value(helm_bin: str, tmp_path: Path) -> None:
    alone = {"operator": {"rbac": {"serviceAccountProvisioning": True}}, "inferencePool": {"enabled": False}}
    operator = render(helm_bin, tmp_path, alone).get("ClusterRole", "sparkrun-operator")
    assert _grants(operator, "clusterrolebindings", "create", "rbac.authorization.k8s.io")
    (accounts,) = [r for r in _rules(operator) if _creates_accounts(r)]
    assert accounts == {
        "apiGroups": [""],
        "resources": ["serviceaccounts"],
        "verbs": ["get", "create", "patch"],
    }
    (bind,) = [r for r in _rules(operator) if "bind" in r["verbs"]]
    assert bind["resourceNames"] == ["sparkrun-daemon-operate"]
    # with pools too: each value adds its own rule, and binds its own ClusterRole only
    both = render(helm_bin, tmp_path, {"operator": {"rbac": {"serviceAccountProvisioning": True}}})
    operator = both.get("ClusterRole", "sparkrun-operator")
    assert [r for r in _rules(operator) if _creates_accounts(r)] == [PICKER_ACCOUNTS, accounts]
    assert [r for r in _rules(operator) if "bind" in r["verbs"]] == [PICKER_BIND, bind]


#: What the operator may do to ServiceAccounts for managed endpoint pickers (inferencePool.enabled):
#: get (the check that a ``<workload>-epp`` account is the workload's before applying it), list
#: and watch (the pickers' index), create and patch (server-side apply), delete (UID-guarded,
#: when a workload's picker goes). No ``update``; no ``resourceNames``: Kubernetes cannot
#: restrict ``create`` (nor ``list``/``watch``) by name (docs/security.md, "InferencePools").
PICKER_ACCOUNTS = {
    "apiGroups": [""],
    "resources": ["serviceaccounts"],
    "verbs": ["get", "list", "watch", "create", "patch", "delete"],
}
#: The one ClusterRole the operator may bind for pickers (in a RoleBinding: it holds no
#: ``clusterrolebindings`` right for them).
PICKER_BIND = {
    "apiGroups": ["rbac.authorization.k8s.io"],
    "resources": ["clusterroles"],
    "verbs": ["bind"],
    "resourceNames": ["sparkrun-endpoint-picker"],
}
#: (API group, resource) of every pool-stage rule: the pools and the picker's objects.
POOL_RESOURCES = {
    ("inference.networking.k8s.io", "inferencepools"),
    ("inference.networking.k8s.io", "inferencepools/status"),
    ("apps", "deployments"),
    ("", "serviceaccounts"),
    ("rbac.authorization.k8s.io", "rolebindings"),
    ("rbac.authorization.k8s.io", "clusterroles"),
}


def _creates_accounts(rule: dict[str, Any]) -> bool:
    return "" in rule["apiGroups"] and "serviceaccounts" in rule["resources"] and "create" in rule["verbs"]


def _pool_rules(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        r
        for r in _rules(role)
        if any((g, res) in POOL_RESOURCES for g in r["apiGroups"] for res in r["resources"])
    ]


@pytest.mark.parametrize("watch", [[], ["serving"]], ids=["cluster", "watchNamespaces"])
def test_pool_rights_exist_only_with_pools(helm_bin: str, tmp_path: Path, watch: list[str]) -> None:
    """``inferencePool.enabled`` (the default) adds the pool stage's rules where the operator
    serves workloads (its ClusterRole, or the Roles of the served namespaces): pools, the
    pickers' Deployments, ServiceAccounts and RoleBindings (no ``update``), a pool's status read
    only, and ``bind`` of the pickers' ClusterRole alone. Off, none of them: no ServiceAccount
    create, RoleBinding, bind or Deployment create right at all, and no pickers' ClusterRole."""
    on = render(helm_bin, tmp_path, {"watchNamespaces": watch})
    off = render(helm_bin, tmp_path, {"watchNamespaces": watch, "inferencePool": {"enabled": False}})
    where: list[tuple[str, str, str | None]] = [("ClusterRole", "sparkrun-operator", None)]
    if watch:
        where = [("Role", "sparkrun-operator-served", ns) for ns in (*watch, NAMESPACE)]
    served = [on.get(kind, name, ns) for kind, name, ns in where]
    writes = ["get", "list", "watch", "create", "patch", "delete"]
    for role in served:
        rules = _pool_rules(role)
        assert rules == [
            {"apiGroups": ["inference.networking.k8s.io"], "resources": ["inferencepools"], "verbs": writes},
            {
                "apiGroups": ["inference.networking.k8s.io"],
                "resources": ["inferencepools/status"],
                "verbs": ["get"],
            },
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": writes},
            PICKER_ACCOUNTS,
            {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": writes},
            PICKER_BIND,
        ], role["metadata"]
    operator = on.get("ClusterRole", "sparkrun-operator")
    if watch:
        assert _pool_rules(operator) == []  # NB: nothing cluster-wide with watchNamespaces
    for doc in off.of("ClusterRole") + off.of("Role"):
        if not doc["metadata"]["name"].startswith("sparkrun-operator"):
            continue
        for rule in _rules(doc):
            assert not _creates_accounts(rule), doc["metadata"]
            assert "bind" not in rule["verbs"], doc["metadata"]
            assert "rolebindings" not in rule["resources"], doc["metadata"]
            assert "inferencepools" not in rule["resources"], doc["metadata"]
            assert not ("deployments" in rule["resources"] and "create" in rule["verbs"]), doc["metadata"]
    assert off.find("ClusterRole", "sparkrun-endpoint-picker") is None
    assert on.find("ClusterRole", "sparkrun-endpoint-picker") is not None


def test_api_keys_never_list_secrets_cluster_wide(helm_bin: str, tmp_path: Path) -> None:
    """Serving every namespace, keys come from the release namespace only (an administrator
    namespace); with watchNamespaces (or the deprecated gateway.watchNamespace) from those."""
    wide = render(helm_bin, tmp_path, {"gateway": {"apiKeys": {"enabled": True}}})
    args = gateway_parser().parse_args(wide.container("sparkrun-gateway")["args"][1:])
    assert args.secret_keys
    assert args.namespace == []
    assert args.key_namespace == [NAMESPACE]
    assert args.admin_key_namespace == [NAMESPACE]
    assert not _grants(wide.get("ClusterRole", "sparkrun-gateway"), "secrets", "list")
    assert _grants(wide.get("Role", "sparkrun-gateway-keys", NAMESPACE), "secrets", "list")
    assert wide.container("sparkrun-gateway")["readinessProbe"]["httpGet"]["path"] == "/readyz"

    one = render(helm_bin, tmp_path, {"gateway": {"apiKeys": {"enabled": True}, "watchNamespace": "serving"}})
    args = gateway_parser().parse_args(one.container("sparkrun-gateway")["args"][1:])
    assert args.namespace == ["serving"]
    assert args.key_namespace == ["serving"]
    assert args.admin_key_namespace == []
    assert one.find("ClusterRole", "sparkrun-gateway") is None
    role = one.get("Role", "sparkrun-gateway", "serving")
    assert not _grants(role, "secrets", "list")
    assert _grants(one.get("Role", "sparkrun-gateway-keys", "serving"), "secrets", "list")
    binding = one.get("RoleBinding", "sparkrun-gateway", "serving")
    account = {"kind": "ServiceAccount", "name": "sparkrun-gateway", "namespace": NAMESPACE}
    assert binding["subjects"] == [account]
    notes = _notes(helm_bin, tmp_path, {"gateway": {"watchNamespace": "x"}})
    assert "DEPRECATED gateway.watchNamespace" in notes
    assert "DEPRECATED gateway.watchNamespace" not in _notes(helm_bin, tmp_path, {"watchNamespaces": ["x"]})


def _notes(helm_bin: str, tmp: Path, values: dict[str, Any]) -> str:
    """NOTES.txt as `helm install` prints it (``helm template`` omits it: a copy of the chart
    renders it through ``tpl`` as a document of its own)."""
    chart = tmp / "notes-chart"
    shutil.rmtree(chart, ignore_errors=True)
    shutil.copytree(CHART, chart)
    (chart / "notes.txt").write_text((CHART / "templates" / "NOTES.txt").read_text())
    (chart / "templates" / "zz-notes.yaml").write_text(
        'notes: {{ tpl (.Files.Get "notes.txt") . | toJson }}\n'
    )
    (tmp / "notes-values.yaml").write_text(yaml.safe_dump(values))
    argv = ["template", "sparkrun", str(chart), "-n", NAMESPACE, "--values", str(tmp / "notes-values.yaml")]
    out = helm(helm_bin, *argv, "--show-only", "templates/zz-notes.yaml").stdout
    notes: str = yaml.safe_load(out)["notes"]
    return notes


def test_watch_namespaces_serve_each_namespace(helm_bin: str, tmp_path: Path) -> None:
    """watchNamespaces: the operator serves them and the release namespace (kopf's namespaced
    peering), the gateway exactly them; keys from them and the administrator namespaces."""
    values = {
        "watchNamespaces": ["team-a", "team-b"],
        "gateway": {"auth": {"mode": "apiKeys"}, "apiKeys": {"adminNamespaces": ["ops"]}},
    }
    out = render(helm_bin, tmp_path, values)
    operator = build_parser().parse_args(out.container("sparkrun-operator")["args"])
    assert operator.namespace == ["team-a", "team-b", NAMESPACE]
    assert not operator.all_namespaces
    gateway = gateway_parser().parse_args(out.container("sparkrun-gateway")["args"][1:])
    assert gateway.namespace == ["team-a", "team-b"]
    assert gateway.key_namespace == ["team-a", "team-b", "ops"]
    assert gateway.admin_key_namespace == ["ops"]
    for ns in ("team-a", "team-b", NAMESPACE):
        assert _grants(
            out.get("Role", "sparkrun-operator-served", ns), "jobsets", "create", "jobset.x-k8s.io"
        )
        assert _grants(out.get("Role", "sparkrun-operator-served", ns), "kopfpeerings", "create", "kopf.dev")
    cluster = out.get("ClusterRole", "sparkrun-operator")
    assert not _grants(cluster, "jobsets", "create", "jobset.x-k8s.io")
    assert not _grants(cluster, "clusterkopfpeerings", "get", "kopf.dev")
    assert _grants(cluster, "inferenceclusters", "patch", "sparkrun.dev")
    assert out.find("ClusterRole", "sparkrun-gateway") is None
    shim = out.get("ClusterRole", "sparkrun-shim")
    assert not _grants(shim, "inferenceworkloads", "list", "sparkrun.dev")
    assert _grants(out.get("Role", "sparkrun-shim", NAMESPACE), "inferenceworkloads", "list", "sparkrun.dev")
    default = render(helm_bin, tmp_path, {})
    assert build_parser().parse_args(default.container("sparkrun-operator")["args"]).all_namespaces


def _public_key_verifies(issuer: x509.Certificate, cert: x509.Certificate) -> None:
    key = issuer.public_key()
    assert cert.signature_hash_algorithm is not None
    algorithm = cert.signature_hash_algorithm
    if isinstance(key, rsa.RSAPublicKey):
        key.verify(cert.signature, cert.tbs_certificate_bytes, padding.PKCS1v15(), algorithm)
    else:
        assert isinstance(key, ec.EllipticCurvePublicKey)
        key.verify(cert.signature, cert.tbs_certificate_bytes, ec.ECDSA(algorithm))


def test_generated_tls_is_a_real_chain_for_the_service(default: Rendered) -> None:
    secret = default.get("Secret", "sparkrun-shim-tls", NAMESPACE)
    assert secret["type"] == "kubernetes.io/tls"
    ca = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["ca.crt"]))
    cert = x509.load_pem_x509_certificate(base64.b64decode(secret["data"]["tls.crt"]))
    assert base64.b64decode(secret["data"]["tls.key"]).startswith(b"-----BEGIN")
    _public_key_verifies(ca, cert)
    assert cert.issuer == ca.subject
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert SHIM_DNS in names.get_values_for_type(x509.DNSName)
    api = default.get("APIService", "v1alpha1.daemon.sparkrun.dev")
    assert api["spec"]["caBundle"] == secret["data"]["ca.crt"]
    assert api["spec"]["service"] == {"namespace": NAMESPACE, "name": "sparkrun-shim", "port": 443}
    volume = default.get("Deployment", "sparkrun-shim")["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == "sparkrun-shim-tls"


def test_cert_manager_and_existing_secret(helm_bin: str, tmp_path: Path) -> None:
    cm = render(helm_bin, tmp_path, {"certManager": {"enabled": True}})
    assert cm.find("Secret", "sparkrun-shim-tls") is None
    certificate = cm.get("Certificate", "sparkrun-shim")
    assert certificate["spec"]["secretName"] == "sparkrun-shim-tls"
    assert SHIM_DNS in certificate["spec"]["dnsNames"]
    issuer = cm.get("Issuer", "sparkrun-shim-selfsigned")
    assert issuer["spec"] == {"selfSigned": {}}
    assert certificate["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    api = cm.get("APIService", "v1alpha1.daemon.sparkrun.dev")
    assert api["metadata"]["annotations"] == {"cert-manager.io/inject-ca-from": f"{NAMESPACE}/sparkrun-shim"}
    assert "caBundle" not in api["spec"]

    bundle = base64.b64encode(b"-----BEGIN CERTIFICATE-----\n").decode()
    own = render(helm_bin, tmp_path, {"shim": {"tls": {"existingSecret": "mine", "caBundle": bundle}}})
    assert own.find("Secret", "mine") is None
    assert own.of("Certificate") == []
    assert own.get("APIService", "v1alpha1.daemon.sparkrun.dev")["spec"]["caBundle"] == bundle
    volume = own.get("Deployment", "sparkrun-shim")["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == "mine"


def test_gateway_autoscaling_and_disruption_budget(helm_bin: str, tmp_path: Path) -> None:
    out = render(helm_bin, tmp_path, {"gateway": {"autoscaling": {"enabled": True, "maxReplicas": 6}}})
    hpa = out.get("HorizontalPodAutoscaler", "sparkrun-gateway")
    target = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "sparkrun-gateway"}
    assert hpa["spec"]["scaleTargetRef"] == target
    assert hpa["spec"]["maxReplicas"] == 6
    assert "replicas" not in out.get("Deployment", "sparkrun-gateway")["spec"]
    pdb = out.get("PodDisruptionBudget", "sparkrun-gateway")
    pod_labels = out.get("Deployment", "sparkrun-gateway")["spec"]["template"]["metadata"]["labels"]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


def test_one_gateway_replica_gets_no_disruption_budget(helm_bin: str, tmp_path: Path) -> None:
    """minAvailable 1 of one pod would hold every node drain: one replica, no budget; two, one."""
    one = render(helm_bin, tmp_path, {"gateway": {"replicas": 1}})
    assert one.find("PodDisruptionBudget", "sparkrun-gateway") is None
    scaled = render(
        helm_bin, tmp_path, {"gateway": {"replicas": 1, "autoscaling": {"enabled": True, "minReplicas": 1}}}
    )
    assert scaled.find("PodDisruptionBudget", "sparkrun-gateway") is None
    two = render(helm_bin, tmp_path, {"gateway": {"replicas": 2}})
    assert two.get("PodDisruptionBudget", "sparkrun-gateway")["spec"]["minAvailable"] == 1


def test_network_policies(default: Rendered, helm_bin: str, tmp_path: Path) -> None:
    assert {p["metadata"]["name"] for p in default.of("NetworkPolicy")} == {
        "sparkrun-operator",
        "sparkrun-shim",
        "sparkrun-gateway",
        "sparkrun-tests",
        "sparkrun-operator-stop",
        "sparkrun-upgrade-check",
    }
    for name in ("sparkrun-tests", "sparkrun-operator-stop", "sparkrun-upgrade-check"):
        (one_shot,) = [p for p in default.of("NetworkPolicy") if p["metadata"]["name"] == name]
        assert "ingress" not in one_shot["spec"], f"{name}: helm test and hook pods accept no connections"
    stop_pod = default.get("Job", "sparkrun-operator-stop", NAMESPACE)["spec"]["template"]["metadata"][
        "labels"
    ]
    stop_policy = default.get("NetworkPolicy", "sparkrun-operator-stop", NAMESPACE)
    assert all(stop_pod.get(k) == v for k, v in stop_policy["spec"]["podSelector"]["matchLabels"].items())
    # Engines: no namespace-wide policy any more; the operator makes one per workload from the
    # flag the chart gives it (the matrix over both: tests/tenancy/test_network_policy.py).
    values = {"networkPolicy": {"workloadNamespaces": ["serving"], "engineRestrictEgress": True}}
    out = render(helm_bin, tmp_path, values)
    assert out.find("NetworkPolicy", "sparkrun-engines", "serving") is None
    args = out.container("sparkrun-operator")["args"]
    (flag,) = [a for a in args if a.startswith("--engine-network-policy=")]
    doc = json.loads(flag.split("=", 1)[1])
    assert doc["releaseNamespace"] == NAMESPACE
    assert doc["egress"]["dns"] == {"namespace": "kube-system", "podLabels": {"k8s-app": "kube-dns"}}
    assert doc["egress"]["ports"] == [443]


def _metric_families() -> set[str]:
    names: set[str] = set()
    for registry in (GatewayMetrics().registry, Metrics().registry):
        for family in registry.collect():
            names.add(family.name)
            names.update(sample.name for sample in family.samples)
        names.update(
            f"{family.name}{suffix}" for family in registry.collect() for suffix in ("_total", "_bucket")
        )
    return names


def test_service_monitors_and_dashboard(helm_bin: str, tmp_path: Path) -> None:
    values = {"metrics": {"serviceMonitor": {"enabled": True}, "dashboard": {"enabled": True}}}
    out = render(helm_bin, tmp_path, values)
    for name, port, service_name in (
        ("sparkrun-operator", "metrics", "sparkrun-operator"),
        ("sparkrun-gateway", "metrics", "sparkrun-gateway-metrics"),  # no API key on that port
    ):
        monitor = out.get("ServiceMonitor", name)
        (endpoint,) = monitor["spec"]["endpoints"]
        assert (endpoint["port"], endpoint["path"]) == (port, "/metrics")
        service = out.get("Service", service_name)
        assert port in {p["name"] for p in service["spec"]["ports"]}
        assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    dashboard = out.get("ConfigMap", "sparkrun-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(dashboard["data"]["sparkrun.json"])
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"\bsparkrun_[a-z_]+", e)}
    assert used, "the dashboard queries sparkrun metrics"
    assert used <= _metric_families(), used - _metric_families()
    assert {m.split("_")[1] for m in used} == {"gateway", "operator"}


def test_helm_test_hooks_ask_each_component(default: Rendered) -> None:
    tests = [p for p in default.of("Pod") if p["metadata"]["annotations"].get("helm.sh/hook") == "test"]
    urls = {}
    for pod in tests:
        (container,) = pod["spec"]["containers"]
        assert container["command"] == ["python", "-c"]
        script = container["args"][0]
        compile(script, pod["metadata"]["name"], "exec")
        (url,) = re.findall(r"url = .* else '?\"?([^'\"]+)", script)
        urls[pod["metadata"]["name"]] = url
    assert urls == {
        "sparkrun-test-operator": f"http://sparkrun-operator.{NAMESPACE}.svc:8080/healthz",
        "sparkrun-test-shim": f"https://{SHIM_DNS}:8443/v1/health",
        "sparkrun-test-gateway": f"http://sparkrun-gateway.{NAMESPACE}.svc:80/healthz",
    }


def test_crds_are_the_generated_ones(default: Rendered, helm_bin: str, tmp_path: Path) -> None:
    crds = {d["metadata"]["name"]: d for d in default.of("CustomResourceDefinition")}
    generated = {p.stem: yaml.safe_load(p.read_text()) for p in sorted((REPO / "crds").glob("*.yaml"))}
    assert set(crds) == set(generated) | {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
    for name, doc in generated.items():
        assert crds[name]["spec"] == doc["spec"], name
    for doc in crds.values():
        assert doc["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    without = render(helm_bin, tmp_path, {"crds": {"install": False}})
    assert without.of("CustomResourceDefinition") == []


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_gateway_hook_and_probe_pass_against_a_real_gateway_with_keys(
    default: Rendered, tmp_path: Path
) -> None:
    """The chart's readiness path and `helm test` script against a real gateway with keys on."""
    routes, keys = tmp_path / "routes.json", tmp_path / "keys.yaml"
    routes.write_text(json.dumps({"workloads": []}))
    keys.write_text(yaml.safe_dump({"keys": [{"key": "sk-test"}]}))
    port = _free_port()
    argv = [sys.executable, "-m", "sparkrun_operator.cli.main", "gateway", "--routes", str(routes)]
    argv += ["--keys", str(keys), "--host", "127.0.0.1", f"--port={port}"]
    log = tmp_path / "gateway.log"
    out = log.open("wb")
    proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.get(f"{base}/healthz", timeout=1)
                break
            except httpx.TransportError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, "gateway did not start"
                time.sleep(0.2)
        assert httpx.get(f"{base}/v1/models").status_code == 401, "keys are on"
        probe = default.container("sparkrun-gateway")["readinessProbe"]["httpGet"]["path"]
        assert httpx.get(f"{base}{probe}").status_code == 200
        pod = default.get("Pod", "sparkrun-test-gateway")
        script = pod["spec"]["containers"][0]["args"][0]
        run = subprocess.run(
            [sys.executable, "-c", script, f"{base}/healthz"], capture_output=True, text=True, timeout=30
        )
        assert run.returncode == 0, run.stdout + run.stderr
        assert run.stdout.startswith("200 ")
        refused = subprocess.run(
            [sys.executable, "-c", script, f"{base}/v1/models"], capture_output=True, text=True, timeout=30
        )
        assert refused.returncode != 0, "the hook fails when the component does not answer 200"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
        out.close()


def test_helm_test_hook_waits_for_a_component_still_starting(default: Rendered, tmp_path: Path) -> None:
    """`helm install --wait && helm test`: a Service may not answer yet (its endpoints not yet
    published); the hook retries while nothing answers, within its bound, then fails."""
    script = default.get("Pod", "sparkrun-test-operator")["spec"]["containers"][0]["args"][0]
    port = _free_port()
    url = f"http://127.0.0.1:{port}/healthz"
    (tmp_path / "healthz").write_text("{}")
    hook = subprocess.Popen(
        [sys.executable, "-c", script, url, "30"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    assert hook.stdout is not None
    first = hook.stdout.readline()  # its first attempt finds nothing listening (the hook bounds it)
    assert "not answering yet" in first, first + (hook.stderr.read() if hook.stderr else "")
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        out, err = hook.communicate(timeout=40)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert hook.returncode == 0, first + out + err
    assert out.splitlines()[-1] == "200 {}"
    started = time.monotonic()
    gave_up = subprocess.run(
        [sys.executable, "-c", script, f"http://127.0.0.1:{_free_port()}/healthz", "1"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert gave_up.returncode != 0
    assert "did not answer within 1 s" in gave_up.stderr
    assert time.monotonic() - started < 15


def test_generated_certificate_serves_tls_for_the_service_name(default: Rendered, tmp_path: Path) -> None:
    """A real TLS handshake: the chart's key and certificate served, verified with its CA."""
    data = default.get("Secret", "sparkrun-shim-tls", NAMESPACE)["data"]
    for key in ("ca.crt", "tls.crt", "tls.key"):
        (tmp_path / key).write_bytes(base64.b64decode(data[key]))
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
    accepted: list[str] = []

    def serve(listener: socket.socket) -> None:
        for _ in range(2):
            conn, _ = listener.accept()
            try:
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    accepted.append(tls.version() or "")
                    tls.sendall(b"ok")
            except (ssl.SSLError, OSError):
                accepted.append("refused")

    with socket.create_server(("127.0.0.1", 0)) as listener:
        port = listener.getsockname()[1]
        thread = threading.Thread(target=serve, args=(listener,), daemon=True)
        thread.start()
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            client_ctx.wrap_socket(raw, server_hostname=SHIM_DNS) as tls,
        ):
            assert tls.recv(2) == b"ok"
        with (
            socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
            pytest.raises(ssl.SSLCertVerificationError),
        ):
            client_ctx.wrap_socket(raw, server_hostname="not-the-shim.example")
        thread.join(timeout=10)
    assert accepted[0].startswith("TLS")
    assert accepted[1] == "refused"


def test_anti_affinity_modes_and_bad_values_fail(helm_bin: str, tmp_path: Path) -> None:
    hard = render(
        helm_bin, tmp_path, {"gateway": {"podAntiAffinity": "hard"}, "operator": {"podAntiAffinity": "none"}}
    )
    gateway = hard.get("Deployment", "sparkrun-gateway")["spec"]["template"]["spec"]
    (term,) = gateway["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
    assert "affinity" not in hard.get("Deployment", "sparkrun-operator")["spec"]["template"]["spec"]
    for values, needle in (
        # refused by values.schema.json before the template's own `fail`
        ({"shim": {"podAntiAffinity": "sometimes"}}, "'/shim/podAntiAffinity': value must be one of 'soft'"),
        (
            {"gateway": {"preStopSeconds": 30, "terminationGracePeriodSeconds": 10}},
            "at least gateway.preStopSeconds",
        ),
    ):
        path = tmp_path / "bad.yaml"
        path.write_text(yaml.safe_dump(values))
        bad = helm(helm_bin, "template", "sparkrun", str(CHART), "--values", str(path), check=False)
        assert bad.returncode != 0
        assert needle in bad.stderr


def test_gateway_workers_is_a_value(default: Rendered, helm_bin: str, tmp_path: Path) -> None:
    plain = gateway_parser().parse_args(default.container("sparkrun-gateway")["args"][1:])
    assert plain.workers == 1
    out = render(helm_bin, tmp_path, {"gateway": {"workers": 3}})
    args = gateway_parser().parse_args(out.container("sparkrun-gateway")["args"][1:])
    assert args.workers == 3


def test_uninstall_hook_stops_the_operator_with_a_narrow_role(
    default: Rendered, helm_bin: str, tmp_path: Path
) -> None:
    hooked = [
        d
        for d in default.docs
        if (d["metadata"].get("annotations") or {}).get("helm.sh/hook") == "pre-delete"
    ]
    assert sorted((d["kind"], d["metadata"]["name"]) for d in hooked) == [
        ("Job", "sparkrun-operator-stop"),
        ("Role", "sparkrun-operator-stop"),
        ("RoleBinding", "sparkrun-operator-stop"),
        ("ServiceAccount", "sparkrun-operator-stop"),
    ]
    for doc in hooked:  # gone once it succeeded, replaced if a failed one is still there
        policy = doc["metadata"]["annotations"]["helm.sh/hook-delete-policy"].split(",")
        assert set(policy) == {"before-hook-creation", "hook-succeeded"}, doc["metadata"]["name"]
    job = default.get("Job", "sparkrun-operator-stop", NAMESPACE)
    pod = job["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    args = build_parser().parse_args(container["args"])
    assert (args.namespace, args.deployment, args.timeout) == (NAMESPACE, "sparkrun-operator", 90.0)
    assert pod["spec"]["serviceAccountName"] == "sparkrun-operator-stop"
    # the hook's own pod is not one of the pods it waits for
    selector = default.get("Deployment", "sparkrun-operator")["spec"]["selector"]["matchLabels"]
    assert not all(pod["metadata"]["labels"].get(k) == v for k, v in selector.items())
    role = default.get("Role", "sparkrun-operator-stop", NAMESPACE)
    assert _rules(role) == [
        {
            "apiGroups": ["apps"],
            "resources": ["deployments"],
            "resourceNames": ["sparkrun-operator"],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["apps"],
            "resources": ["deployments/scale"],
            "resourceNames": ["sparkrun-operator"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    off = render(helm_bin, tmp_path, {"operator": {"stopBeforeUninstall": False}})
    assert off.find("Job", "sparkrun-operator-stop", NAMESPACE) is None
    assert off.find("Role", "sparkrun-operator-stop", NAMESPACE) is None
