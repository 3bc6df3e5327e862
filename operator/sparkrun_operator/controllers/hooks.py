"""Where a workload's Recipe comes from, for its hooks and mods (issue 32; ``plan/workload/hooks.py``).

- Two indexes: ``iw_recipe_owners`` (a Recipe's controller ownerReferences to a RecipeRegistry,
  only for Recipes that have one) and ``iw_registries`` (each RecipeRegistry's uid, trust
  settings, ``status.recipes`` digests and the mod ConfigMaps its ``status.configMaps``
  records): :func:`source` builds the planner's
  :class:`~..plan.workload.hooksource.HookSource` from them and ``recipe/trust.py``, with no
  API call (the status-only lane plans from memory too).
- The mod ConfigMaps a registry wrote are neither watched nor listed (the operator may not
  enumerate a tenant's ConfigMaps): :func:`prefetch` reads, by name, the ones a Recipe's
  ``mods`` may resolve to, as the registry's status records them (at most :data:`MAX_MODS` per
  pass), when a full pass needs them; each is used only while intact
  (``recipe.trust.config_map_intact``: the registry's UID, the digest it recorded).
  :class:`ModCache` keeps them per (namespace, registry, uid, commit): a new commit is a new key,
  the mods change only when the registry syncs.
- A RecipeRegistry change (trusted, untrusted, disabled, synced) pokes the workloads whose
  Recipe it owns.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import kopf

from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.resources import RECIPE, RECIPE_REGISTRY
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.k8s.errors import KubeError
from sparkrun_operator.k8s.resources import CONFIG_MAPS
from sparkrun_operator.plan import logtail, observe
from sparkrun_operator.plan.workload.hooks import declared_mods, mod_key, mod_lookup
from sparkrun_operator.plan.workload.hooksource import HookSource, ObservedMod, hook_job_from, observed_mod
from sparkrun_operator.plan.workload.model import ObservedRecipe
from sparkrun_operator.recipe.trust import REGISTRY_KIND, config_map_intact, recipe_trust, registry_owner
from sparkrun_operator.render import keys
from sparkrun_operator.render.hooks import EVENT

RECIPE_ID: Final = (RECIPE.group, RECIPE.version, RECIPE.plural)
REGISTRY_ID: Final = (RECIPE_REGISTRY.group, RECIPE_REGISTRY.version, RECIPE_REGISTRY.plural)
#: The most mod ConfigMaps read in one pass of one workload, and remembered registries.
MAX_MODS: Final = 64
MAX_CACHED: Final = 256
#: The most mod ConfigMaps of one registry remembered in the index (its status lists at most 2048).
MAX_INDEXED_MODS: Final = 512
#: Leaders' post_exec outcomes remembered, and the log read for one (bytes, lines).
MAX_POST_EXEC: Final = 4096
POST_EXEC_LOG_BYTES: Final = 64 * 1024
POST_EXEC_LOG_LINES: Final = 400
#: Leaders' logs read in one pass of one workload, at most.
POST_EXEC_READS: Final = 4
HOOK_JOBS: Final = {keys.LABEL_HOOK_WORKLOAD: kopf.PRESENT}
Key = tuple[str, str, str, str]


@dataclass
class ModCache:
    """The mods read of (namespace, registry name, registry uid, commit), by ConfigMap name; and
    the post_exec outcome each Ready leader's log showed (by namespace and pod name)."""

    entries: dict[Key, dict[str, ObservedMod]] = field(default_factory=dict)
    post_exec: dict[tuple[str, str], tuple[str, dt.datetime]] = field(default_factory=dict)

    def get(self, key: Key) -> tuple[ObservedMod, ...]:
        return tuple(self.entries.get(key, {}).values())

    def has(self, key: Key, config_map: str) -> bool:
        return config_map in self.entries.get(key, {})

    def put(self, key: Key, mods: Iterable[ObservedMod]) -> None:
        """Remember ``mods`` with those already read for ``key`` (another commit's are dropped)."""
        known = self.entries.pop(key, {})
        stale = [k for k in self.entries if k[:3] == key[:3]]
        for k in stale:
            del self.entries[k]
        while len(self.entries) >= MAX_CACHED:
            del self.entries[next(iter(self.entries))]
        self.entries[key] = {**known, **{m.config_map: m for m in mods}}

    def seen(self, namespace: str, pods: Any) -> dict[str, tuple[str, dt.datetime]]:
        """Pod name -> the post_exec outcome read, for ``pods`` of ``namespace``."""
        return {
            p.name: self.post_exec[(namespace, p.name)] for p in pods if (namespace, p.name) in self.post_exec
        }

    def saw(self, namespace: str, pod: str, outcome: str, when: dt.datetime) -> None:
        while len(self.post_exec) >= MAX_POST_EXEC:
            del self.post_exec[next(iter(self.post_exec))]
        self.post_exec[(namespace, pod)] = (outcome, when)


def _first(index: Any, key: Any) -> Any:
    if index is None or key not in index:
        return None
    return next(iter(index[key]), None)


def _key(namespace: str, registry: Mapping[str, Any]) -> Key:
    meta = registry.get("metadata") or {}
    return (
        namespace,
        str(meta.get("name")),
        str(meta.get("uid")),
        str((registry.get("status") or {}).get("commit")),
    )


def _lookups(spec: RecipeSpec, own: str | None) -> dict[str, set[str]]:
    """Registry name -> the mod names (``mod_key``) the recipe's ``mods`` look up in it."""
    out: dict[str, set[str]] = {}
    for ref in declared_mods(spec):
        registries, wanted = mod_lookup(ref, own)
        for registry in registries:
            if registry:
                out.setdefault(registry, set()).add(wanted)
    return out


def source(
    cache: ModCache, indices: Mapping[str, Any], namespace: str, recipe: ObservedRecipe | None, raw: Any
) -> HookSource | None:
    """The planner's view of where the Recipe ``recipe`` (``raw``: its indexed spec) comes from;
    ``None`` when from no RecipeRegistry."""
    if recipe is None or not recipe.exists or not isinstance(raw, Mapping):
        return None
    owners = _first(indices.get("iw_recipe_owners"), (namespace, recipe.name))
    if not owners:
        return None
    body = {"metadata": {"name": recipe.name, "ownerReferences": owners}, "spec": dict(raw)}
    owner = registry_owner(body)
    registry = _first(indices.get("iw_registries"), owner[0]) if owner else None
    trust = recipe_trust(body, registry)
    mods: tuple[ObservedMod, ...] = ()
    if registry is not None and trust.trusted and recipe.spec is not None:
        for name in _lookups(recipe.spec, trust.registry):
            found = _first(indices.get("iw_registries"), name)
            mods += cache.get(_key(namespace, found)) if found is not None else ()
    return HookSource(trust=trust, mods=mods)


def _to_read(registry: Mapping[str, Any], namespace: str, wanted: set[str]) -> list[str]:
    """The mod ConfigMaps of ``registry`` (its status's record) that may be one of ``wanted``
    in ``namespace``: an entry whose item the status budget cut is read to see its name."""
    spec, status = registry.get("spec") or {}, registry.get("status") or {}
    if spec.get("enabled") is False or spec.get("targetNamespace") != namespace:
        return []  # a disabled registry offers nothing; its ConfigMaps are not in this namespace
    entries = [e for e in status.get("configMaps") or [] if isinstance(e, Mapping)]
    named = [str(e.get("name")) for e in entries if e.get("item") and mod_key(str(e["item"])) in wanted]
    return named + [str(e.get("name")) for e in entries if not e.get("item")]


async def prefetch(
    ctx: Any, cache: ModCache, indices: Mapping[str, Any], namespace: str, recipe: ObservedRecipe | None
) -> None:
    """Read, by name, the mod ConfigMaps the Recipe's ``mods`` may resolve to (its registry's,
    ``eugr``'s, an ``@registry``'s) that are not cached for their registry's commit."""
    if recipe is None or recipe.spec is None or not declared_mods(recipe.spec):
        return
    owners = _first(indices.get("iw_recipe_owners"), (namespace, recipe.name)) or []
    own = next((r.get("name") for r in owners if isinstance(r, Mapping) and r.get("controller")), None)
    budget = MAX_MODS
    for name, wanted in _lookups(recipe.spec, own if isinstance(own, str) else None).items():
        registry = _first(indices.get("iw_registries"), name)
        if registry is None:
            continue
        key = _key(namespace, registry)
        todo = [n for n in _to_read(registry, namespace, wanted) if not cache.has(key, n)][:budget]
        budget -= len(todo)
        read: list[ObservedMod] = []
        for config_map in todo:
            try:
                found = await ctx.kube.get(CONFIG_MAPS, config_map, namespace)
            except KubeError:
                continue  # tried again on the next pass; the condition names the mod meanwhile
            mod = _parse(name, registry, found) if found is not None else None
            if mod is not None:
                read.append(mod)
        cache.put(key, read)


def _parse(name: str, registry: Mapping[str, Any], item: Mapping[str, Any]) -> ObservedMod | None:
    """The mod of ``item`` if ``registry`` wrote it and it is as written, else ``None`` (read
    again on the next pass: a sync restores an edited one)."""
    if not config_map_intact(item, registry).trusted:
        return None
    meta = item.get("metadata") or {}
    mod_name = (meta.get("annotations") or {}).get(keys.ANNOTATION_MOD_NAME)
    if not isinstance(mod_name, str):
        return None
    data = {k: v for k, v in (item.get("data") or {}).items() if isinstance(v, str)}
    binary = {k: v for k, v in (item.get("binaryData") or {}).items() if isinstance(v, str) and _b64(v)}
    return observed_mod(name, mod_name, str(meta.get("name")), data, binary)


def _b64(value: str) -> bool:
    try:
        base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        return False
    return True


def _registry_view(body: Mapping[str, Any]) -> dict[str, Any]:
    meta, spec, status = (body.get(k) or {} for k in ("metadata", "spec", "status"))
    recipes = [
        {"name": r.get("name"), "digest": r.get("digest")}
        for r in (status.get("recipes") or [])
        if isinstance(r, Mapping)
    ]
    mods = [
        {"name": m.get("name"), "item": m.get("item"), "digest": m.get("digest")}
        for m in (status.get("configMaps") or [])
        if isinstance(m, Mapping) and m.get("kind") == "mod"
    ][:MAX_INDEXED_MODS]
    return {
        "metadata": {"name": meta.get("name"), "uid": meta.get("uid")},
        "spec": {k: spec.get(k) for k in ("enabled", "trusted", "acknowledgeTrust", "targetNamespace")},
        "status": {"commit": status.get("commit"), "recipes": recipes, "configMaps": mods},
    }


def recipe_of(
    cache: ModCache, indices: Mapping[str, Any], namespace: str, spec: InferenceWorkloadSpec
) -> tuple[ObservedRecipe | None, HookSource | None]:
    """The Recipe ``spec`` names (from ``iw_recipes``), and where it comes from."""
    if spec.recipe is None:
        return None, None
    raw = observe.first(indices.get("iw_recipes"), (namespace, spec.recipe.name))
    recipe = observe.recipe_of(raw, name=spec.recipe.name)
    return recipe, source(cache, indices, namespace, recipe, raw)


async def prefetch_for(
    ctx: Any, cache: ModCache, body: Mapping[str, Any], indices: Mapping[str, Any]
) -> None:
    """:func:`prefetch` for the workload ``body`` (a full pass, before it observes)."""
    name = ((body.get("spec") or {}).get("recipe") or {}).get("name")
    namespace = str((body.get("metadata") or {}).get("namespace"))
    if isinstance(name, str):
        raw = observe.first(indices.get("iw_recipes"), (namespace, name))
        await prefetch(ctx, cache, indices, namespace, observe.recipe_of(raw, name=name))


async def read_post_exec(
    ctx: Any, cache: ModCache, body: Mapping[str, Any], indices: Mapping[str, Any]
) -> None:
    """Read the post_exec outcome from the log of each Ready leader that has not shown one yet,
    when the workload's Recipe declares post_exec and is trusted (a full pass, before it
    observes). Only whole event lines the wrapper wrote count (``plan/logtail.py``)."""
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace")), str(meta.get("name"))
    recipe_name = ((body.get("spec") or {}).get("recipe") or {}).get("name")
    raw = observe.first(indices.get("iw_recipes"), (namespace, recipe_name)) if recipe_name else None
    if not isinstance(raw, Mapping) or not raw.get("postExec"):
        return  # the common case, decided without parsing anything
    spec = InferenceWorkloadSpec.model_validate(body.get("spec") or {})
    recipe, found = recipe_of(cache, indices, namespace, spec)
    if (
        recipe is None
        or recipe.spec is None
        or not recipe.spec.post_exec
        or found is None
        or not found.trust.trusted
    ):
        return
    done = {
        (e.get("replica"), e.get("revision"))
        for e in (body.get("status") or {}).get("startup") or []
        if isinstance(e, Mapping) and e.get("stage") == "postExec"
    }
    pods = observe_index(indices, (namespace, name))
    todo = [
        p
        for p in pods
        if p.role == keys.ROLE_LEADER
        and p.ready
        and not p.deleting
        and (namespace, p.name) not in cache.post_exec
        and (p.replica, p.revision) not in done
    ][:POST_EXEC_READS]
    for pod in todo:
        try:
            text = await ctx.kube.log_tail(
                namespace,
                pod.name,
                container=keys.CONTAINER_ENGINE,
                lines=POST_EXEC_LOG_LINES,
                limit_bytes=POST_EXEC_LOG_BYTES,
            )
        except KubeError:
            continue
        event = logtail.last_event(text, {EVENT})
        if (
            event is not None
            and event.get("stage") == "postExec"
            and event.get("outcome") in ("ok", "failed")
        ):
            cache.saw(namespace, pod.name, str(event["outcome"]), utcnow())


def observe_index(indices: Mapping[str, Any], key: tuple[str, str]) -> list[Any]:
    index = indices.get("iw_pods")
    return list(index[key]) if index is not None and key in index else []


def register_indexes(registry: kopf.OperatorRegistry) -> None:
    """``iw_recipe_owners``, ``iw_registries`` and ``iw_hook_jobs`` (post_commands Jobs by workload)."""

    @kopf.index(*RECIPE_ID, id="iw_recipe_owners", registry=registry)
    async def iw_recipe_owners(
        *, namespace: str | None, name: str, body: kopf.Body, **_: Any
    ) -> dict[Any, Any] | None:
        refs = [
            dict(r)
            for r in (body.get("metadata") or {}).get("ownerReferences") or []
            if r.get("kind") == REGISTRY_KIND
        ]
        return {(namespace, name): refs} if refs else None

    @kopf.index("batch", "v1", "jobs", id="iw_hook_jobs", labels=HOOK_JOBS, registry=registry)
    async def iw_hook_jobs(*, body: kopf.Body, **_: Any) -> dict[Any, Any] | None:
        found = hook_job_from(body)
        return {found[0]: found[1]} if found else None

    @kopf.index(*REGISTRY_ID, id="iw_registries", registry=registry)
    async def iw_registries(*, name: str, body: kopf.Body, **_: Any) -> dict[Any, Any]:
        return {name: _registry_view(body)}


def register_pokes(registry: kopf.OperatorRegistry, poke: Callable[[Any, str, str], None]) -> None:
    """A RecipeRegistry's change pokes the workloads whose Recipe it owns (``poke(ctx, ns, name)``)."""

    @kopf.on.event(*REGISTRY_ID, id="rreg-workloads", registry=registry)
    async def rreg_workloads(*, name: str, memo: Any, **kwargs: Any) -> None:
        ctx, iw_recipe_owners = memo.ctx, kwargs.get("iw_recipe_owners")
        for (namespace, workload), (recipe, _cache, _cluster) in list(ctx.dependencies.items()):
            owners = _first(iw_recipe_owners, (namespace, recipe)) if recipe else None
            if owners and any(r.get("name") == name for r in owners):
                poke(ctx, namespace, workload)
