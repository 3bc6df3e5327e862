"""The chart's ModelCache admission policy (``manifests/modelcache-admission.yaml``, ADR 0040) on
the testbed's real kube-apiserver: a ModelCache's ``tokenSecretRef`` makes the operator send that
Secret to the cache's endpoint, so only who may ``get`` the Secret may name it (CEL's
``authorizer``), on CREATE and on an UPDATE that changes the reference or the endpoint.

Two ServiceAccounts may create and update ModelCaches in a namespace of their own; only
``owner`` may also get the Secret ``hf-owned``. The policy is bound to that namespace only (the
testbed is shared).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed
from tests.operator.admission import MANIFESTS, bound_to, first_refusal, policy_documents, refused, tenant
from tests.operator.conftest import API

POLICY = MANIFESTS / "modelcache-admission.yaml"
SECRET = "hf-owned"
REFUSAL = f"spec.source.huggingFace.tokenSecretRef names Secret {SECRET}"


@dataclass
class Tenants:
    namespace: str
    maker: KubeApi
    owner: KubeApi
    admin: KubeApi


@pytest.fixture(scope="module")
def tenants(testbed: Testbed, crds: list[str], kube: KubeApi) -> Iterator[Tenants]:
    ns = "mc-admission-" + secrets.token_hex(3)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": ns},
            "stringData": {"token": "hf_owned", "other": "hf_other"},
        }
    )
    caches = {
        "apiGroups": ["sparkrun.dev"],
        "resources": ["modelcaches"],
        "verbs": ["get", "list", "create", "update", "patch"],
    }
    reads = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [SECRET]}
    maker = tenant(testbed, kube, ns, "maker", [caches])
    owner = tenant(testbed, kube, ns, "owner", [caches, reads])
    try:
        with bound_to(kube, ns, [policy_documents(POLICY)]):
            yield Tenants(ns, maker, owner, kube)
    finally:
        maker.close()
        owner.close()
        kube.delete("v1", "Namespace", ns)


def _cache(name: str, ns: str, **source: Any) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "ModelCache",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "source": {"huggingFace": {"repo": "org/model", **source}},
            "storage": {"create": {"size": "1Gi"}},
        },
    }


def test_only_who_may_get_the_secret_may_name_it(tenants: Tenants) -> None:
    ns = tenants.namespace
    first = first_refusal(
        lambda name: tenants.maker.create(_cache(name, ns, tokenSecretRef={"name": SECRET})),
        lambda name: tenants.admin.delete(API, "ModelCache", name, namespace=ns),
        f"a ModelCache naming Secret {SECRET}, created by an account that may not get it",
    )
    assert first.status == 403, first
    assert REFUSAL in first.message, first.message
    assert f"system:serviceaccount:{ns}:maker may not get in namespace {ns}" in first.message
    # without a Secret there is nothing to check
    tenants.maker.create(_cache("anonymous", ns, endpoint="https://mirror.example"))
    # a Secret that does not exist is refused too (no get on it): no probing for names
    missing = refused(lambda: tenants.maker.create(_cache("m", ns, tokenSecretRef={"name": "nope"})))
    assert "names Secret nope" in missing.message
    # the owner may get it: admitted
    owned = tenants.owner.create(_cache("owned", ns, tokenSecretRef={"name": SECRET}))
    assert owned["spec"]["source"]["huggingFace"]["tokenSecretRef"]["name"] == SECRET


def test_updates_of_another_s_cache(tenants: Tenants) -> None:
    """``maker`` may update a cache that names a Secret it may not get (a pin: the policy lets
    through updates that move no Secret); where the Secret goes cannot change at all (the CRD
    keeps spec.source immutable; the policy would check such an update too)."""
    ns = tenants.namespace
    tenants.owner.create(_cache("shared", ns, tokenSecretRef={"name": SECRET}))
    path = tenants.maker.resource_path(API, "ModelCache", namespace=ns, name="shared")
    merge = {"Content-Type": "application/merge-patch+json"}
    pinned = tenants.maker.request("PATCH", path, json={"spec": {"pinned": True}}, headers=merge).json()
    assert pinned["spec"]["pinned"] is True
    for change in (
        {"endpoint": "http://caller.example"},
        {"tokenSecretRef": {"name": SECRET, "key": "other"}},
    ):
        body = {"spec": {"source": {"huggingFace": change}}}
        with pytest.raises(ApiError) as denied:
            tenants.maker.request("PATCH", path, json=body, headers=merge)
        assert denied.value.status == 422, change
        assert "source is immutable" in denied.value.message, change
