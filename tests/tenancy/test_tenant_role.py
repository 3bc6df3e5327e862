"""Issue 26: tenants act with the roles the docs define, on the testbed's real kube-apiserver.

Two tenant namespaces; in each, a ServiceAccount whose token the TokenRequest API mints, bound
with a RoleBinding to the chart's ClusterRole ``sparkrun-tenant`` (rendered by the pinned helm
from the multi-tenant example values, ``examples/helm/values-multitenant.yaml``, with this
test's namespaces), and the chart's admission policies of that profile (names and pod settings)
bound to both namespaces. As tenant A, every call below goes through the apiserver's own
authentication, RBAC and admission (docs/security.md, "Multi-tenant install"):

- A runs a workload in its own namespace under a name inside its prefixes, scales it, and may
  name the ServiceAccount the administrator allowed it;
- A cannot create anything in B's namespace, cannot write a workload's status (rule 8: the names
  of a recipe-based workload), cannot create DaemonJobs or read Secrets, cannot claim B's names
  in its spec, and cannot run engines as an account the administrator did not allow.

The gateway side of the same tenants is ``test_gateway_auth.py``; the names a Recipe decides
(which admission cannot read) are ``test_names.py``.
"""

from __future__ import annotations

import contextlib
import copy
import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.deploy.chart import REPO, render, require_helm
from tests.operator.admission import bound_to, first_refusal, refused
from tests.operator.conftest import API, workload
from tests.shim.harness import retry, service_account_token

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]

RBAC = "rbac.authorization.k8s.io/v1"
MODEL = "Qwen/Qwen3-0.6B"
EXAMPLE = REPO / "examples/helm/values-multitenant.yaml"


@dataclass
class Tenants:
    a: str
    b: str
    as_a: KubeApi


def _profile(a: str, b: str) -> dict[str, Any]:
    """The documented multi-tenant values, with this test's namespaces in place of the example's."""
    values: dict[str, Any] = yaml.safe_load(EXAMPLE.read_text())
    assert values["watchNamespaces"] == ["team-a", "team-b"], "the example changed: update this test"
    values["watchNamespaces"] = [a, b]
    values["tenancy"]["names"]["prefixes"] = {a: ["team-a/"], b: ["team-b/"], "*": []}
    values["tenancy"]["serviceAccounts"] = {a: ["engine"]}
    return values


def _policies(docs: list[dict[str, Any]], suffix: str) -> list[dict[str, Any]]:
    found = [
        d
        for d in docs
        if d["kind"].startswith("ValidatingAdmissionPolicy") and d["metadata"]["name"].endswith(suffix)
    ]
    assert [d["kind"] for d in found] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return found


def _bind(kube: KubeApi, namespace: str, account: str, role: str) -> None:
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": namespace}}
    )
    kube.create(
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": account, "namespace": namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}],
        }
    )


def _until_in_effect(kube: KubeApi, namespace: str) -> None:
    """Both policies refuse (probed as the administrator, each admitted probe removed), so that
    what the tenant then meets is the policies', not their propagation's."""

    def undo(name: str) -> None:
        kube.delete(API, "InferenceWorkload", name, namespace=namespace)

    first_refusal(
        lambda name: kube.create(workload(name, namespace, model={"name": MODEL, "servedName": "elsewhere"})),
        undo,
        "the names policy",
    )
    first_refusal(
        lambda name: kube.create(
            workload(
                name,
                namespace,
                model={"name": MODEL, "servedName": "team-a/p"},
                pod={"serviceAccountName": "x"},
            )
        ),
        undo,
        "the pod policy",
    )


def _until_allowed(as_a: KubeApi, namespace: str) -> None:
    """The tenant's RoleBinding is in effect (RBAC's authorizer caches: right after the binding
    is created, the tenant's first call may still be refused): asked as the tenant."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "group": "sparkrun.dev",
                "resource": "inferenceworkloads",
                "verb": "create",
                "namespace": namespace,
            }
        },
    }
    as_a.wait(
        lambda: as_a.create(review)["status"].get("allowed", False),
        timeout=30,
        what=f"the tenant's RoleBinding in {namespace}",
    )


@pytest.fixture
def tenants(testbed: Testbed, kube: KubeApi, tmp_path: Path) -> Iterator[Tenants]:
    suffix = secrets.token_hex(3)
    a, b = f"t-tenant-a-{suffix}", f"t-tenant-b-{suffix}"
    rendered = render(require_helm(), tmp_path, _profile(a, b))
    role = next(
        d for d in rendered.docs if d["kind"] == "ClusterRole" and d["metadata"]["name"] == "sparkrun-tenant"
    )
    # NB: the chart's name is fixed and cluster-wide: applied under a name of this test's own, so
    # a helm install of the chart elsewhere in the suite never meets a copy it does not own.
    role = copy.deepcopy(role)
    role["metadata"]["name"] = f"sparkrun-tenant-{suffix}"
    policies = [_policies(rendered.docs, "-workload-names"), _policies(rendered.docs, "-workload-pod")]
    as_a: KubeApi | None = None
    try:
        for ns in (a, b):
            kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            kube.wait(
                lambda ns=ns: kube.get("v1", "ServiceAccount", "default", namespace=ns), timeout=30, what="SA"
            )
        kube.apply(role)
        for ns in (a, b):
            _bind(kube, ns, "author", role["metadata"]["name"])
        kube.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "engine", "namespace": a}}
        )
        token = retry(lambda: service_account_token(kube, a, "author"))
        as_a = KubeApi(server=testbed.server, ca_pem=testbed.ca_pem, token=token)
        _until_allowed(as_a, a)
        with contextlib.ExitStack() as stack:
            for ns in (a, b):
                stack.enter_context(bound_to(kube, ns, policies))
            _until_in_effect(kube, a)
            yield Tenants(a, b, as_a)
    finally:
        if as_a is not None:
            as_a.close()
        for ns in (a, b):
            kube.delete("v1", "Namespace", ns)
        kube.delete(RBAC, "ClusterRole", role["metadata"]["name"])


def test_a_tenant_runs_its_own_models_and_nothing_of_anyone_else(tenants: Tenants, kube: KubeApi) -> None:
    a, b, as_a = tenants.a, tenants.b, tenants.as_a

    # its own namespace, a name inside its prefixes, and the account the administrator allowed
    mine = workload(
        "support-bot",
        a,
        model={"name": MODEL, "servedName": "team-a/support"},
        state="Stopped",
        pod={"serviceAccountName": "engine"},
    )
    created = retry(lambda: as_a.create(mine))
    assert created["spec"]["model"]["servedName"] == "team-a/support"
    scale_path = as_a.resource_path(API, "InferenceWorkload", namespace=a, name="support-bot") + "/scale"
    scale = as_a.request("GET", scale_path).json()
    assert scale["kind"] == "Scale"

    # the other tenant's namespace: RBAC says no, whatever the name
    other = refused(
        lambda: as_a.create(workload("support-bot", b, model={"name": MODEL, "servedName": "team-b/x"}))
    )
    assert other.status == 403, other
    assert "forbidden" in other.message.lower(), other

    # the other tenant's names, in its own namespace: the names policy says no
    squat = refused(
        lambda: as_a.create(workload("squat", a, model={"name": MODEL, "servedName": "team-b/support"}))
    )
    assert '"team-b/support" may not be claimed from namespace ' + a in squat.message, squat
    by_alias = refused(
        lambda: as_a.create(
            workload(
                "alias-squat", a, model={"name": MODEL, "servedName": "team-a/x", "aliases": ["team-b/x"]}
            )
        )
    )
    assert '"team-b/x"' in by_alias.message, by_alias

    # an engine account the administrator did not allow
    intruder = refused(
        lambda: as_a.create(
            workload(
                "intruder",
                a,
                model={"name": MODEL, "servedName": "team-a/y"},
                pod={"serviceAccountName": "builder"},
            )
        )
    )
    assert "builder" in intruder.message, intruder

    # rule 8: a workload's status names its routes; only the operator writes it
    status_path = as_a.resource_path(API, "InferenceWorkload", namespace=a, name="support-bot") + "/status"
    forged = refused(
        lambda: as_a.request(
            "PATCH",
            status_path,
            json={"status": {"model": {"name": MODEL, "servedName": "team-b/support"}}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    )
    assert forged.status == 403, forged

    # the daemon API's jobs and the namespace's Secrets are not the tenant role's
    job = refused(
        lambda: as_a.create(
            {"apiVersion": API, "kind": "DaemonJob", "metadata": {"name": "j1", "namespace": a}, "spec": {}}
        )
    )
    assert job.status == 403, job
    secrets_read = refused(lambda: as_a.list_items("v1", "Secret", namespace=a))
    assert secrets_read.status == 403, secrets_read

    # nothing of A's refusals left an object behind, and B's namespace is untouched
    names = {w["metadata"]["name"] for w in kube.list_items(API, "InferenceWorkload", namespace=a)}
    assert names == {"support-bot"}
    assert kube.list_items(API, "InferenceWorkload", namespace=b) == []
