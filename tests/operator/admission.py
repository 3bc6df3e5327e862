"""Tenants with limited RBAC, and the chart's admission policies bound to one namespace, on the
testbed's real kube-apiserver (the admission tests share them).

- :func:`tenant` creates a ServiceAccount with a Role of its own and returns a client with its
  token: requests made through it are authorized, and admitted, as that account.
- :func:`chart_policies` reads the ValidatingAdmissionPolicies of ``manifests/`` (the chart's
  rendered output) that match a resource; :func:`bound_to` installs them under per-namespace names,
  bound to that namespace only (the testbed is shared), and removes them afterwards.
- :func:`refused` and :func:`first_refusal` turn an admission refusal into the error to inspect.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed
from tests.operator.conftest import REPO
from tests.shim.harness import service_account_token

ADMISSION = "admissionregistration.k8s.io/v1"
MANIFESTS = REPO / "manifests"
POLICY_KINDS = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]


def tenant(testbed: Testbed, kube: KubeApi, ns: str, account: str, rules: list[dict[str, Any]]) -> KubeApi:
    """A client authenticated as ServiceAccount ``ns/account``, which may do ``rules`` in ``ns``
    (and nothing else). The caller closes it."""
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}}
    )
    rbac = "rbac.authorization.k8s.io/v1"
    kube.create(
        {"apiVersion": rbac, "kind": "Role", "metadata": {"name": account, "namespace": ns}, "rules": rules}
    )
    kube.create(
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": account, "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account},
            "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": ns}],
        }
    )
    return KubeApi(
        server=testbed.server, ca_pem=testbed.ca_pem, token=service_account_token(kube, ns, account)
    )


def policy_documents(path: Path) -> list[dict[str, Any]]:
    """The policy and its binding in one rendered file."""
    docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert [d["kind"] for d in docs] == POLICY_KINDS, path
    return docs


def chart_policies(resource: str) -> list[list[dict[str, Any]]]:
    """Every policy (with its binding) of ``manifests/`` that matches ``resource`` (a plural of
    sparkrun.dev)."""
    found = []
    for path in sorted(MANIFESTS.glob("*.yaml")):
        docs = [d for d in yaml.safe_load_all(path.read_text()) if d]
        if [d.get("kind") for d in docs] != POLICY_KINDS:
            continue
        rules = docs[0]["spec"]["matchConstraints"]["resourceRules"]
        if any(resource in rule.get("resources", ()) for rule in rules):
            found.append(docs)
    return found


@contextmanager
def bound_to(kube: KubeApi, ns: str, policies: list[list[dict[str, Any]]]) -> Iterator[list[str]]:
    """Install ``policies`` as ``<name>-<ns>``, each bound to namespace ``ns`` only; their names."""
    names: list[str] = []
    try:
        for docs in policies:
            vap, binding = copy.deepcopy(docs)
            name = f"{vap['metadata']['name']}-{ns}"
            names.append(name)
            vap["metadata"]["name"] = name
            binding["metadata"]["name"] = name
            binding["spec"]["policyName"] = name
            binding["spec"]["matchResources"] = {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
            }
            kube.apply(vap)
            kube.apply(binding)
        yield names
    finally:
        for name in names:
            kube.delete(ADMISSION, "ValidatingAdmissionPolicyBinding", name)
            kube.delete(ADMISSION, "ValidatingAdmissionPolicy", name)


def refused(call: Callable[[], Any]) -> ApiError:
    """The apiserver's refusal of ``call``."""
    try:
        call()
    except ApiError as error:
        return error
    raise AssertionError("the apiserver admitted it")


def first_refusal(create: Callable[[str], Any], undo: Callable[[str], Any], what: str) -> ApiError:
    """A policy takes effect within seconds of its creation: ``create(name)`` with fresh names
    until the apiserver refuses one (each admitted object is removed with ``undo``)."""
    deadline = time.monotonic() + 30
    for attempt in range(1000):
        name = f"probe-{attempt}"
        try:
            create(name)
        except ApiError as error:
            return error
        undo(name)
        assert time.monotonic() < deadline, f"admitted for 30 s: {what}"
        time.sleep(0.5)
    raise AssertionError(f"admitted 1000 times: {what}")
