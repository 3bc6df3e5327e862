"""Whether a Recipe is trusted: its hooks (``pre_exec``, ``post_exec``, ``post_commands``), its
mods and a path model run only then (sparkrun's rule: untrusted recipes are listed, validated and
served, never run code).

Pure. Trust is recorded on the RecipeRegistry, never on the Recipe (a tenant who can edit a
Recipe could otherwise trust it): a Recipe is trusted iff

- it has a controller ownerReference to a RecipeRegistry whose UID is the registry's,
- it lives in that registry's ``targetNamespace`` (the only namespace it writes: a tenant who
  copies a Recipe with its spec and a forged ownerReference elsewhere gets no trust),
- that registry is ``enabled`` and ``trusted`` (``trusted`` needs ``acknowledgeTrust``, CEL), and
- the registry's ``status.recipes`` lists this Recipe by name with a ``digest`` equal to
  :func:`recipe_digest` of the Recipe's spec now: the spec its controller wrote. A tenant who
  edits a registry-made Recipe's spec makes it untrusted until the next sync writes it back.

A Recipe applied with kubectl (no registry) is never trusted by itself; the one other trust is
per request (``trust: true`` on a daemon operation, honoured only where the shim's listener
allows it), which this module does not decide.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator.api.meta import API_VERSION

REGISTRY_KIND: Final = "RecipeRegistry"


@dataclass(frozen=True)
class Trust:
    """The verdict: whether the Recipe is trusted, why (a sentence), and its registry's name."""

    trusted: bool
    reason: str
    registry: str | None = None


def recipe_digest(spec: Mapping[str, Any] | None) -> str:
    """sha256 (hex) of the canonical JSON of a Recipe spec as the apiserver stores it (sorted
    keys, no whitespace, ASCII): what the registry controller records for each Recipe it wrote."""
    text = json.dumps(dict(spec or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def registry_owner(recipe: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(name, uid)`` of the RecipeRegistry that controls ``recipe`` (its controller
    ownerReference), or ``None``."""
    meta = recipe.get("metadata")
    refs = meta.get("ownerReferences") if isinstance(meta, Mapping) else None
    if not isinstance(refs, list):
        return None
    for ref in refs:
        if not isinstance(ref, Mapping) or ref.get("controller") is not True:
            continue
        if ref.get("kind") == REGISTRY_KIND and ref.get("apiVersion") == API_VERSION:
            name, uid = ref.get("name"), ref.get("uid")
            if isinstance(name, str) and isinstance(uid, str) and name and uid:
                return name, uid
    return None


def _section(obj: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = obj.get(key)
    return value if isinstance(value, Mapping) else {}


def _elsewhere(obj: Mapping[str, Any], registry: Mapping[str, Any]) -> str | None:
    """The namespace of ``obj`` when it is not ``registry``'s ``targetNamespace`` (``None``: it is,
    or a view without one of the two: callers that pass views must carry both)."""
    namespace = _section(obj, "metadata").get("namespace")
    target = _section(registry, "spec").get("targetNamespace")
    if isinstance(namespace, str) and isinstance(target, str) and namespace != target:
        return namespace
    return None


def recipe_trust(recipe: Mapping[str, Any], registry: Mapping[str, Any] | None) -> Trust:
    """Whether ``recipe`` (a Recipe object) is trusted, given ``registry`` (the RecipeRegistry
    its ownerReference names, as read from the API; ``None`` when none was found)."""
    owner = registry_owner(recipe)
    if owner is None:
        return Trust(False, "the Recipe comes from no RecipeRegistry (only a trusted registry's recipes are)")
    name, uid = owner
    if registry is None:
        return Trust(False, f"its RecipeRegistry {name} does not exist", name)
    meta = _section(registry, "metadata")
    if meta.get("uid") != uid or meta.get("name") != name:
        return Trust(False, f"its RecipeRegistry {name} was replaced (another UID)", name)
    spec = _section(registry, "spec")
    if (namespace := _elsewhere(recipe, registry)) is not None:
        return Trust(
            False,
            f"it is in namespace {namespace}, and RecipeRegistry {name} writes into "
            f"{spec.get('targetNamespace')} only (a copy is not the registry's)",
            name,
        )
    if spec.get("enabled") is False:
        return Trust(False, f"RecipeRegistry {name} is disabled", name)
    if spec.get("trusted") is not True or spec.get("acknowledgeTrust") is not True:
        return Trust(False, f"RecipeRegistry {name} is not trusted", name)
    recipe_name = _section(recipe, "metadata").get("name")
    entries = _section(registry, "status").get("recipes")
    recorded = None
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, Mapping) and entry.get("name") == recipe_name:
            recorded = entry.get("digest")
            break
    if not isinstance(recorded, str) or not recorded:
        return Trust(False, f"RecipeRegistry {name} has not recorded this Recipe (not synced yet)", name)
    spec_now = recipe.get("spec")
    if recipe_digest(spec_now if isinstance(spec_now, Mapping) else None) != recorded:
        return Trust(
            False,
            f"the Recipe's spec differs from what RecipeRegistry {name} wrote (edited since its last sync)",
            name,
        )
    return Trust(True, f"from trusted RecipeRegistry {name}", name)


def config_map_digest(config_map: Mapping[str, Any]) -> str:
    """sha256 (hex) of a ConfigMap's ``data`` and ``binaryData`` (canonical JSON): what the
    registry controller records for each mod and benchmark-profile ConfigMap it wrote."""
    data, binary = config_map.get("data"), config_map.get("binaryData")
    doc = {
        "data": dict(data) if isinstance(data, Mapping) else {},
        "binaryData": dict(binary) if isinstance(binary, Mapping) else {},
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(text.encode()).hexdigest()


def config_map_intact(config_map: Mapping[str, Any], registry: Mapping[str, Any] | None) -> Trust:
    """Whether a mod or benchmark-profile ConfigMap is as ``registry`` wrote it: controlled by
    that registry (UID), listed in its ``status.configMaps`` with the digest of its data now. Says
    nothing of trust (a mod of an untrusted registry may be intact): callers check
    :func:`recipe_trust` for the recipe that names it."""
    owner = registry_owner(config_map)
    if owner is None:
        return Trust(False, "the ConfigMap comes from no RecipeRegistry")
    name, uid = owner
    meta = _section(registry, "metadata") if registry is not None else {}
    if registry is None or meta.get("uid") != uid or meta.get("name") != name:
        return Trust(False, f"its RecipeRegistry {name} does not exist (or was replaced)", name)
    if (namespace := _elsewhere(config_map, registry)) is not None:
        return Trust(False, f"it is in namespace {namespace}, not RecipeRegistry {name}'s", name)
    cm_name = _section(config_map, "metadata").get("name")
    entries = _section(registry, "status").get("configMaps")
    for entry in entries if isinstance(entries, list) else ():
        if isinstance(entry, Mapping) and entry.get("name") == cm_name:
            if entry.get("digest") == config_map_digest(config_map):
                return Trust(True, f"as RecipeRegistry {name} wrote it", name)
            return Trust(False, f"edited since RecipeRegistry {name} wrote it", name)
    return Trust(False, f"RecipeRegistry {name} has not recorded it (not synced yet)", name)
