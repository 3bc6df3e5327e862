"""A RecipeRegistry's status within a size budget (pure).

Every list in the status is bounded by count (``api/registry.py``), but at their bounds (2048
recipes with long paths and catalog names, 256 problems of 2 KiB, 2048 ConfigMaps) the status
would pass etcd's object limit and every status write would fail: the registry would stay at
its last good sync forever, saying nothing. So before a status is written, :func:`fit` cuts it to
:data:`STATUS_BUDGET` bytes of JSON, in this order, each step only while still over:

1. ``problems`` from the end (the counts and the ``Synced`` message keep the total);
2. the name lists ``mods``, ``benchmarkProfiles``, ``tuning`` (``counts`` keeps their numbers,
   ``configMaps`` the written ones);
3. each recipe's ``path`` (the Recipe's ``sparkrun.dev/registry-path`` annotation keeps it);
4. each recipe's ``catalogName`` and each ConfigMap's ``item`` (their objects' annotations keep
   them);
5. recipe entries with no digest (invalid and never written, or refused): nothing trusts them;
6. last, recipe and ConfigMap entries from the end: those objects stay written and served, but
   without their digest in status they are not trusted and their mods and profiles are not used.

The digests of written objects are what trust reads (``recipe/trust.py``): steps 1 to 5 never
drop one. What was cut is said in one sentence for the ``Synced`` condition.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel

from sparkrun_operator.api.registry import RecipeRegistryStatus

__all__ = ["STATUS_BUDGET", "Fitted", "fit", "wire_size"]

#: The most bytes of JSON a registry's status may take (etcd refuses objects over 1.5 MiB; the
#: rest is headroom for the spec, the metadata and kopf's annotations).
STATUS_BUDGET: Final = 512 * 1024


@dataclass(frozen=True)
class Fitted:
    """The status as it will be written, and what was cut (``None``: nothing)."""

    status: RecipeRegistryStatus
    note: str | None


def _json(value: Any) -> int:
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


def _wire(item: BaseModel) -> Any:
    return item.model_dump(by_alias=True, exclude_none=True, mode="json")


def wire_size(status: RecipeRegistryStatus) -> int:
    """Bytes of the status as JSON, as it is written."""
    return _json(_wire(status))


def _keep_within(items: Sequence[BaseModel], excess: int) -> int:
    """How many of ``items`` (from the front) stay when the tail is cut by at least ``excess``
    bytes of JSON, or none of them if all do not make it."""
    keep = len(items)
    while keep > 0 and excess > 0:
        keep -= 1
        excess -= _json(_wire(items[keep])) + (1 if keep > 0 else 0)  # NB: and its comma
    return keep


class _Fitter:
    def __init__(self, status: RecipeRegistryStatus, budget: int) -> None:
        self.status = status.model_copy(deep=True)
        self.budget = budget
        self.cuts: list[str] = []

    def excess(self) -> int:
        return wire_size(self.status) - self.budget

    def problems(self) -> None:
        total = len(self.status.problems)
        keep = _keep_within(self.status.problems, self.excess())
        self.status.problems = self.status.problems[:keep]
        if keep < total:
            self.cuts.append(f"{total - keep} of {total} problems not listed")

    def name_lists(self) -> None:
        s = self.status
        if s.mods or s.benchmark_profiles or s.tuning:
            s.mods, s.benchmark_profiles, s.tuning = [], [], []
            self.cuts.append(
                "the mods, benchmarkProfiles and tuning lists left out (counts has their numbers)"
            )

    def paths(self) -> None:
        if any(e.path for e in self.status.recipes):
            self.status.recipes = [e.model_copy(update={"path": ""}) for e in self.status.recipes]
            self.cuts.append("recipe paths left out (each Recipe's registry-path annotation has it)")

    def names(self) -> None:
        s = self.status
        if any(e.catalog_name for e in s.recipes) or any(c.item for c in s.config_maps):
            s.recipes = [e.model_copy(update={"catalog_name": ""}) for e in s.recipes]
            s.config_maps = [c.model_copy(update={"item": ""}) for c in s.config_maps]
            self.cuts.append(
                "catalog names and ConfigMap items left out (their objects' annotations have them)"
            )

    def undigested(self) -> None:
        before = len(self.status.recipes)
        self.status.recipes = [e for e in self.status.recipes if e.digest is not None]
        if len(self.status.recipes) < before:
            self.cuts.append(f"{before - len(self.status.recipes)} recipes never written not listed")

    def entries(self) -> None:
        s = self.status
        recipes, config_maps = len(s.recipes), len(s.config_maps)
        s.config_maps = s.config_maps[: _keep_within(s.config_maps, self.excess())]
        s.recipes = s.recipes[: _keep_within(s.recipes, self.excess())]
        self.cuts.append(
            f"{recipes - len(s.recipes)} of {recipes} Recipes and {config_maps - len(s.config_maps)} of "
            f"{config_maps} ConfigMaps not listed: they stay written but are not trusted, their mods "
            "and profiles not used"
        )

    def run(self) -> Fitted:
        steps = (self.problems, self.name_lists, self.paths, self.names, self.undigested, self.entries)
        for step in steps:
            if self.excess() <= 0:
                break
            step()
        if not self.cuts:
            return Fitted(status=self.status, note=None)
        note = f"status cut to {self.budget // 1024} KiB: " + "; ".join(self.cuts)
        return Fitted(status=self.status, note=note)


def fit(status: RecipeRegistryStatus, budget: int = STATUS_BUDGET) -> Fitted:
    """``status`` within ``budget`` bytes of JSON (the module's order of cuts), and what was cut."""
    if wire_size(status) <= budget:
        return Fitted(status=status, note=None)
    return _Fitter(status, budget).run()
