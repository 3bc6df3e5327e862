"""The admission corpus against the real kube-apiserver: the generated CRDs' schemas and CEL
rules accept every example and refuse every invalid case with its field path and message.

The corpus (``tests/corpus.py``) is shared with the offline schema test in ``tests/unit``.
Manifests are sent by server-side apply, as GitOps tools and ``kubectl apply --server-side`` do.
Schema and CEL violations are ``422 Invalid``; undeclared fields and wrong types are refused
earlier, when the apply patch is typed, with ``500`` (an upstream bug, see below).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from tests.corpus import INVALID, VALID, InvalidCase

pytestmark = pytest.mark.testbed


@pytest.fixture(scope="module")
def admission_namespace(kube: KubeApi, crds: list[str]) -> Iterator[str]:
    # NB: one namespace for the whole corpus; a namespace per case would cost a second each.
    name = f"t-admission-{secrets.token_hex(3)}"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    kube.delete("v1", "Namespace", name)


def _cleanup(kube: KubeApi, manifest: dict[str, Any], namespace: str) -> None:
    meta = manifest["metadata"]
    kube.delete(
        manifest["apiVersion"], manifest["kind"], meta["name"], namespace=meta.get("namespace", namespace)
    )


@pytest.mark.parametrize("manifest", VALID, ids=lambda m: f"{m['kind']}-{m['metadata']['name']}")
def test_valid_manifest_is_accepted(
    kube: KubeApi, admission_namespace: str, manifest: dict[str, Any]
) -> None:
    stored = kube.apply(manifest, namespace=admission_namespace)
    try:
        assert stored["metadata"]["name"] == manifest["metadata"]["name"]
        assert stored["metadata"]["generation"] == 1
    finally:
        _cleanup(kube, manifest, admission_namespace)


@pytest.mark.parametrize("case", INVALID, ids=lambda c: c.name)
def test_invalid_manifest_is_rejected_with_its_field_path(
    kube: KubeApi, admission_namespace: str, case: InvalidCase
) -> None:
    try:
        if case.old is not None:
            kube.apply(case.old, namespace=admission_namespace)
        with pytest.raises(ApiError) as info:
            kube.apply(case.manifest, namespace=admission_namespace)
    finally:
        _cleanup(kube, case.manifest, admission_namespace)
    error = info.value
    if error.status == 500:
        # Server-side apply types the patch against the schema before validation; an undeclared
        # field or a wrong type fails there with HTTP 500 (kubernetes/kubernetes#139253, open).
        assert error.message.startswith("failed to create typed patch object"), error
    else:
        assert error.status == 422, error
        assert error.reason == "Invalid", error
    assert case.field_path in error.message
    if case.message is not None:
        assert case.message in error.message
