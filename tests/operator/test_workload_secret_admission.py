"""The chart's InferenceWorkload admission policy (``manifests/workload-secrets-admission.yaml``,
ADR 0041) on the testbed's real kube-apiserver.

An engine runs an image and arguments its workload's author chooses, with the Secrets and
ConfigMaps that ``spec.engine.env[].valueFrom`` names in its environment: so only who may ``get``
each of them may name it (CEL's ``authorizer``), on CREATE and on an UPDATE that changes anything
but ``state``, ``replicas`` and ``rollout`` (a new image or new arguments could print what the old
ones kept; a rollout change only picks among admitted revisions).

Two ServiceAccounts may create and update InferenceWorkloads in a namespace of their own; only
``owner`` may also get the Secret ``hf-owned`` and the ConfigMap ``cm-owned``. Every chart policy
that matches InferenceWorkloads is bound to that namespace only (the testbed is shared).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, cast

import pytest
from pydantic import ValidationError

from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.workloads.request import workload_spec
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed
from tests.operator.admission import ADMISSION, bound_to, chart_policies, first_refusal, refused, tenant
from tests.operator.conftest import API, workload

SECRET = "hf-owned"
CONFIG_MAP = "cm-owned"
#: The references one workload may make (each is an authorization check at admission).
MAX_REFERENCES = 16
MERGE = {"Content-Type": "application/merge-patch+json"}


@dataclass
class Tenants:
    namespace: str
    maker: KubeApi
    owner: KubeApi
    admin: KubeApi
    #: The chart's policies, as installed for this namespace.
    policies: list[str]


@pytest.fixture(scope="module")
def tenants(testbed: Testbed, crds: list[str], kube: KubeApi) -> Iterator[Tenants]:
    ns = "iw-admission-" + secrets.token_hex(3)
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    meta = {"namespace": ns}
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, **meta},
            "stringData": {"token": "hf_x"},
        }
    )
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": CONFIG_MAP, **meta},
            "data": {"k": "v"},
        }
    )
    workloads = {
        "apiGroups": ["sparkrun.dev"],
        "resources": ["inferenceworkloads"],
        "verbs": ["get", "list", "create", "update", "patch"],
    }
    reads = [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": [SECRET]},
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"], "resourceNames": [CONFIG_MAP]},
    ]
    maker = tenant(testbed, kube, ns, "maker", [workloads])
    owner = tenant(testbed, kube, ns, "owner", [workloads, *reads])
    try:
        with bound_to(kube, ns, chart_policies("inferenceworkloads")) as policies:
            yield Tenants(ns, maker, owner, kube, policies)
    finally:
        maker.close()
        owner.close()
        kube.delete("v1", "Namespace", ns)


def _secret(env: str, name: str = SECRET, **extra: Any) -> dict[str, Any]:
    return {"name": env, "valueFrom": {"secretKeyRef": {"name": name, "key": "token", **extra}}}


def _served(name: str, ns: str, *env: dict[str, Any]) -> dict[str, Any]:
    return workload(name, ns, engine={"env": list(env)})


def test_only_who_may_get_a_secret_may_have_an_engine_read_it(tenants: Tenants) -> None:
    ns, maker = tenants.namespace, tenants.maker
    first = first_refusal(
        lambda name: maker.create(_served(name, ns, _secret("HF_TOKEN"))),
        lambda name: tenants.admin.delete(API, "InferenceWorkload", name, namespace=ns),
        f"an InferenceWorkload whose engine env reads Secret {SECRET}, created by an account that may "
        "not get it",
    )
    assert first.status == 403, first
    assert (
        f"spec.engine.env HF_TOKEN: valueFrom.secretKeyRef names Secret {SECRET}, which "
        f"system:serviceaccount:{ns}:maker may not get in namespace {ns}"
    ) in first.message, first.message
    # literal values and the pod's own fields are not references
    plain: list[dict[str, Any]] = [
        {"name": "A", "value": "1"},
        {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
    ]
    maker.create(_served("plain", ns, *plain))
    # a Secret that does not exist is refused too (no get on it): no probing for names
    missing = refused(lambda: maker.create(_served("missing", ns, _secret("T", "nope"))))
    assert "valueFrom.secretKeyRef names Secret nope, which" in missing.message, missing.message
    config = {"name": "C", "valueFrom": {"configMapKeyRef": {"name": CONFIG_MAP, "key": "k"}}}
    denied = refused(lambda: maker.create(_served("config", ns, config)))
    assert (
        f"spec.engine.env C: valueFrom.configMapKeyRef names ConfigMap {CONFIG_MAP}, which" in denied.message
    )
    # the owner may get both: admitted
    owned = tenants.owner.create(_served("owned", ns, _secret("HF_TOKEN"), config, *plain))
    assert owned["spec"]["engine"]["env"][0]["valueFrom"]["secretKeyRef"]["name"] == SECRET


@pytest.mark.parametrize(
    ("source", "why"),
    [
        ({"SecretKeyRef": {"name": SECRET, "key": "token"}}, "valueFrom.SecretKeyRef is not a source"),
        ({"secretkeyref": {"name": SECRET, "key": "token"}}, "valueFrom.secretkeyref is not a source"),
        ({"secretKeyRef": {"key": "token"}}, "valueFrom.secretKeyRef needs the name"),
        ({"secretKeyRef": {"name": 7}}, "valueFrom.secretKeyRef needs the name"),
        ({"secretKeyRef": "hf-owned"}, "valueFrom.secretKeyRef needs the name"),
    ],
)
def test_what_a_decoder_could_read_otherwise_is_refused(
    tenants: Tenants, source: dict[str, Any], why: str
) -> None:
    """The owner may get the Secret, but a reference the policy cannot read as Kubernetes would
    (another spelling of a source, a name that is not a string) is refused for everyone."""
    env = {"name": "T", "valueFrom": source}
    error = refused(
        lambda: tenants.owner.create(_served("odd-" + secrets.token_hex(2), tenants.namespace, env))
    )
    assert error.status == 422, error
    assert f"spec.engine.env T: {why}" in error.message, error.message


def test_every_reference_is_checked_up_to_the_bound(tenants: Tenants) -> None:
    """Each reference is one authorization check (CEL allows two per expression and 28 per
    policy evaluation): at most 16 per workload; the owner's 16 pass, the 17th is refused."""
    ns = tenants.namespace
    many = [_secret(f"T{i}") for i in range(MAX_REFERENCES)]
    tenants.owner.create(_served("sixteen", ns, *many))
    # the maker's reference hidden behind 15 of the owner's Secret is still seen
    hidden = [*many[:-1], _secret("LAST", "nope")]
    error = refused(lambda: tenants.owner.create(_served("hidden", ns, *hidden)))
    assert "spec.engine.env LAST: valueFrom.secretKeyRef names Secret nope" in error.message, error.message
    error = refused(lambda: tenants.owner.create(_served("too-many", ns, *many, _secret("T99"))))
    assert error.status == 422, error
    assert f"{MAX_REFERENCES + 1} Secret or ConfigMap references; at most {MAX_REFERENCES}" in error.message


def test_updates_of_another_s_workload(tenants: Tenants) -> None:
    """``maker`` may scale, stop and label a workload that reads a Secret it may not get (what
    runs does not change), but not change its image, arguments or references: the new engine would
    read the Secret. An update that moves no reference and changes nothing that runs passes."""
    ns = tenants.namespace
    tenants.owner.create(_served("shared", ns, _secret("HF_TOKEN")))
    path = tenants.maker.resource_path(API, "InferenceWorkload", namespace=ns, name="shared")
    unchanged: list[dict[str, Any]] = [
        {"spec": {"replicas": 2}},
        {"spec": {"state": "Stopped"}},
        {"metadata": {"labels": {"team": "a"}, "annotations": {"note": "x"}}},
    ]
    for change in unchanged:
        tenants.maker.request("PATCH", path, json=change, headers=MERGE)
    changed: list[dict[str, Any]] = [
        {"engine": {"image": "caller.example/prints-env:1"}},
        {"engine": {"args": ["--trust-remote-code"]}},
        {"model": {"name": "caller/model"}},
        {"engine": {"env": [_secret("HF_TOKEN"), _secret("OTHER")]}},
    ]
    for change in changed:
        with pytest.raises(ApiError) as denied:
            tenants.maker.request("PATCH", path, json={"spec": change}, headers=MERGE)
        assert denied.value.status == 403, change
        assert f"valueFrom.secretKeyRef names Secret {SECRET}, which" in denied.value.message, change
    owned = tenants.owner.request(
        "PATCH", path, json={"spec": {"engine": {"args": ["--seed=1"]}}}, headers=MERGE
    )
    assert owned.json()["spec"]["engine"]["args"] == ["--seed=1"]
    # a workload that reads no Secret: anyone who may update it may change it
    tenants.owner.create(workload("free", ns))
    free = tenants.maker.resource_path(API, "InferenceWorkload", namespace=ns, name="free")
    tenants.maker.request("PATCH", free, json={"spec": {"engine": {"image": "x.example/e:1"}}}, headers=MERGE)


def test_rollout_only_changes_need_no_secret_rights(tenants: Tenants) -> None:
    """``spec.rollout`` picks among revisions the operator made from admitted specs (a rollback
    never brings back a reference the spec no longer names): ``maker``, who may not get the
    Secret, may pin, unpin and approve (what the daemon API's rollback / apply_drift and the
    CLI's rollout verbs write), but a rollout change that also touches the engine is refused."""
    ns = tenants.namespace
    tenants.owner.create(
        workload("rolled", ns, engine={"env": [_secret("HF_TOKEN")]}, rollout={"apply": "OnRequest"})
    )
    path = tenants.maker.resource_path(API, "InferenceWorkload", namespace=ns, name="rolled")
    patches: list[dict[str, Any]] = [
        {"rollout": {"revision": 1}},
        {"rollout": {"revision": None, "approve": "0123456789"}},
        {"rollout": {"approve": None, "revisionHistoryLimit": 3}},
    ]
    for change in patches:
        tenants.maker.request("PATCH", path, json={"spec": change}, headers=MERGE)
    rollout = (tenants.admin.get(API, "InferenceWorkload", "rolled", namespace=ns) or {})["spec"]["rollout"]
    assert (rollout.get("revision"), rollout.get("approve"), rollout["revisionHistoryLimit"]) == (
        None,
        None,
        3,
    )
    with pytest.raises(ApiError) as denied:
        tenants.maker.request(
            "PATCH",
            path,
            json={"spec": {"rollout": {"revision": 1}, "engine": {"image": "caller.example/prints-env:1"}}},
            headers=MERGE,
        )
    assert denied.value.status == 403
    assert f"valueFrom.secretKeyRef names Secret {SECRET}, which" in denied.value.message


def test_the_apiserver_type_checks_the_policy_without_warnings(tenants: Tenants) -> None:
    """``valueFrom`` is free-form in the CRD: the policy reads it as JSON, and the apiserver's
    type check of the policy (status.typeChecking) has nothing to say about that."""
    assert tenants.policies, "no chart policy matches inferenceworkloads"
    for name in tenants.policies:

        def checked(name: str = name) -> dict[str, Any] | None:
            found = tenants.admin.get(ADMISSION, "ValidatingAdmissionPolicy", name) or {}
            status: dict[str, Any] = found.get("status") or {}
            return status if status.get("observedGeneration") == found["metadata"]["generation"] else None

        status = tenants.admin.wait(checked, timeout=30, what=f"type checking of {name}")
        assert not (status.get("typeChecking") or {}).get("expressionWarnings"), status


def test_a_daemon_api_launch_names_no_secret() -> None:
    """Why the shim is not exempt and needs no check of its own: it creates InferenceWorkloads as
    itself (it may get Secrets in its namespace, so the policy would admit a reference it wrote),
    but a launch's overrides are a closed set that sets no env, and a Recipe's env holds literal
    values only."""
    ctx = OperationContext(
        rest=cast(Kube, None), settings=Settings(namespace="ns"), principal="p", job_id="j"
    )
    overrides = {
        "tp": 2,
        "pp": 1,
        "max_model_len": 4096,
        "gpu_memory_utilization": 0.9,
        "served_model_name": "s",
        "enable_sleep_mode": True,
    }
    recipe = RecipeSpec(model="o/m", env={"A": "1"})
    spec = workload_spec(ctx, {"recipe": "r", "overrides": overrides}, recipe, cluster=None)
    assert "env" not in spec.get("engine", {}), spec
    ref = {"valueFrom": {"secretKeyRef": {"name": SECRET, "key": "token"}}}
    with pytest.raises(Invalid, match="override 'env' is not supported"):
        workload_spec(
            ctx, {"recipe": "r", "overrides": {"env": [{"name": "T", **ref}]}}, recipe, cluster=None
        )
    with pytest.raises(ValidationError):
        RecipeSpec.model_validate({"model": "o/m", "env": {"T": ref["valueFrom"]}})
