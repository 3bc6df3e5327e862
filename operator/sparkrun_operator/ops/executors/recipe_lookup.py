"""A recipe argument -> its Recipe: one resolver for every operation that takes a recipe.

The catalog lists a RecipeRegistry's recipes under their catalog names (``team-a/qwen``), while
their objects are named by slugs (``team-a-qwen-1a2b3c4d``); sparkrun also writes
``@<registry>/<catalog name>``. Each of these names the same Recipe, in this order:

1. the literal object name, when it is a DNS subdomain and that Recipe exists;
2. ``@<registry>/<catalog name>``: the Recipe that registry wrote with that catalog name;
3. a bare catalog name: the one Recipe, of any registry, with that catalog name; several (two
   registries) -> 409 listing the ``@registry/name`` choices; none -> "Unknown recipe".

Only recipes the catalog lists count in 2 and 3: controlled (ownerReference, same UID) by a
RecipeRegistry that is enabled, so a Recipe a tenant labels and annotates by hand never takes a
registry's name. The search is one label-selected list (``sparkrun.dev/registry``), at most
:data:`SCAN_MAX` objects, page by page.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

from sparkrun_operator.ops import kube
from sparkrun_operator.ops.errors import Conflict, NotFound
from sparkrun_operator.ops.executors.registries import registry_index
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.recipe.trust import registry_owner
from sparkrun_operator.render import keys

__all__ = ["Candidate", "choose", "find_recipe", "split_reference"]

#: The longest recipe argument looked up (a registry name, ``@``, ``/`` and a catalog name).
REFERENCE_MAX: Final = 1024
#: The most registry Recipes one lookup reads, and its page size.
SCAN_MAX: Final = 4096
PAGE: Final = 512
#: The most choices an ambiguity error lists.
CHOICES_MAX: Final = 16
_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")
#: A registry name a label value can hold (63 characters).
_REGISTRY: Final = re.compile(r"[a-z0-9]([-a-z0-9.]{0,61}[a-z0-9])?")


class Candidate(NamedTuple):
    """A registry Recipe the catalog lists: its registry, catalog name and object name."""

    registry: str
    catalog_name: str
    name: str


def split_reference(reference: str) -> tuple[str | None, str]:
    """``(registry, catalog name)`` of ``@registry/name``; ``(None, reference)`` otherwise."""
    if reference.startswith("@") and "/" in reference:
        registry, _, name = reference[1:].partition("/")
        if registry and name:
            return registry, name
    return None, reference


def choose(reference: str, candidates: Sequence[Candidate]) -> str:
    """The object name ``reference`` (not an existing object's name) means among ``candidates``.

    Raises ``NotFound`` when none matches, ``Conflict`` (listing the choices) when several do."""
    registry, catalog = split_reference(reference)
    found = sorted(
        {c for c in candidates if c.catalog_name == catalog and registry in (None, c.registry)},
        key=lambda c: (c.registry, c.name),
    )
    if len(found) == 1:
        return found[0].name
    if not found:
        where = f"registry {registry!r}" if registry else "the catalog"
        raise NotFound(f"Unknown recipe: {reference} (no Recipe of that name, nor in {where})")
    choices = [f"@{c.registry}/{c.catalog_name}" for c in found[:CHOICES_MAX]]
    raise Conflict(
        f"Recipe {reference} is ambiguous: {len(found)} registries have it; name one of "
        + ", ".join(choices),
        attrs={"reason": "ambiguous_recipe", "choices": choices},
    )


async def _registry_recipes(ctx: OperationContext, registry: str | None) -> list[dict[str, Any]]:
    """The Recipes labelled as ``registry``'s (any registry's when ``None``), at most :data:`SCAN_MAX`."""
    selector = f"{keys.LABEL_REGISTRY}={registry}" if registry else keys.LABEL_REGISTRY
    items: list[dict[str, Any]] = []
    token: str | None = None
    while len(items) < SCAN_MAX:
        page = await ctx.rest.request(
            "GET",
            kube.RECIPES.path(ctx.namespace),
            query={"labelSelector": selector, "limit": min(PAGE, SCAN_MAX - len(items)), "continue": token},
        )
        items.extend(page.get("items") or [])
        token = (page.get("metadata") or {}).get("continue") or None
        if token is None:
            break
    return items[:SCAN_MAX]


def _candidates(
    objs: Sequence[Mapping[str, Any]], registries: Mapping[str, Mapping[str, Any]]
) -> list[Candidate]:
    """The registry Recipes among ``objs`` the catalog lists (an enabled registry controls them)."""
    out = []
    for obj in objs:
        owner = registry_owner(obj)
        registry = registries.get(owner[0]) if owner else None
        if owner is None or registry is None or registry["metadata"].get("uid") != owner[1]:
            continue
        if (registry.get("spec") or {}).get("enabled") is False:
            continue
        catalog = (obj["metadata"].get("annotations") or {}).get(keys.ANNOTATION_CATALOG_NAME)
        if isinstance(catalog, str):
            out.append(Candidate(owner[0], catalog, str(obj["metadata"]["name"])))
    return out


async def find_recipe(ctx: OperationContext, reference: str) -> dict[str, Any]:
    """The Recipe ``reference`` names in the API namespace (see the module's docstring)."""
    reference = str(reference)
    if not reference or len(reference) > REFERENCE_MAX:
        raise NotFound(f"Unknown recipe: {reference[:REFERENCE_MAX]}")
    if _SUBDOMAIN.fullmatch(reference):
        found = await ctx.rest.get(kube.RECIPES, reference, ctx.namespace)
        if found is not None:
            return found
    registry, _ = split_reference(reference)
    if registry is not None and not _REGISTRY.fullmatch(registry):
        raise NotFound(f"Unknown recipe: {reference} (no registry {registry!r})")
    objs = await _registry_recipes(ctx, registry)
    if not objs:
        raise NotFound(f"Unknown recipe: {reference} (no Recipe {reference!r} in namespace {ctx.namespace})")
    name = choose(reference, _candidates(objs, await registry_index(ctx)))
    for obj in objs:
        if obj["metadata"]["name"] == name:
            return obj
    raise AssertionError("unreachable: a chosen candidate is one of the objects")
