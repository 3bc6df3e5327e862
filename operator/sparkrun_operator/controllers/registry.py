"""RecipeRegistry controller: fetch -> read -> plan (``plan/registry.py``) -> write -> one status write.

A per-registry daemon (``rreg-reconcile``) runs a pass when the registry changes (its spec, the
``sparkrun.dev/sync-requested`` annotation ``catalog.refresh`` sets) and when a sync falls due
(``plan/registry_status.py``). A pass that syncs reads the credentials Secret (the operator's
own namespace only), fetches the ref shallowly and bounded (``gitfetch``: in memory, at most two
fetches at once per process), reads and validates the tree (``recipe/registry_tree.py``, in a
worker thread), lists the Recipes labelled with the registry in ``targetNamespace``, reads its
ConfigMaps there by name (those its status records and those it is about to write:
``plan.registry.config_map_names``; ConfigMaps are never listed, so the operator cannot enumerate
a tenant's) and writes what changed (``controllers/registry_writes.py``). A resync at an unchanged
generation first asks the remote for the ref alone (``gitfetch.resolve_commit``): when it still
names ``status.commit`` and every object the last sync wrote still has its recorded digest
(``plan.registry.intact``), nothing is fetched and only the sync time moves. Registries are few and
syncs rare: the registry's own objects are read from the API, not watched.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import kopf

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.registry import RecipeRegistrySpec, RecipeRegistryStatus
from sparkrun_operator.api.resources import RECIPE, RECIPE_REGISTRY
from sparkrun_operator.controllers.loop import reconcile_daemon
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.reconciler import Outcome, no_events, run_pass, writes_status
from sparkrun_operator.controllers.registry_writes import carry_out
from sparkrun_operator.controllers.status import current_status
from sparkrun_operator.errors import SparkrunError
from sparkrun_operator.gitfetch import GitFetchError, GitSource, fetch_tree, resolve_commit
from sparkrun_operator.k8s.resources import CONFIG_MAPS, SECRETS, resource_of
from sparkrun_operator.plan import registry_status
from sparkrun_operator.plan.registry import config_map_names, intact, plan_sync
from sparkrun_operator.plan.registry_status import Moment
from sparkrun_operator.recipe.registry_tree import RegistryContents, read_registry
from sparkrun_operator.render import keys
from sparkrun_operator.render.registry import RegistryRef

REGISTRIES = resource_of(RECIPE_REGISTRY)
RECIPES = resource_of(RECIPE)
REGISTRY_ID = (RECIPE_REGISTRY.group, RECIPE_REGISTRY.version, RECIPE_REGISTRY.plural)
#: The user a ``token`` is sent as (GitHub's and Gitea's convention for tokens over HTTP).
TOKEN_USER: Final = "x-access-token"
#: The most bytes of one credential value read from the Secret.
CREDENTIAL_MAX: Final = 4096
#: How long a pass waits for the watch to show the status of this process's last sync.
STALE_SECONDS: Final = 30.0
STALE_RETRY_SECONDS: Final = 1.0
#: ConfigMaps read at once in one sync.
READS_AT_ONCE: Final = 8


def _key(_namespace: str, name: str) -> tuple[str, str]:
    return ("rreg", name)


class CredentialsError(SparkrunError):
    """The credentials Secret cannot be used (missing, or neither username+password nor token)."""


@dataclass(frozen=True, kw_only=True)
class Fetched:
    commit: str
    contents: RegistryContents
    skipped: Mapping[str, str]
    recipes: list[dict[str, Any]]
    config_maps: list[dict[str, Any]]


def _value(data: Mapping[str, Any], key: str) -> str | None:
    raw = data.get(key)
    if not isinstance(raw, str) or not raw or len(raw) > CREDENTIAL_MAX * 2:
        return None
    try:
        decoded = base64.b64decode(raw, validate=True)[:CREDENTIAL_MAX].decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.strip() or None


async def credentials(ctx: Memo, spec: RecipeRegistrySpec) -> tuple[str | None, str | None]:
    """``(username, password)`` from ``credentialsSecret`` in the operator's namespace, for an
    http(s) URL only (``git://`` has no authentication: nothing is sent); ``(None, None)`` without one."""
    if spec.credentials_secret is None or not spec.url.lower().startswith(("https://", "http://")):
        return None, None
    namespace = ctx.config.executor_namespace
    secret = await ctx.kube.get(SECRETS, spec.credentials_secret.name, namespace)
    if secret is None:
        raise CredentialsError(f"Secret {namespace}/{spec.credentials_secret.name} does not exist")
    data = secret.get("data") or {}
    token = _value(data, "token")
    if token is not None:
        return TOKEN_USER, token
    username, password = _value(data, "username"), _value(data, "password")
    if username is None or password is None:
        raise CredentialsError(
            f"Secret {namespace}/{spec.credentials_secret.name} has neither username and password nor token"
        )
    return username, password


async def config_maps_named(ctx: Memo, namespace: str, names: list[str]) -> list[dict[str, Any]]:
    """The ConfigMaps of ``names`` that exist in ``namespace``, each read by name
    (:data:`READS_AT_ONCE` at a time)."""
    gate = asyncio.Semaphore(READS_AT_ONCE)

    async def one(name: str) -> dict[str, Any] | None:
        async with gate:
            return await ctx.kube.get(CONFIG_MAPS, name, namespace)

    found = await asyncio.gather(*(one(name) for name in names))
    return [obj for obj in found if obj is not None]


async def fetch(
    ctx: Memo, spec: RecipeRegistrySpec, name: str, source: GitSource, previous: RecipeRegistryStatus
) -> Fetched:
    """Fetch and read the registry, and read what it owns in its namespace (the Recipes
    labelled with it; the ConfigMaps by name)."""
    tree = await fetch_tree(source)
    contents = await asyncio.to_thread(read_registry, tree.files, spec.subpath, tree.modes)
    selector = f"{keys.LABEL_REGISTRY}={name}"
    recipes, config_maps = await asyncio.gather(
        ctx.kube.list(RECIPES, spec.target_namespace, label_selector=selector),
        config_maps_named(ctx, spec.target_namespace, config_map_names(name, contents, previous)),
    )
    return Fetched(
        commit=tree.commit, contents=contents, skipped=tree.skipped, recipes=recipes, config_maps=config_maps
    )


async def still_synced(
    ctx: Memo, ref: RegistryRef, source: GitSource, previous: RecipeRegistryStatus, at: Moment
) -> bool:
    """Whether the remote's ref still names ``status.commit`` (its refs alone: no pack) and every
    object the last sync wrote at this generation is as recorded: then a sync fetches nothing."""
    if not registry_status.may_skip(previous, at) or await resolve_commit(source) != previous.commit:
        return False
    recipes, config_maps = await asyncio.gather(
        ctx.kube.list(RECIPES, ref.namespace, label_selector=f"{keys.LABEL_REGISTRY}={ref.name}"),
        config_maps_named(ctx, ref.namespace, [c.name for c in previous.config_maps]),
    )
    return await asyncio.to_thread(intact, ref, previous, recipes, config_maps)


def _unseen_sync(attempted: dt.datetime | None, previous: RecipeRegistryStatus, now: dt.datetime) -> bool:
    """Whether this process started a sync (at ``attempted``) that the status it sees does not
    show yet, for at most :data:`STALE_SECONDS` (a status write that failed is not waited for)."""
    if attempted is None or (now - attempted).total_seconds() > STALE_SECONDS:
        return False
    return previous.last_attempt_time is None or previous.last_attempt_time < attempted


def _served(ctx: Memo, namespace: str) -> bool:
    served = ctx.config.served_namespaces
    return not served or namespace in served


async def sync(
    ctx: Memo, body: Mapping[str, Any], spec: RecipeRegistrySpec, previous: RecipeRegistryStatus, at: Moment
) -> RecipeRegistryStatus:
    """One sync: the status it leads to (a failure is a status too, never an exception, except
    what the loop handles: conflicts and an unavailable apiserver)."""
    meta = body.get("metadata") or {}
    name = str(meta["name"])
    ref = RegistryRef(name=name, uid=str(meta.get("uid") or ""), namespace=spec.target_namespace)
    try:
        username, password = await credentials(ctx, spec)
        source = GitSource(
            url=spec.url, ref=spec.ref, subpath=spec.subpath, username=username, password=password
        )
        if await still_synced(ctx, ref, source, previous, at):
            return registry_status.unchanged(previous, at)
        fetched = await fetch(ctx, spec, name, source, previous)
    except CredentialsError as error:
        return registry_status.failed(previous, at, reason=c.REASON_CREDENTIALS_INVALID, message=str(error))
    except GitFetchError as error:
        message = f"fetch failed ({error.kind}): {clip(str(error), 2000)}"
        return registry_status.failed(previous, at, reason=c.REASON_FETCH_FAILED, message=message)
    # NB: in a thread: validates every spec and hashes every live object (up to 2,048 recipes)
    planned = await asyncio.to_thread(
        functools.partial(
            plan_sync,
            ref,
            commit=fetched.commit,
            contents=fetched.contents,
            recipes=fetched.recipes,
            config_maps=fetched.config_maps,
            previous=previous,
            skipped=fetched.skipped,
        )
    )
    entries, config_maps, problems = await carry_out(ctx.kube.as_manager(keys.REGISTRY_MANAGER), ref, planned)
    # NB: in a thread: a large status is measured and cut to its budget (plan/registry_budget.py)
    return await asyncio.to_thread(
        registry_status.synced,
        previous,
        at,
        commit=fetched.commit,
        planned=planned,
        entries=entries,
        config_maps=config_maps,
        problems=problems,
    )


async def reconcile(ctx: Memo, body: Mapping[str, Any], attempted: dict[str, dt.datetime]) -> float | None:
    """One pass (:func:`.reconciler.run_pass`): sync when due; seconds to the next sync."""
    meta = body.get("metadata") or {}
    name = str(meta["name"])
    spec = RecipeRegistrySpec.model_validate(body.get("spec") or {})
    previous = current_status(body, RecipeRegistryStatus)
    at = Moment(
        generation=int(meta.get("generation") or 0),
        request=registry_status.request_of(
            (meta.get("annotations") or {}).get(keys.ANNOTATION_SYNC_REQUESTED)
        ),
        now=utcnow(),
    )
    served = _served(ctx, spec.target_namespace)
    due = registry_status.seconds_to_sync(spec, previous, at) if served else None

    async def observed() -> tuple[float | None]:
        # NB: a tuple: run_pass ends a pass whose observation is None, and a registry that does
        # not sync (disabled, target namespace not served: due is None) still writes its status
        return (due,)

    def plan(seen: tuple[float | None]) -> float | None:
        return seen[0]

    async def act(_observed: tuple[float | None], wait: float | None) -> Outcome[RecipeRegistryStatus]:
        if _unseen_sync(attempted.get(name), previous, at.now):
            # NB: the watch has not delivered our last sync's status yet: a write from this
            # stale view would undo it, a sync would repeat it
            return Outcome(status=previous, write=False, requeue=STALE_RETRY_SECONDS)
        if wait is None or wait > 0:
            return Outcome(status=registry_status.idle(spec, previous, at, served=served), requeue=wait)
        attempted[name] = at.now
        status = await sync(ctx, body, spec, previous, at)
        again = registry_status.seconds_to_sync(spec, status, at)
        return Outcome(status=status, requeue=again)

    return await run_pass(
        observe=observed,
        plan=plan,
        execute=act,
        write_status=writes_status(ctx, REGISTRIES, body),
        emit_events=no_events,
    )


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the RecipeRegistry controller's handlers on ``registry``."""
    #: Registry name -> the last sync this process started (the status may not show it yet).
    attempted: dict[str, dt.datetime] = {}

    @kopf.on.event(*REGISTRY_ID, id="rreg-changed", registry=registry)
    async def rreg_changed(*, body: kopf.Body, memo: Any, type: str | None, **_: Any) -> None:
        name = str((body.get("metadata") or {}).get("name") or "")
        if type == "DELETED":
            attempted.pop(name, None)
            return
        ctx: Memo = memo.ctx
        ctx.triggers.poke(_key("", name))

    async def one(ctx: Memo, body: Mapping[str, Any]) -> float | None:
        return await reconcile(ctx, body, attempted)

    reconcile_daemon(
        registry, REGISTRY_ID, handler_id="rreg-reconcile", kind="RecipeRegistry", key=_key, reconcile=one
    )
