"""Reading a registry benchmark profile (``@<registry>/<name>``) from the cluster: the
RecipeRegistry (cluster-scoped) and, by name, the profile ConfigMaps its status records in its
``targetNamespace`` that the name may pick (ConfigMaps are never listed: the operator cannot
enumerate a tenant's); the choice, the ownership check and the document are
:mod:`sparkrun_operator.plan.benchprofile`'s. Used by the InferenceBenchmark controller (the Jobs
it renders) and ``benchmarks.run``."""

from __future__ import annotations

import asyncio
from typing import Any, Final

from sparkrun_operator.api.resources import RECIPE_REGISTRY
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import CONFIG_MAPS, resource_of
from sparkrun_operator.plan import benchprofile

__all__ = ["REGISTRIES", "resolve"]

REGISTRIES: Final = resource_of(RECIPE_REGISTRY)
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")


def _label_value(name: str) -> bool:
    """A registry name usable in a label selector (DNS-1123, at most 63 characters)."""
    return 0 < len(name) <= 63 and set(name) <= _NAME_CHARS and name[0].isalnum() and name[-1].isalnum()


async def resolve(kube: Kube, profile: str, framework: str | None) -> benchprofile.RegistryProfile:
    """The registry profile ``profile`` names, for ``framework``. Raises
    :class:`~sparkrun_operator.plan.benchprofile.ProfileError` (a condition reason and a message)."""
    wanted = benchprofile.scoped(profile)
    if wanted is None:
        raise benchprofile.ProfileError(
            "ProfileNotFound", f"{profile!r} is not a registry profile (@registry/name)"
        )
    if not _label_value(wanted.registry):
        raise benchprofile.ProfileError(
            "ProfileNotFound", f"benchmark profile {wanted}: no such RecipeRegistry"
        )
    registry = await kube.get(REGISTRIES, wanted.registry)
    target = str(((registry or {}).get("spec") or {}).get("targetNamespace") or "")
    found: list[dict[str, Any] | None] = []
    if registry is not None and target:
        names = benchprofile.candidates(wanted, registry)
        found = await asyncio.gather(*(kube.get(CONFIG_MAPS, name, target) for name in names))
    config_maps = [cm for cm in found if cm is not None]
    listed = benchprofile.recorded_items(registry) if registry is not None else None
    return benchprofile.choose(wanted, registry, config_maps, framework, listed=listed)
