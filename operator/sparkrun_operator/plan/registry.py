"""The RecipeRegistry planner (pure): from what a sync read (the registry's contents at one
commit, the objects it owns in ``targetNamespace``, its last status) to the writes, the deletes
and the status.

Rules (docs/resources/reciperegistry.md):

- a valid recipe is written as the Recipe ``<slug>`` (created, or replaced when its spec or
  annotations differ); an invalid one is never written: a Recipe written from an earlier commit
  stays as it was (it keeps serving, with the digest recorded then) and the problem names the
  file and why;
- a file the fetch left out (over the size limit, a symlink, an unsafe name: ``GitTree.skipped``)
  under the recipes, mods or benchmarks subpath is a problem ("not fetched"); the owned Recipe
  written from that recipe path earlier is kept as an invalid recipe's is;
- an object of that name the registry does not control is never touched ("name taken");
- an owned object whose recipe, mod or profile left the repository is deleted (UID precondition);
- at most :data:`~sparkrun_operator.api.registry.MAX_RECIPES` recipes are written; the counts stay
  exact and the rest are problems.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.registry import (
    MAX_LISTED,
    MAX_PROBLEMS,
    MAX_RECIPES,
    RecipeRegistryStatus,
    RegisteredConfigMap,
    RegistryCounts,
    RegistryProblem,
    RegistryRecipeEntry,
)
from sparkrun_operator.recipe.registry_tree import (
    Layout,
    RegistryContents,
    RegistryMod,
    RegistryProfile,
    RegistryRecipe,
)
from sparkrun_operator.recipe.trust import config_map_digest, recipe_digest, registry_owner
from sparkrun_operator.render import keys
from sparkrun_operator.render import registry as render
from sparkrun_operator.render.registry import RegistryRef

Resource = Literal["Recipe", "ConfigMap"]
_PROBLEM_MAX = 2000


@dataclass(frozen=True)
class Write:
    """Create ``body`` (``live`` None) or replace the owned object ``live`` with it."""

    resource: Resource
    body: dict[str, Any]
    live: Mapping[str, Any] | None

    @property
    def name(self) -> str:
        return str(self.body["metadata"]["name"])


@dataclass(frozen=True)
class Delete:
    resource: Resource
    name: str
    uid: str


@dataclass
class SyncPlan:
    """The actions of one sync, and the status they lead to once :func:`finish` has the results."""

    writes: list[Write] = field(default_factory=list)
    deletes: list[Delete] = field(default_factory=list)
    entries: list[RegistryRecipeEntry] = field(default_factory=list)
    config_maps: list[RegisteredConfigMap] = field(default_factory=list)
    problems: list[RegistryProblem] = field(default_factory=list)
    mods: list[str] = field(default_factory=list)
    profiles: list[str] = field(default_factory=list)
    tuning: list[str] = field(default_factory=list)
    counts: RegistryCounts = field(default_factory=RegistryCounts)


def _problem(path: str, message: str, catalog_name: str | None = None) -> RegistryProblem:
    return RegistryProblem(
        path=clip(path, 1024), catalog_name=catalog_name, message=clip(message, _PROBLEM_MAX)
    )


def _owned(obj: Mapping[str, Any], ref: RegistryRef) -> bool:
    owner = registry_owner(obj)
    return owner is not None and owner[1] == ref.uid


def _by_name(objects: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    return {str((o.get("metadata") or {}).get("name")): o for o in objects}


def _same_metadata(live: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
    meta, want = live.get("metadata") or {}, body["metadata"]
    labels, annotations = meta.get("labels") or {}, meta.get("annotations") or {}
    return all(labels.get(k) == v for k, v in want["labels"].items()) and all(
        annotations.get(k) == v
        for k, v in want["annotations"].items()
        if k != keys.ANNOTATION_REGISTRY_COMMIT  # NB: the commit it was written from, not the latest
    )


def _errors(recipe: RegistryRecipe) -> list[str]:
    if recipe.spec is None and not recipe.issues:
        return ["not a recipe"]
    return [i.message for i in recipe.issues if i.severity == "error"]


class _Planner:
    def __init__(self, ref: RegistryRef, commit: str, previous: RecipeRegistryStatus) -> None:
        self.ref, self.commit, self.previous = ref, commit, previous
        self.out = SyncPlan()
        self.keep: set[tuple[Resource, str]] = set()

    def problem(self, path: str, message: str, catalog_name: str | None = None) -> None:
        if len(self.out.problems) < MAX_PROBLEMS:
            self.out.problems.append(_problem(path, message, catalog_name))

    def place(
        self, resource: Resource, body: dict[str, Any], live: Mapping[str, Any] | None
    ) -> Literal["taken", "write", "same"]:
        """Plan ``body`` against the object of its name: ``taken`` (not ours: untouched),
        ``write`` (created or replaced) or ``same`` (ours and already so)."""
        name = str(body["metadata"]["name"])
        if live is not None and not _owned(live, self.ref):
            where = f"{resource} {self.ref.namespace}/{name}"
            self.problem("", f"{where}: name taken by an object this registry does not own")
            return "taken"
        self.keep.add((resource, name))
        if live is not None and self._unchanged(resource, live, body):
            return "same"
        self.out.writes.append(Write(resource, body, live))
        return "write"

    @staticmethod
    def _unchanged(resource: Resource, live: Mapping[str, Any], body: Mapping[str, Any]) -> bool:
        if not _same_metadata(live, body):
            return False
        if resource == "Recipe":
            return recipe_digest(live.get("spec")) == recipe_digest(body["spec"])
        return config_map_digest(live) == config_map_digest(body)

    def recipes(self, found: Sequence[RegistryRecipe], live: Mapping[str, Mapping[str, Any]]) -> None:
        recorded = {e.name: e.digest for e in self.previous.recipes}
        ordered = sorted(found, key=lambda r: (r.path, r.catalog_name))
        valid = 0
        for i, item in enumerate(ordered):
            errors = _errors(item)
            if i >= MAX_RECIPES:
                self.problem(item.path, f"not written: more than {MAX_RECIPES} recipes", item.catalog_name)
                continue
            if errors:
                self._invalid(item, errors, live.get(item.slug), recorded.get(item.slug))
                continue
            valid += 1
            assert item.spec is not None
            try:
                spec = render.recipe_spec(item.spec)
            except ValueError as error:
                self._invalid(item, [str(error)], live.get(item.slug), recorded.get(item.slug))
                valid -= 1
                continue
            body = render.recipe(
                self.ref,
                name=item.slug,
                spec=spec,
                catalog_name=item.catalog_name,
                path=item.path,
                commit=self.commit,
            )
            existing = live.get(item.slug)
            placed = self.place("Recipe", body, existing)
            if placed == "taken":
                continue
            digest = (
                recipe_digest(existing.get("spec")) if placed == "same" and existing is not None else None
            )
            self.out.entries.append(
                RegistryRecipeEntry(
                    name=item.slug, catalog_name=item.catalog_name, path=item.path, digest=digest, valid=True
                )
            )
        self.out.counts = RegistryCounts(recipes=len(found), valid=valid, invalid=len(found) - valid)

    def _invalid(
        self, item: RegistryRecipe, errors: list[str], live: Mapping[str, Any] | None, recorded: str | None
    ) -> None:
        kept = live is not None and _owned(live, self.ref)
        if kept:
            self.keep.add(("Recipe", item.slug))
        why = "; ".join(errors[:5])
        tail = " (the Recipe written from an earlier commit keeps serving)" if kept else " (not written)"
        self.problem(item.path, f"invalid: {why}{tail}", item.catalog_name)
        self.out.entries.append(
            RegistryRecipeEntry(
                name=item.slug,
                catalog_name=item.catalog_name,
                path=item.path,
                digest=recorded if kept else None,
                valid=False,
            )
        )

    def skipped(
        self, skipped: Mapping[str, str], layout: Layout, recipes: Sequence[Mapping[str, Any]]
    ) -> int:
        """Problems for the files the fetch left out under the registry's subpaths; the owned
        Recipe written earlier from a skipped recipe path is kept. The recipe paths skipped."""
        by_path = {
            (_meta(obj).get("annotations") or {}).get(keys.ANNOTATION_REGISTRY_PATH): obj
            for obj in recipes
            if _owned(obj, self.ref)
        }
        recorded = {e.path: e for e in self.previous.recipes}
        listed = {e.name for e in self.out.entries}
        bases = [b for b in (layout.recipes, layout.mods, layout.benchmarks) if b is not None]
        count = 0
        for path, reason in sorted(skipped.items()):
            if not any(_within(path, base) for base in bases):
                continue
            self.problem(path, f"not fetched: {reason}")
            if not _recipe_path(path, layout.recipes):
                continue
            count += 1
            live = by_path.get(path)
            name = str(_meta(live).get("name")) if live is not None else None
            if live is None or name is None or name in listed:
                continue
            self.keep.add(("Recipe", name))
            listed.add(name)
            entry = recorded.get(path)
            catalog = (_meta(live).get("annotations") or {}).get(keys.ANNOTATION_CATALOG_NAME)
            self.out.entries.append(
                RegistryRecipeEntry(
                    name=name,
                    catalog_name=clip(str(catalog or (entry.catalog_name if entry else name)), 512),
                    path=clip(path, 1024),
                    digest=entry.digest if entry is not None and entry.name == name else None,
                    valid=False,
                )
            )
        return count

    def mods(self, found: Sequence[RegistryMod], live: Mapping[str, Mapping[str, Any]]) -> None:
        for mod in sorted(found, key=lambda m: m.name):
            if mod.problem:
                self.problem(mod.name, f"mod {mod.name}: {mod.problem}")
                continue
            body = render.mod_config_map(
                self.ref, slug=mod.slug, mod_name=mod.name, files=mod.files, modes=mod.modes
            )
            if body is None:
                self.problem(mod.name, f"mod {mod.name}: over {render.MOD_MAX_BYTES} bytes, not written")
                continue
            if self.place("ConfigMap", body, live.get(str(body["metadata"]["name"]))) != "taken":
                self.out.mods.append(mod.name)
                self._config_map("mod", mod.name, body)

    def profiles(self, found: Sequence[RegistryProfile], live: Mapping[str, Mapping[str, Any]]) -> None:
        for profile in sorted(found, key=lambda p: p.name):
            if profile.problem or profile.document is None:
                self.problem(
                    profile.name, f"benchmark profile {profile.name}: {profile.problem or 'unreadable'}"
                )
                continue
            body = render.profile_config_map(
                self.ref, slug=profile.slug, profile_name=profile.name, document=profile.document
            )
            if body is None:
                self.problem(
                    profile.name, f"benchmark profile {profile.name}: over {render.PROFILE_MAX_BYTES} bytes"
                )
                continue
            if self.place("ConfigMap", body, live.get(str(body["metadata"]["name"]))) != "taken":
                self.out.profiles.append(profile.name)
                self._config_map("benchmarkProfile", profile.name, body)

    def _config_map(
        self, kind: Literal["mod", "benchmarkProfile"], item: str, body: Mapping[str, Any]
    ) -> None:
        self.out.config_maps.append(
            RegisteredConfigMap(
                name=str(body["metadata"]["name"]), kind=kind, item=item, digest=config_map_digest(body)
            )
        )

    def deletes(self, live: Mapping[Resource, Sequence[Mapping[str, Any]]]) -> None:
        for resource, objects in live.items():
            for obj in objects:
                meta = obj.get("metadata") or {}
                name = str(meta.get("name"))
                if _owned(obj, self.ref) and (resource, name) not in self.keep:
                    self.out.deletes.append(Delete(resource, name, str(meta.get("uid") or "")))


def _meta(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return (obj or {}).get("metadata") or {}


def _within(path: str, base: str) -> bool:
    return not base or path.startswith(base + "/")


def _recipe_path(path: str, base: str) -> bool:
    """Whether ``path`` is where a recipe file would be read from (a YAML file under the
    recipes subpath, in no dot-directory below it)."""
    if not _within(path, base) or not path.endswith((".yaml", ".yml")):
        return False
    rel = path[len(base) + 1 :] if base else path
    return not any(part.startswith(".") for part in rel.split("/")[:-1])


def intact(
    ref: RegistryRef,
    previous: RecipeRegistryStatus,
    recipes: Sequence[Mapping[str, Any]],
    config_maps: Sequence[Mapping[str, Any]],
) -> bool:
    """Whether the last sync's objects are all still as it recorded them, so that a resync at the
    same commit would write nothing: every recipe has an entry and every valid one was written,
    every mod and profile has its ConfigMap (none taken, refused or unusable), each owned live
    Recipe (``recipes``: those labelled with the registry) and recorded ConfigMap
    (``config_maps``: those of ``previous.config_maps`` that exist) has the digest recorded."""
    counts = previous.counts
    if (
        counts.recipes != len(previous.recipes)
        or counts.mods != len(previous.mods)
        or counts.benchmark_profiles != len(previous.benchmark_profiles)
        or any(e.valid and e.digest is None for e in previous.recipes)
    ):
        return False
    written = {e.name: e.digest for e in previous.recipes if e.digest is not None}
    live = {str(_meta(o).get("name")): o for o in recipes if _owned(o, ref)}
    if set(live) != set(written):
        return False
    if any(recipe_digest(obj.get("spec")) != written[name] for name, obj in live.items()):
        return False
    cms = {str(_meta(o).get("name")): o for o in config_maps if _owned(o, ref)}
    return all(c.name in cms and config_map_digest(cms[c.name]) == c.digest for c in previous.config_maps)


def config_map_names(registry: str, contents: RegistryContents, previous: RecipeRegistryStatus) -> list[str]:
    """The ConfigMaps a sync reads by name (the operator never lists ConfigMaps): those its last
    status records (a mod or profile that left the repository is deleted) and those the
    contents' mods and profiles are written as (a name taken meanwhile is seen, not overwritten).
    A ConfigMap written but never recorded (its status write failed) and whose mod left since
    stays until the registry is deleted (its ownerReference)."""
    names = [c.name for c in previous.config_maps]
    names += [render.mod_config_map_name(registry, m.slug) for m in contents.mods]
    names += [render.profile_config_map_name(registry, p.slug) for p in contents.benchmark_profiles]
    return sorted(set(names))


def plan_sync(
    ref: RegistryRef,
    *,
    commit: str,
    contents: RegistryContents,
    recipes: Sequence[Mapping[str, Any]],
    config_maps: Sequence[Mapping[str, Any]],
    previous: RecipeRegistryStatus,
    skipped: Mapping[str, str] | None = None,
) -> SyncPlan:
    """The writes and deletes of one sync at ``commit``; ``recipes``: the Recipes labelled with
    the registry in ``targetNamespace``; ``config_maps``: those of :func:`config_map_names` that
    exist there (only objects it controls are replaced or deleted); ``skipped``: the files the
    fetch left out, and why (``GitTree.skipped``)."""
    planner = _Planner(ref, commit, previous)
    for found in contents.problems:
        planner.problem(found.path, found.message)
    planner.recipes(contents.recipes, _by_name(recipes))
    unread = planner.skipped(skipped or {}, contents.layout, recipes)
    cms = _by_name(config_maps)
    planner.mods(contents.mods, cms)
    planner.profiles(contents.benchmark_profiles, cms)
    planner.deletes({"Recipe": recipes, "ConfigMap": config_maps})
    out = planner.out
    out.counts = out.counts.model_copy(
        update={
            "recipes": out.counts.recipes + unread,
            "invalid": out.counts.invalid + unread,
            "mods": len(contents.mods),
            "benchmark_profiles": len(contents.benchmark_profiles),
        }
    )
    out.mods, out.profiles = out.mods[:MAX_LISTED], out.profiles[:MAX_LISTED]
    out.tuning = sorted(contents.tuning)[:MAX_LISTED]
    return out


def finish(
    planned: SyncPlan, *, written: Mapping[str, Mapping[str, Any]], refused: Mapping[tuple[str, str], str]
) -> tuple[list[RegistryRecipeEntry], list[RegisteredConfigMap], list[RegistryProblem]]:
    """The status lists once the writes are done: ``written`` (Recipe name -> the stored object
    the apiserver answered) gives each written Recipe's digest (of the spec as stored: defaults
    applied); ``refused`` ((resource, name) -> why) drops what was not written."""
    entries = []
    for entry in planned.entries:
        if entry.name in written:
            entry = entry.model_copy(update={"digest": recipe_digest(written[entry.name].get("spec"))})
        elif ("Recipe", entry.name) in refused:
            entry = entry.model_copy(update={"digest": None})
        entries.append(entry)
    config_maps = [c for c in planned.config_maps if ("ConfigMap", c.name) not in refused]
    problems = list(planned.problems)
    for (resource, name), why in sorted(refused.items()):
        if len(problems) < MAX_PROBLEMS:
            problems.append(_problem("", f"{resource} {name}: {why}"))
    return sorted(entries, key=lambda e: e.catalog_name), config_maps, problems
