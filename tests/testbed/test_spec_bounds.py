"""The apiserver enforces the bounds of the CRD specs (issue 23, ``api/bounds.py``) with the
field path, accepts values at the bound, and ratchets: an object stored before a bound existed
stays served and may be updated as long as the offending field is unchanged.

The offline twin (``tests/unit/test_spec_bounds.py``) checks the same bounds with
``sparkrun-k8s validate``'s code.
"""

from __future__ import annotations

import copy
import json
import secrets
from collections.abc import Iterator
from typing import Any

import pytest

from sparkrun_operator.api import bounds
from sparkrun_operator.api.crdgen import crd
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD, Kind
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed
from tests.corpus import load_examples

pytestmark = pytest.mark.testbed


def _example(name: str, new_name: str) -> dict[str, Any]:
    doc = copy.deepcopy(load_examples()[name])
    doc["metadata"]["name"] = new_name
    return doc


def _refused(kube: KubeApi, manifest: dict[str, Any], namespace: str) -> ApiError:
    with pytest.raises(ApiError) as info:
        kube.create(manifest, namespace=namespace)
    assert info.value.status == 422, info.value
    return info.value


def _nest(depth: int) -> dict[str, Any]:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    result: dict[str, Any] = value
    return result


def test_an_engine_argument_over_32_kib_is_refused_with_its_path_and_30_kib_is_served(
    kube: KubeApi, crds: list[str], namespace: str
) -> None:
    ok = _example("inferenceworkload", "args-30k")
    ok["spec"]["engine"]["args"] = ["--chat-template=" + "x" * 30 * 1024, "y" * bounds.ARG_MAX_LENGTH]
    stored = kube.create(ok, namespace=namespace)
    assert [len(a) for a in stored["spec"]["engine"]["args"]] == [16 + 30 * 1024, bounds.ARG_MAX_LENGTH]
    over = _example("inferenceworkload", "args-over")
    over["spec"]["engine"]["args"] = ["y" * (bounds.ARG_MAX_LENGTH + 1)]
    error = _refused(kube, over, namespace)
    assert "spec.engine.args[0]: Too long: may not be more than 32768" in error.message


def test_label_keys_values_patterns_env_and_principals_over_their_bounds_are_refused(
    kube: KubeApi, crds: list[str], namespace: str
) -> None:
    wl = _example("inferenceworkload", "selector-key")
    wl["spec"]["scheduling"] = {"nodeSelector": {"k" * 318: "v"}}
    error = _refused(kube, wl, namespace)
    assert "spec.scheduling.nodeSelector: Invalid value" in error.message
    assert "keys may not be longer than 317 characters" in error.message
    wl["spec"]["scheduling"] = {"nodeSelector": {"k": "v" * 64}, "tolerations": [{"key": "k" * 318}]}
    error = _refused(kube, wl, namespace)
    assert "spec.scheduling.nodeSelector.k: Too long" in error.message
    assert "spec.scheduling.tolerations[0].key: Too long" in error.message
    wl["spec"]["scheduling"] = {}
    wl["spec"]["engine"]["env"] = [{"name": "A", "value": "v" * (bounds.ENV_VALUE_MAX_LENGTH + 1)}]
    assert "spec.engine.env[0].value: Too long" in _refused(kube, wl, namespace).message
    cache = _example("modelcache", "patterns")
    cache["spec"]["source"]["huggingFace"]["allowPatterns"] = ["*" * (bounds.PATTERN_MAX_LENGTH + 1)]
    error = _refused(kube, cache, namespace)
    assert "spec.source.huggingFace.allowPatterns[0]: Too long" in error.message
    job = _example("daemonjob", "groups")
    job["spec"]["principal"]["groups"] = ["g" * (bounds.GROUP_MAX_LENGTH + 1)]
    assert "spec.principal.groups[0]: Too long" in _refused(kube, job, namespace).message


def test_free_form_values_are_bounded_in_depth(kube: KubeApi, crds: list[str], namespace: str) -> None:
    recipe = _example("recipe", "depth-ok")
    recipe["spec"]["defaults"] = {"hf_overrides": _nest(bounds.RECIPE_DEFAULTS_DEPTH - 1), "port": 8000}
    kube.create(recipe, namespace=namespace)
    # 2000 levels: the apiserver's JSON decoder allows 10,000; Python's json fails at ~1000 (so
    # the body is written by hand, and an operator could not have read the object back).
    deep = _example("recipe", "depth-bomb")
    deep["spec"]["defaults"] = {"deep": "DEEP"}
    body = json.dumps(deep).replace('"DEEP"', '{"a": ' * 2000 + "1" + "}" * 2000)
    with pytest.raises(ApiError) as info:
        kube.request(
            "POST",
            kube.resource_path(deep["apiVersion"], "Recipe", namespace=namespace),
            content=body,
            headers={"Content-Type": "application/json"},
        )
    assert info.value.status == 422, info.value
    where = "spec.defaults.deep" + ".a" * (bounds.RECIPE_DEFAULTS_DEPTH - 1)
    assert f"{where}: Too many: 1: must have at most 0 items" in info.value.message


def test_rules_over_bounded_free_form_values_still_see_them(
    kube: KubeApi, crds: list[str], namespace: str
) -> None:
    # The InferenceBenchmark spec is immutable (CEL self == oldSelf over the whole spec): the
    # free-form benchArgs, now a schema of untyped levels, must still take part in it.
    bench = _example("inferencebenchmark", "free-form")
    bench["spec"]["benchArgs"] = {"depth": [1, 2], "extra": {"k": "v"}}
    bench["spec"]["scenarios"][0]["args"] = {"tg": [32, 64]}
    kube.create(bench, namespace=namespace)
    path = kube.resource_path(
        bench["apiVersion"], "InferenceBenchmark", namespace=namespace, name="free-form"
    )

    def patch(body: dict[str, Any]) -> None:
        kube.request(
            "PATCH", path, content=json.dumps(body), headers={"Content-Type": "application/merge-patch+json"}
        )

    patch({"metadata": {"annotations": {"sparkrun.dev/resume": "1"}}})
    kube.apply(bench, namespace=namespace)  # the same spec again
    scenarios = copy.deepcopy(bench["spec"]["scenarios"])
    scenarios[0]["args"] = {"tg": [32, 65]}
    for change in ({"benchArgs": {"extra": {"k": "w"}}}, {"scenarios": scenarios}):
        with pytest.raises(ApiError) as info:
            patch({"spec": change})
        assert info.value.status == 422, info.value
        assert "spec is immutable" in info.value.message


# -- ratcheting ---------------------------------------------------------------------------------

PROBE_GROUP = "bounds-probe.sparkrun.dev"


def renamed_crd(kind: Kind, group: str, probe: str) -> dict[str, Any]:
    """The generated CRD of ``kind`` under ``group`` as kind ``probe`` (lowercase plural ``+s``):
    a copy to change and install beside the real one on the shared testbed."""
    doc = crd(kind)
    plural = probe.lower() + "s"
    doc["metadata"]["name"] = f"{plural}.{group}"
    doc["spec"]["group"] = group
    doc["spec"]["names"] = {
        "kind": probe,
        "listKind": f"{probe}List",
        "plural": plural,
        "singular": probe.lower(),
    }
    return doc


def spec_schema(doc: dict[str, Any]) -> dict[str, Any]:
    """The ``spec`` schema of a CRD's first version."""
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _probe_crd(*, bounded: bool) -> dict[str, Any]:
    """The generated InferenceWorkload CRD under a group of its own; without the args bound
    (the schema before issue 23) unless ``bounded``."""
    doc = renamed_crd(INFERENCE_WORKLOAD, PROBE_GROUP, "BoundProbe")
    if not bounded:
        del spec_schema(doc)["properties"]["engine"]["properties"]["args"]["items"]["maxLength"]
    return doc


@pytest.fixture
def probe(testbed: Testbed, kube: KubeApi) -> Iterator[str]:
    testbed.apply_crds([_probe_crd(bounded=False)])
    yield f"{PROBE_GROUP}/v1alpha1"
    kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"boundprobes.{PROBE_GROUP}")


def _merge_patch(kube: KubeApi, api_version: str, name: str, namespace: str, patch: dict[str, Any]) -> None:
    path = kube.resource_path(api_version, "BoundProbe", namespace=namespace, name=name)
    kube.request(
        "PATCH", path, content=json.dumps(patch), headers={"Content-Type": "application/merge-patch+json"}
    )


def test_an_object_stored_before_the_bound_stays_served_and_updatable(
    testbed: Testbed, kube: KubeApi, namespace: str, probe: str
) -> None:
    long_arg = "x" * 40_000
    old = _example("inferenceworkload", "stored-before")
    old["apiVersion"], old["kind"] = probe, "BoundProbe"
    old["spec"]["engine"]["args"] = [long_arg]
    kube.create(old, namespace=namespace)

    testbed.apply_crds([_probe_crd(bounded=True)])
    fresh = copy.deepcopy(old)
    fresh["metadata"]["name"] = f"fresh-{secrets.token_hex(3)}"

    def bound_in_force() -> bool:
        try:
            kube.request(
                "POST",
                kube.resource_path(probe, "BoundProbe", namespace=namespace),
                params={"dryRun": "All"},
                json=fresh,
            )
        except ApiError as e:
            return e.status == 422
        return False

    kube.wait(bound_in_force, timeout=30, what="the bounded schema in force")

    # Served as stored; an update that leaves the long argument alone is accepted.
    stored = kube.get(probe, "BoundProbe", "stored-before", namespace=namespace)
    assert stored is not None
    assert stored["spec"]["engine"]["args"] == [long_arg]
    _merge_patch(kube, probe, "stored-before", namespace, {"spec": {"replicas": 2}})
    _merge_patch(kube, probe, "stored-before", namespace, {"metadata": {"labels": {"team": "a"}}})
    stored = kube.get(probe, "BoundProbe", "stored-before", namespace=namespace)
    assert stored is not None
    assert stored["spec"]["replicas"] == 2

    # Changing the long argument must meet the bound.
    with pytest.raises(ApiError) as info:
        _merge_patch(kube, probe, "stored-before", namespace, {"spec": {"engine": {"args": ["y" * 40_000]}}})
    assert info.value.status == 422
    assert "spec.engine.args[0]: Too long" in info.value.message
    _merge_patch(kube, probe, "stored-before", namespace, {"spec": {"engine": {"args": ["--short"]}}})


NAME_GROUP = "names-probe.sparkrun.dev"


def _name_probe_crd(*, ruled: bool) -> dict[str, Any]:
    """The generated InferenceWorkload CRD as kind NameProbe; without the served-name CEL rules
    (``api/servedname.py``, the schema before them) unless ``ruled``."""
    doc = renamed_crd(INFERENCE_WORKLOAD, NAME_GROUP, "NameProbe")
    if not ruled:
        model = spec_schema(doc)["properties"]["model"]["properties"]
        for node in (model["name"], model["servedName"], model["aliases"]["items"]):
            del node["x-kubernetes-validations"]
    return doc


def test_a_served_name_stored_before_its_rule_stays_served_until_it_changes(
    testbed: Testbed, kube: KubeApi, namespace: str
) -> None:
    """CRD validation ratcheting covers the served-name CEL rules too (docs/concepts.md "Model
    names"): a stored bidi-override name stays, updates that leave it alone pass, changing it
    must meet the rule."""
    api_version = f"{NAME_GROUP}/v1alpha1"
    testbed.apply_crds([_name_probe_crd(ruled=False)])
    try:
        old = _example("inferenceworkload", "named-before")
        old["apiVersion"], old["kind"] = api_version, "NameProbe"
        old["spec"]["model"]["servedName"] = "gpt\u202eprod"
        kube.create(old, namespace=namespace)
        testbed.apply_crds([_name_probe_crd(ruled=True)])
        fresh = copy.deepcopy(old)
        fresh["metadata"]["name"] = f"fresh-{secrets.token_hex(3)}"
        path = kube.resource_path(api_version, "NameProbe", namespace=namespace)

        def rule_in_force() -> bool:
            try:
                kube.request("POST", path, params={"dryRun": "All"}, json=fresh)
            except ApiError as e:
                return e.status == 422 and "control or format characters" in e.message
            return False

        kube.wait(rule_in_force, timeout=30, what="the served-name rule in force")

        def patch(change: dict[str, Any]) -> None:
            kube.request(
                "PATCH",
                kube.resource_path(api_version, "NameProbe", namespace=namespace, name="named-before"),
                content=json.dumps({"spec": change}),
                headers={"Content-Type": "application/merge-patch+json"},
            )

        patch({"replicas": 2})
        stored = kube.get(api_version, "NameProbe", "named-before", namespace=namespace)
        assert stored is not None
        assert (stored["spec"]["model"]["servedName"], stored["spec"]["replicas"]) == ("gpt\u202eprod", 2)
        with pytest.raises(ApiError) as info:
            patch({"model": {"servedName": "gpt\u202eprod2"}})
        assert info.value.status == 422
        assert "spec.model.servedName" in info.value.message
        patch({"model": {"servedName": "gpt-prod"}})
    finally:
        kube.delete("apiextensions.k8s.io/v1", "CustomResourceDefinition", f"nameprobes.{NAME_GROUP}")
