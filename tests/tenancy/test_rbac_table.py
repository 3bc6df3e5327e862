"""The chart's RBAC against its table (docs/security-rbac.yaml; issue 26, "least privilege,
checked").

The chart is rendered by the real ``helm`` under several value sets (defaults, watchNamespaces,
API keys, Kubernetes auth, shim off, NetworkPolicies off, the deprecated gateway.watchNamespace,
ServiceAccount provisioning, Kueue provisioning). Every rule a rendered binding grants a
component (rendered roles, and the built-in ones the chart binds) is expanded to single (scope,
API group, resource, verb, resource names) grants, and each must be allowed by a table row whose
``when`` holds for that value set. A grant wider than every row (a verb, a resource, a group, a
namespace scope, a ClusterRole where the table says namespaced, ``*``) fails; so does a row no
value set renders (a stale table) and a cluster-scoped row that holds with watchNamespaces set but
does not say why it is unavoidable. The checker itself is shown to fail on widened rules.
"""

from __future__ import annotations

import asyncio
import copy
import secrets
import subprocess
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.gateway.kube import (
    WORKLOADS,
    KubeConnection,
    KubeRoutingSource,
    SecretKeySource,
    namespaces_of,
)
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.errors import KubeForbidden
from sparkrun_operator.k8s.resources import JOBSETS, PODS, SECRETS
from sparkrun_operator.ops import kube as ops_kube
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from tests import hack_script
from tests.deploy.chart import CHART, NAMESPACE, REPO, Rendered, render, require_helm
from tests.operator.conftest import (
    get_workload,
    jobsets,
    operator_factory,
    peering_crds,
    wait_condition,
    workload,
)
from tests.shim.chart_rbac import _kubeconfig
from tests.shim.harness import service_account_token

__all__ = ["operator_factory", "peering_crds"]

TABLE = REPO / "docs" / "security-rbac.yaml"
SCOPES = {"cluster", "watched-namespace", "release-namespace", "admin-key-namespace"}
WATCHED = ["team-a", "team-b"]
#: Built-in roles the chart binds (Kubernetes bootstrap policy), as the apiserver defines them.
BUILTIN: dict[str, list[dict[str, Any]]] = {
    "system:auth-delegator": [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"], "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"], "verbs": ["create"]},
    ],
    "extension-apiserver-authentication-reader": [
        {
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": ["extension-apiserver-authentication"],
            "verbs": ["get", "list", "watch"],
        }
    ],
}
#: name -> values of each case.
CASES: dict[str, dict[str, Any]] = {
    "defaults": {},
    "watched": {"watchNamespaces": WATCHED},
    "apiKeys": {"gateway": {"auth": {"mode": "apiKeys"}, "apiKeys": {"adminNamespaces": ["ops"]}}},
    "apiKeys-watched": {
        "watchNamespaces": WATCHED,
        "gateway": {"auth": {"mode": "apiKeys"}, "apiKeys": {"adminNamespaces": ["ops"]}},
    },
    "kubernetes-auth": {"gateway": {"auth": {"mode": "kubernetes"}}},
    "kubernetes-auth-watched": {"watchNamespaces": WATCHED, "gateway": {"auth": {"mode": "kubernetes"}}},
    "shim-off": {"shim": {"enabled": False}, "watchNamespaces": WATCHED},
    "networkPolicy-off": {"networkPolicy": {"enabled": False}},
    "networkPolicy-off-watched": {"networkPolicy": {"enabled": False}, "watchNamespaces": WATCHED},
    "deprecated-watchNamespace": {"gateway": {"watchNamespace": "serving", "apiKeys": {"enabled": True}}},
    "serviceAccountProvisioning": {"operator": {"rbac": {"serviceAccountProvisioning": True}}},
    "kueueProvisioning": {"operator": {"rbac": {"kueueProvisioning": True}}},
    "kueueProvisioning-watched": {
        "watchNamespaces": WATCHED,
        "operator": {"rbac": {"kueueProvisioning": True}},
    },
    "gpuAgent-watched": {"watchNamespaces": WATCHED, "gpuAgent": {"enabled": True}},  # issue 33
    # The multi-tenant profile the docs tell platform teams to start from.
    "multitenant-example": yaml.safe_load((REPO / "examples/helm/values-multitenant.yaml").read_text()),
}


@dataclass(frozen=True)
class Grant:
    """One verb on one resource, granted to a component where ``scopes`` say."""

    component: str
    scopes: frozenset[str]
    group: str
    resource: str
    verb: str
    names: tuple[str, ...]
    via: str | None
    source: str

    def __str__(self) -> str:
        names = f" names={list(self.names)}" if self.names else ""
        group = self.group or "core"
        where = sorted(self.scopes)
        return f"{self.component}: {self.verb} {group}/{self.resource}{names} in {where} ({self.source})"


def _merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for key, value in over.items():
        out[key] = (
            _merge(out[key], value)
            if isinstance(value, Mapping) and isinstance(out.get(key), dict)
            else value
        )
    return out


@dataclass(frozen=True)
class Facts:
    """The values a row's ``when`` reads, resolved as the chart's helpers resolve them."""

    values: dict[str, Any]

    @classmethod
    def of(cls, overrides: Mapping[str, Any]) -> Facts:
        defaults = yaml.safe_load((CHART / "values.yaml").read_text())
        return cls(_merge(defaults, overrides))

    @property
    def watched(self) -> list[str]:
        listed = list(self.values.get("watchNamespaces") or [])
        legacy = self.values["gateway"].get("watchNamespace") or ""
        return listed or ([legacy] if legacy else [])

    @property
    def auth_mode(self) -> str:
        gateway = self.values["gateway"]
        mode = str((gateway.get("auth") or {}).get("mode") or "")
        return mode or ("apiKeys" if gateway["apiKeys"]["enabled"] else "none")

    def lookup(self, dotted: str) -> Any:
        if dotted == "watchNamespaces":
            return "set" if self.watched else "empty"
        if dotted == "gateway.auth.mode":
            return self.auth_mode
        found: Any = self.values
        for part in dotted.split("."):
            found = found.get(part) if isinstance(found, dict) else None
        return found

    def holds(self, when: Mapping[str, Any]) -> bool:
        return all(self.lookup(key) == expected for key, expected in when.items())

    def scopes_of(self, namespace: str) -> frozenset[str]:
        scopes = {f"namespace/{namespace}"}
        if namespace == NAMESPACE:
            scopes.add("release-namespace")
        if namespace in self.watched:
            scopes.add("watched-namespace")
        if namespace in (self.values["gateway"]["apiKeys"].get("adminNamespaces") or []):
            scopes.add("admin-key-namespace")
        return frozenset(scopes)


def load_table(path: Path = TABLE) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = yaml.safe_load(path.read_text())["rows"]
    return rows


def _expand(
    rules: Iterable[Mapping[str, Any]], component: str, scopes: frozenset[str], via: str | None, source: str
) -> Iterator[Grant]:
    for rule in rules:
        names = tuple(rule.get("resourceNames") or ())
        for group in rule.get("apiGroups") or [""]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    yield Grant(component, scopes, group, resource, verb, names, via, source)


#: Labels that add a ClusterRole's rules to a built-in role (admin, edit, view, ...).
AGGREGATE_TO = "rbac.authorization.k8s.io/aggregate-to-"


def _accounts(chart: Rendered) -> dict[tuple[str, str], str]:
    """The release's ServiceAccounts: (namespace, name) -> their component."""
    return {
        (str(d["metadata"].get("namespace")), d["metadata"]["name"]): d["metadata"]["labels"][
            "app.kubernetes.io/component"
        ]
        for d in chart.of("ServiceAccount")
    }


def _holders(binding: Mapping[str, Any], accounts: Mapping[tuple[str, str], str]) -> list[str]:
    """Who a binding grants to: the component of each subject that is one of the release's
    ServiceAccounts, anyone else by kind and name (a component no table row names)."""
    out = []
    for subject in binding.get("subjects") or []:
        where = (str(subject.get("namespace")), str(subject.get("name")))
        if subject.get("kind") == "ServiceAccount" and where in accounts:
            out.append(accounts[where])
        else:
            out.append(f"subject {subject.get('kind')} {where[0]}/{where[1]}")
    return out


def _aggregation(role: Mapping[str, Any], source: str) -> Iterator[Grant]:
    """A role's aggregation, as grants no row allows: its rules added to built-in roles (every
    namespace's holders of them get them), or rules that are whatever its selector matches."""
    labels = (role.get("metadata") or {}).get("labels") or {}
    for label in sorted(k for k, v in labels.items() if k.startswith(AGGREGATE_TO) and v == "true"):
        yield from _expand(role.get("rules") or [], label, frozenset({"cluster"}), None, source)
    if role.get("aggregationRule"):
        yield Grant("aggregationRule", frozenset({"cluster"}), "*", "*", "*", (), None, source)


def grants_of(chart: Rendered, facts: Facts) -> list[Grant]:
    """Every grant of every component: through each binding (to its subjects, whatever the
    binding's labels say), and each role nobody binds (roles for administrators to bind to
    callers: component ``callers``); a bound role's aggregation too."""
    roles = {(d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d for d in chart.docs}
    accounts = _accounts(chart)
    bound: set[tuple[str, str | None, str]] = set()
    out: list[Grant] = []
    for binding in chart.of("ClusterRoleBinding") + chart.of("RoleBinding"):
        meta, ref = binding["metadata"], binding["roleRef"]
        namespace = meta.get("namespace")
        cluster = binding["kind"] == "ClusterRoleBinding"
        scopes = frozenset({"cluster"}) if cluster else facts.scopes_of(str(namespace))
        key = (ref["kind"], None if ref["kind"] == "ClusterRole" else namespace, ref["name"])
        source = f"{binding['kind']} {namespace or ''}/{meta['name']}"
        if key in roles:
            bound.add(key)
            rules, via = roles[key]["rules"], None
            out += _aggregation(roles[key], source)
        else:
            assert ref["name"] in BUILTIN, (
                f"{source} binds {ref['name']}, neither rendered nor a known built-in"
            )
            rules, via = BUILTIN[ref["name"]], ref["name"]
        for component in _holders(binding, accounts):
            out += _expand(rules, component, scopes, via, source)
    for key, role in roles.items():
        if key[0] in ("ClusterRole", "Role") and key not in bound:
            scopes = frozenset({"cluster"}) if key[0] == "ClusterRole" else facts.scopes_of(str(key[1]))
            out += _expand(role["rules"], "callers", scopes, None, f"unbound {key[0]} {key[2]}")
            if role.get("aggregationRule"):
                out += _aggregation({"aggregationRule": role["aggregationRule"]}, f"unbound {key[2]}")
    return out


def _row_allows(row: Mapping[str, Any], grant: Grant) -> bool:
    if row["component"] != grant.component or not set(row["scope"]) & grant.scopes:
        return False
    if row.get("via") != grant.via:
        return False
    if grant.group not in row["apiGroups"] or grant.resource not in row["resources"]:
        return False
    if grant.verb not in row["verbs"]:
        return False
    allowed = set(row.get("resourceNames") or ())
    return not allowed or (bool(grant.names) and set(grant.names) <= allowed)


def violations(grants: Iterable[Grant], rows: list[dict[str, Any]], facts: Facts) -> list[str]:
    """What no row that holds under ``facts`` allows (``*`` only where a row says ``wildcard``)."""
    live = [row for row in rows if facts.holds(row.get("when") or {})]
    found = []
    for grant in grants:
        wild = "*" in (grant.group, grant.resource, grant.verb) or "*" in grant.names
        rows_for = [r for r in live if _row_allows(r, grant)]
        if wild and not any(r.get("wildcard") for r in rows_for):
            found.append(f"wildcard: {grant}")
        elif not rows_for:
            found.append(f"not in the table: {grant}")
    return found


def row_problems(rows: list[dict[str, Any]]) -> list[str]:
    """Rows malformed, or cluster-scoped while watchNamespaces is set without saying why."""
    problems = []
    for i, row in enumerate(rows):
        where = f"row {i} ({row.get('component')} {row.get('resources')})"
        for key in ("component", "scope", "apiGroups", "resources", "verbs", "why"):
            if not row.get(key) and row.get(key) != [""]:
                problems.append(f"{where}: no {key}")
        bad = [s for s in row.get("scope") or [] if s not in SCOPES and not str(s).startswith("namespace/")]
        if bad:
            problems.append(f"{where}: unknown scope {bad}")
        wide_open = (row.get("when") or {}).get("watchNamespaces") != "empty"
        if (
            "cluster" in (row.get("scope") or [])
            and wide_open
            and not str(row.get("unavoidable") or "").strip()
        ):
            problems.append(f"{where}: cluster-scoped with watchNamespaces set, not named unavoidable")
    return problems


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Rendered, Facts]]:
    helm_bin = require_helm()
    tmp = tmp_path_factory.mktemp("rbac")
    return {name: (render(helm_bin, tmp, values), Facts.of(values)) for name, values in CASES.items()}


def test_the_table_is_well_formed_and_names_every_unavoidable_cluster_read() -> None:
    rows = load_table()
    assert len(rows) > 40
    assert row_problems(rows) == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_no_rendered_rule_is_wider_than_the_table(
    rendered: dict[str, tuple[Rendered, Facts]], case: str
) -> None:
    chart, facts = rendered[case]
    grants = grants_of(chart, facts)
    assert {g.component for g in grants} >= {"operator", "gateway"}
    assert violations(grants, load_table(), facts) == []


def test_every_row_is_rendered_by_some_value_set(rendered: dict[str, tuple[Rendered, Facts]]) -> None:
    rows = load_table()
    used: set[int] = set()
    for chart, facts in rendered.values():
        for grant in grants_of(chart, facts):
            used.update(
                i
                for i, row in enumerate(rows)
                if facts.holds(row.get("when") or {}) and _row_allows(row, grant)
            )
    stale = [f"{r['component']} {r['scope']} {r['resources']}" for i, r in enumerate(rows) if i not in used]
    assert stale == []


def test_watched_namespaces_leave_nothing_namespaced_cluster_wide(
    rendered: dict[str, tuple[Rendered, Facts]],
) -> None:
    """With watchNamespaces, what a component does with workloads is a Role in those namespaces
    (and the release namespace), and no case ever lists Secrets cluster-wide."""
    chart, facts = rendered["apiKeys-watched"]
    grants = grants_of(chart, facts)
    # NB: "callers" rows are ClusterRoles nobody holds until an administrator binds them per
    # namespace (sparkrun-tenant, sparkrun-inference): not a component's cluster-wide right. The
    # pre-upgrade check reads (get, list) the six kinds everywhere, only while `helm upgrade` runs
    # it: a CRD applies in every namespace (its row names that unavoidable).
    transient = {"callers", "upgrade-check"}
    cluster = {
        (g.component, g.resource) for g in grants if "cluster" in g.scopes and g.component not in transient
    }
    for resource in (
        "inferenceworkloads",
        "jobsets",
        "services",
        "jobs",
        "endpointslices",
        "secrets",
        "configmaps",
    ):
        assert not {c for c, r in cluster if r == resource}, resource
    where = {g.scopes for g in grants if g.component == "gateway" and g.resource == "secrets"}
    assert {next(s for s in scopes if s.startswith("namespace/")) for scopes in where} == {
        "namespace/team-a",
        "namespace/team-b",
        "namespace/ops",
    }
    for name, (chart, facts) in rendered.items():
        secrets = [
            g for g in grants_of(chart, facts) if g.resource == "secrets" and g.verb in ("list", "watch")
        ]
        assert not [g for g in secrets if "cluster" in g.scopes], name
    default, facts = rendered["apiKeys"]
    keys = {
        g.scopes for g in grants_of(default, facts) if g.resource == "secrets" and g.component == "gateway"
    }
    assert keys == {facts.scopes_of(NAMESPACE), facts.scopes_of("ops")}


def test_the_checker_fails_on_wider_rules(rendered: dict[str, tuple[Rendered, Facts]]) -> None:
    """Each way a rule can be wider than the table is reported."""
    rows = load_table()
    chart, facts = rendered["watched"]
    role = next(d for d in chart.of("Role") if d["metadata"]["name"] == "sparkrun-gateway")

    def widened(change: Any) -> list[str]:
        docs = copy.deepcopy(chart.docs)
        target = next(d for d in docs if d["kind"] == "Role" and d["metadata"] == role["metadata"])
        change(target, docs)
        return violations(grants_of(Rendered(docs), facts), rows, facts)

    def add_verb(doc: dict[str, Any], _: Any) -> None:
        doc["rules"][0]["verbs"].append("delete")

    def add_resource(doc: dict[str, Any], _: Any) -> None:
        doc["rules"][0]["resources"].append("recipes")

    def wildcard(doc: dict[str, Any], _: Any) -> None:
        doc["rules"][1]["verbs"] = ["*"]

    def drop_names(doc: dict[str, Any], _: Any) -> None:
        doc["rules"][2].pop("resourceNames")

    def other_namespace(doc: dict[str, Any], docs: list[dict[str, Any]]) -> None:
        binding = next(
            d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "sparkrun-gateway"
        )
        binding["metadata"]["namespace"] = doc["metadata"]["namespace"] = "elsewhere"

    def cluster_wide(doc: dict[str, Any], docs: list[dict[str, Any]]) -> None:
        doc["kind"] = "ClusterRole"
        doc["metadata"].pop("namespace")
        binding = next(
            d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "sparkrun-gateway"
        )
        binding["kind"] = "ClusterRoleBinding"
        binding["roleRef"]["kind"] = "ClusterRole"

    assert violations(grants_of(chart, facts), rows, facts) == []
    for change in (add_verb, add_resource, wildcard, drop_names, other_namespace, cluster_wide):
        assert widened(change), change.__name__
    assert any("wildcard" in v for v in widened(wildcard))
    # A cluster-scoped row that holds with watchNamespaces set must say why it is unavoidable.
    unnamed = [dict(r) for r in rows]
    nodes = next(r for r in unnamed if "nodes" in r["resources"] and r["component"] == "operator")
    nodes.pop("unavoidable")
    assert row_problems(unnamed)


def test_the_checker_fails_on_grants_to_others_and_aggregation(
    rendered: dict[str, tuple[Rendered, Facts]],
) -> None:
    """A binding grants to its subjects, not to the component its label names: a binding of a
    component's role to a group, a user or another ServiceAccount is reported; so is a bound
    role that aggregates into the built-in roles (its rules would reach every namespace's
    viewers, editors or admins) or is itself an aggregated role (its rules are whatever matches)."""
    rows = load_table()
    chart, facts = rendered["watched"]
    assert violations(grants_of(chart, facts), rows, facts) == []

    def widened(change: Callable[[list[dict[str, Any]]], None]) -> list[str]:
        docs = copy.deepcopy(chart.docs)
        change(docs)
        return violations(grants_of(Rendered(docs), facts), rows, facts)

    def binding(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return next(
            d for d in docs if d["kind"] == "RoleBinding" and d["metadata"]["name"] == "sparkrun-gateway"
        )

    def cluster_role(docs: list[dict[str, Any]]) -> dict[str, Any]:
        return next(
            d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "sparkrun-operator"
        )

    def to_everyone(docs: list[dict[str, Any]]) -> None:
        binding(docs)["subjects"] = [
            {"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": "system:authenticated"}
        ]

    def to_a_tenant_account(docs: list[dict[str, Any]]) -> None:
        binding(docs)["subjects"].append({"kind": "ServiceAccount", "name": "default", "namespace": "team-a"})

    def to_another_component(docs: list[dict[str, Any]]) -> None:
        binding(docs)["subjects"][0]["name"] = "sparkrun-shim"

    def aggregated_into_view(docs: list[dict[str, Any]]) -> None:
        cluster_role(docs)["metadata"]["labels"]["rbac.authorization.k8s.io/aggregate-to-view"] = "true"

    def aggregation_rule(docs: list[dict[str, Any]]) -> None:
        cluster_role(docs)["aggregationRule"] = {
            "clusterRoleSelectors": [
                {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-admin": "true"}}
            ]
        }

    for change in (
        to_everyone,
        to_a_tenant_account,
        to_another_component,
        aggregated_into_view,
        aggregation_rule,
    ):
        assert widened(change), change.__name__


def test_the_operator_applies_engine_policies_but_never_deletes_them(
    rendered: dict[str, tuple[Rendered, Facts]],
) -> None:
    """The engines' NetworkPolicies go with their workload (owner references: the garbage
    collector deletes them) and the planner never deletes one, so the operator holds no
    ``delete`` on NetworkPolicies: a compromised operator could otherwise drop every tenant's."""
    for case in ("defaults", "watched"):
        chart, facts = rendered[case]
        verbs = {
            g.verb
            for g in grants_of(chart, facts)
            if g.component == "operator" and g.resource == "networkpolicies"
        }
        assert verbs == {"get", "list", "watch", "create", "patch"}, case


def account_problems(chart: Rendered) -> list[str]:
    """Pods that run as another component's ServiceAccount (the table's rows are per component:
    a gateway running as the operator's account would hold the operator's rows), or as none
    with a token mounted."""
    accounts = _accounts(chart)
    found = []
    for doc in chart.docs:
        spec = doc.get("spec") or {}
        pod = (spec.get("template") or {}).get("spec") if doc["kind"] != "Pod" else spec
        if not isinstance(pod, dict) or "containers" not in pod:
            continue
        meta = doc["metadata"]
        component = (meta.get("labels") or {}).get("app.kubernetes.io/component")
        account = pod.get("serviceAccountName")
        where = f"{doc['kind']} {meta['name']}"
        if account is None:
            if pod.get("automountServiceAccountToken") is not False:
                found.append(f"{where}: the namespace's default account's token is mounted")
        elif accounts.get((str(meta.get("namespace")), account)) != component:
            found.append(f"{where} ({component}) runs as {account}")
    return found


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_pod_runs_as_its_own_components_account(
    rendered: dict[str, tuple[Rendered, Facts]], case: str
) -> None:
    chart, _ = rendered[case]
    assert account_problems(chart) == []
    swapped = copy.deepcopy(chart.docs)
    gateway = next(
        d for d in swapped if d["kind"] == "Deployment" and d["metadata"]["name"] == "sparkrun-gateway"
    )
    gateway["spec"]["template"]["spec"]["serviceAccountName"] = "sparkrun-operator"
    assert account_problems(Rendered(swapped)) == [
        "Deployment sparkrun-gateway (gateway) runs as sparkrun-operator"
    ]


def test_gateway_watch_namespaces() -> None:
    """One namespace, several (each once, in order), or every namespace (None, or an empty list)."""
    assert namespaces_of(None) == (None,)
    assert namespaces_of("") == (None,)
    assert namespaces_of([]) == (None,)
    assert namespaces_of("a") == ("a",)
    assert namespaces_of(["b", "a", "b", ""]) == ("b", "a")


def test_the_security_page_table_is_generated_from_the_file() -> None:
    tool = hack_script.load("rbac-table.py", "rbac_table")
    page = (REPO / "docs" / "security.md").read_text()
    assert tool.render(page, load_table()) == page
    assert "**Cluster-scoped, unavoidable:** Node, Namespace and PersistentVolume" in page


# ---------------------------------------------------------------- the components on the testbed


def _apply_rendered(
    kube: KubeApi, release: str, namespace: str, values: dict[str, Any], tmp: Path
) -> list[Any]:
    """Apply the operator's and the gateway's rendered RBAC; what lies outside ``namespace``."""
    values_file = tmp / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    argv = [
        require_helm(),
        "template",
        release,
        str(CHART),
        "--namespace",
        namespace,
        "--values",
        str(values_file),
    ]
    for component in ("operator", "gateway", "shim"):
        argv += ["--show-only", f"templates/{component}/rbac.yaml"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    outside = []
    for doc in (d for d in yaml.safe_load_all(out) if d):
        kube.apply(doc)
        meta = doc["metadata"]
        if meta.get("namespace") != namespace:
            outside.append((doc["apiVersion"], doc["kind"], meta["name"], meta.get("namespace")))
    return outside


@pytest.fixture
def unwatched(kube: KubeApi, namespace: str) -> Iterator[tuple[str, str, str]]:
    """Three more namespaces: watched, unwatched, watched."""
    names = (f"{namespace}-a"[:63], f"{namespace}-b"[:63], f"{namespace}-c"[:63])
    for name in names:
        kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield names
    for name in names:
        kube.delete("v1", "Namespace", name)


async def test_components_run_with_the_rendered_roles_of_watched_namespaces(
    testbed: plane.Testbed,
    kube: KubeApi,
    crds: list[str],
    peering_crds: None,
    namespace: str,
    unwatched: tuple[str, str, str],
    operator_factory: Callable[..., Any],
    tmp_path: Path,
) -> None:
    """With watchNamespaces (two), the operator (kopf with namespaced peering) and the gateway (one
    watch per namespace, API keys from them) run as their ServiceAccounts with exactly the chart's
    rendered Roles: a workload in each watched namespace is reconciled to Ready and routed, a key
    works; one in an unwatched namespace is left alone, and listing there is refused."""
    watched, other, second = unwatched
    release = f"r{secrets.token_hex(3)}"
    values = {"watchNamespaces": [watched, second], "gateway": {"auth": {"mode": "apiKeys"}}}
    outside = _apply_rendered(kube, release, namespace, values, tmp_path)
    try:
        configs = {
            c: _kubeconfig(
                testbed,
                service_account_token(kube, namespace, f"{release}-{c}"),
                tmp_path / f"{c}.kubeconfig",
            )
            for c in ("operator", "gateway", "shim")
        }
        proc = operator_factory(
            watched,
            "-n",
            second,
            "-n",
            namespace,
            "--kubeconfig",
            str(configs["operator"]),
            "--executor-namespace",
            namespace,
            standalone=False,
        )
        for ns in (watched, other, second):
            kube.apply(workload("served", ns, model={"name": "Qwen/Qwen3-0.6B", "servedName": f"m-{ns}"}))
        kube.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": "k",
                    "namespace": watched,
                    "labels": {"sparkrun.dev/gateway-key": "true"},
                },
                "stringData": {"key": f"sk-{watched}"},
            }
        )
        for ns in (watched, second):
            wait_condition(kube, ns, "served", "Ready", timeout=120)
            assert jobsets(kube, ns, "served")
        for ns in (watched, second, namespace):  # kopf's namespaced peering: a KopfPeering in each
            assert kube.get("kopf.dev/v1", "KopfPeering", "sparkrun-operator", namespace=ns) is not None
        assert get_workload(kube, other, "served").get("status") is None  # type: ignore[union-attr]
        assert jobsets(kube, other, "served") == []
        log = proc.output()
        assert "Forbidden" not in log, log[-4000:]
        assert " 403" not in log, log[-4000:]

        conn = KubeConnection(kubeconfig=str(configs["gateway"]))
        source = KubeRoutingSource(conn, namespace=[watched, second])  # one watch each
        keys = SecretKeySource(conn, namespace=[watched])
        try:
            await source.start()
            await keys.start()
            async with asyncio.timeout(60):
                table = source.snapshot()
                while not all((w := table.lookup(f"m-{ns}")) and w.routable for ns in (watched, second)):
                    table = await source.wait_changed(table.version)
                for _ in range(600):  # the key Secret's watch (no change callback to wait on)
                    if keys.lookup(f"sk-{watched}") is not None:
                        break
                    await asyncio.sleep(0.1)
            assert table.lookup(f"m-{other}") is None
            grant = keys.lookup(f"sk-{watched}")
            assert grant is not None
            assert grant.namespace == watched
            # The unwatched namespace and the release namespace are refused to both.
            refused = [
                ("gateway", WORKLOADS, other),
                ("gateway", SECRETS, other),
                ("operator", JOBSETS, other),
                ("operator", PODS, None),
                ("shim", WORKLOADS, watched),  # the daemon API serves the release namespace
                ("shim", PODS, other),
                ("shim", PODS, None),
            ]
            refused.append(("gateway", SECRETS, namespace))  # keys only where the gateway serves
            for component, resource, where in refused:
                client = await Kube.connect(field_manager="rbac-test", kubeconfig=str(configs[component]))
                try:
                    with pytest.raises(KubeForbidden):
                        await client.list(resource, where)
                    if component != "gateway":  # GPU occupancy: the served namespaces, one list each
                        seen = await ops_kube.occupancy(client, namespaces=(watched, second, namespace))
                        assert {p.namespace for p in seen.pods if p.workload == "served"} == {watched, second}
                finally:
                    await client.close()
        finally:
            await keys.close()
            await source.close()
            await conn.close()
    finally:
        for api_version, kind, name, ns in outside:
            kube.delete(api_version, kind, name, namespace=ns)
