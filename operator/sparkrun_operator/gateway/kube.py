"""The gateway's Kubernetes side: routes from watches, wake by patching, keys from Secrets.

- :class:`KubeRoutingSource` keeps the routing table from two watches (no API call per
  request): InferenceWorkloads (state, prefix affinity, and the names, aliases and capabilities
  of ``status.model``: ``plan/served.py``) and the EndpointSlices of their Services (ready
  leader addresses). Endpoints are addresses of pods, not ClusterIPs, so the gateway balances
  across replicas itself. Where the apiserver serves InferencePools, also the pools other
  products created that carry a model-name annotation, and their Ready pods (:mod:`.pools`).
- :class:`KubeWaker` wakes a Sleeping or Stopped workload by setting ``spec.state: Running``
  (a merge patch as field manager ``sparkrun-gateway``, ADR 0011; the operator does the rest),
  and one the idle policy took to zero replicas by also setting ``spec.replicas`` to its resume
  count (a JSON patch that first tests that ``spec.replicas`` is still 0, ADR 0045).
- :class:`SecretKeySource` serves API keys from Secrets labelled ``sparkrun.dev/gateway-key``:
  ``data.key`` is the key; ``data.models`` (optional) a comma- or newline-separated allowlist,
  ``*`` or absent for every model. A key grants at most the workloads of its Secret's own
  namespace, unless that namespace is an administrator namespace (``--admin-key-namespace``).

Routing state of a workload: ``spec.state`` when it is not Running; while the engine is still
asleep after a wake (condition ``Sleeping=True``) it stays ``Sleeping``, so held requests are
released only once the engine is awake and a leader is ready. Zero replicas count as resting
(a request wakes them) only when the idle policy or an autoscaler floor of 0 put them there
(``spec.idle.zeroAfterSeconds``, ``spec.autoscaling.minReplicas: 0``); the user's own
``replicas: 0`` is not served.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime as dt
import itertools
import logging
import math
from collections.abc import Iterable, Iterator
from typing import Any

from sparkrun_operator import safeload
from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.api.scaling import WAKE_HISTORY
from sparkrun_operator.gateway import pools
from sparkrun_operator.gateway.auth import DigestTable, Grant
from sparkrun_operator.gateway.pools import PoolWatch
from sparkrun_operator.gateway.routing import (
    RoutingTable,
    State,
    TablePublisher,
    WakeHistory,
    Workload,
)
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import GATEWAY_MANAGER, Kube
from sparkrun_operator.k8s.informer import Informer, drop_managed_fields
from sparkrun_operator.k8s.resources import CONFIG_MAPS, ENDPOINT_SLICES, SECRETS, Resource, resource_of
from sparkrun_operator.plan import wake
from sparkrun_operator.plan.drain import unrouted_of
from sparkrun_operator.plan.names import claim_of
from sparkrun_operator.plan.served import of_workload
from sparkrun_operator.plan.wake import Resting
from sparkrun_operator.render import keys

log = logging.getLogger("sparkrun.gateway.kube")

WORKLOADS = resource_of(INFERENCE_WORKLOAD)
LABEL_WORKLOAD = keys.LABEL_WORKLOAD
LABEL_SERVICE_NAME = "kubernetes.io/service-name"
LABEL_GATEWAY_KEY = keys.LABEL_GATEWAY_KEY
PORT_NAME = "http"
FIELD_MANAGER = GATEWAY_MANAGER
#: Imperative aliases of the daemon API (``proxy.add_alias``; ADR 0006): ConfigMap data key
#: ``aliases.json`` = {"alias": "target model name"}, applied to workloads of its namespace.
ALIASES_CONFIG_MAP = keys.GATEWAY_ALIASES_CONFIG_MAP
ALIASES_KEY = "aliases.json"


def _condition_true(status: dict[str, Any], type_: str) -> bool:
    return any(c.get("type") == type_ and c.get("status") == "True" for c in status.get("conditions") or [])


def routing_state(obj: dict[str, Any]) -> State:
    """The state the gateway routes by (see module docs)."""
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    desired = spec.get("state") or "Running"
    if desired in ("Sleeping", "Stopped"):
        return "Sleeping" if desired == "Sleeping" else "Stopped"
    return "Sleeping" if _condition_true(status, "Sleeping") else "Running"


def _seconds_list(raw: Any) -> tuple[float, ...]:
    """The last :data:`WAKE_HISTORY` finite, non-negative seconds of ``raw`` (at most a day each)."""
    if not isinstance(raw, list):
        return ()
    kept = [
        float(v)
        for v in raw[-WAKE_HISTORY:]
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and 0 <= v <= 86_400
    ]
    return tuple(kept)


def wake_history(obj: dict[str, Any]) -> WakeHistory:
    """``status.scaling.wakeSeconds`` (bounded: a status is data, not trusted for size)."""
    seconds = ((obj.get("status") or {}).get("scaling") or {}).get("wakeSeconds") or {}
    if not isinstance(seconds, dict):
        return WakeHistory()
    return WakeHistory(
        sleeping=_seconds_list(seconds.get("sleeping")),
        zero=_seconds_list(seconds.get("zero")),
        stopped=_seconds_list(seconds.get("stopped")),
    )


def wake_under_way(obj: dict[str, Any]) -> tuple[Resting | None, dt.datetime | None]:
    """``status.scaling.wake``: where the wake the operator saw begin started from, and when."""
    wake = ((obj.get("status") or {}).get("scaling") or {}).get("wake") or {}
    if not isinstance(wake, dict):
        return None, None
    kind = wake.get("from")
    since: dt.datetime | None = None
    raw = wake.get("since")
    if isinstance(raw, str) and len(raw) <= 64:
        try:
            since = dt.datetime.fromisoformat(raw)
        except ValueError:
            since = None
        if since is not None and since.tzinfo is None:
            since = since.replace(tzinfo=dt.UTC)
    resting: Resting | None = kind if kind in ("Sleeping", "Zero", "Stopped") else None
    return resting, since


def ready_endpoints(
    slices: Iterable[dict[str, Any]], unrouted: frozenset[str] = frozenset()
) -> tuple[str, ...]:
    """``http://ip:port`` of every ready, non-terminating endpoint of the slices (sorted), but
    those of the pods in ``unrouted`` (a group moving in a drain: ``plan/drain.py``)."""
    urls: set[str] = set()
    for sl in slices:
        ports = sl.get("ports") or []
        port = next((p.get("port") for p in ports if p.get("name") == PORT_NAME), None)
        if port is None and ports:
            port = ports[0].get("port")
        if port is None:
            continue
        for ep in sl.get("endpoints") or []:
            cond = ep.get("conditions") or {}
            # NB: a nil "ready" means ready (discovery.k8s.io/v1 semantics).
            if cond.get("ready") is False or cond.get("terminating") is True:
                continue
            target = ep.get("targetRef") or {}
            if unrouted and isinstance(target, dict) and target.get("name") in unrouted:
                continue
            for address in (ep.get("addresses") or [])[:1]:
                host = f"[{address}]" if ":" in address else address
                urls.add(f"http://{host}:{port}")
    return tuple(sorted(urls))


def workload_entry(
    obj: dict[str, Any], slices: Iterable[dict[str, Any]], policy: NamePolicy = namepolicy.OPEN
) -> Workload | None:
    """The routing entry of one InferenceWorkload and its Service's EndpointSlices; ``None`` for
    a workload without names yet (a recipe the operator has not resolved: no ``status.model``).

    Names and capabilities are the workload's served model (:func:`~..plan.served.of_workload`:
    ``status.model``, the one naming rule), so the gateway routes, and rewrites to, the name the
    engine is started with; the names ``policy`` refuses its namespace are withheld (not routed
    to it, and they block nobody: plan/names.py)."""
    spec = obj.get("spec") or {}
    served = of_workload(obj)
    claim = claim_of(obj, served, policy=policy) if served is not None else None
    if served is None or claim is None:
        return None
    wake_from, wake_since = wake_under_way(obj)
    return Workload(
        namespace=claim.namespace,
        name=claim.name,
        served_name=served.served_name,
        aliases=served.aliases,
        state=routing_state(obj),
        capabilities=frozenset(served.capabilities),
        endpoints=ready_endpoints(slices, unrouted_of(obj)),
        prefix_affinity=bool((spec.get("routing") or {}).get("prefixAffinity", False)),
        created=claim.created,
        withheld=claim.withheld,
        connect_timeout=_seconds(spec, "connectTimeoutSeconds"),
        read_timeout=_seconds(spec, "readTimeoutSeconds"),
        total_timeout=_seconds(spec, "totalTimeoutSeconds"),
        resting=wake.resting_of(obj),
        replicas=wake.bounded_count(spec.get("replicas", 1), 0),
        resume_replicas=wake.resume_replicas(obj),
        wake_history=wake_history(obj),
        wake_from=wake_from,
        wake_since=wake_since,
    )


def _seconds(spec: dict[str, Any], field: str) -> float | None:
    """``spec.routing.<field>`` as seconds (the CRD bounds it; anything else is ignored)."""
    value = (spec.get("routing") or {}).get(field)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value)
    return None


def imperative_aliases(config_maps: Iterable[dict[str, Any]]) -> dict[str, dict[str, str]]:
    """``{namespace: {alias: target}}`` from the alias ConfigMaps (anyone who may write ConfigMaps
    in a watched namespace writes one): JSON within ``safeload.ALIAS_STATE`` (1 MiB, 16 levels);
    anything else is logged and skipped, so one ConfigMap cannot stop routing updates."""
    out: dict[str, dict[str, str]] = {}
    for cm in config_maps:
        meta = cm.get("metadata") or {}
        raw = (cm.get("data") or {}).get(ALIASES_KEY) or "{}"
        try:
            parsed = safeload.load_json(raw, safeload.ALIAS_STATE)
        except safeload.DocumentError as error:
            log.error("%s/%s: %s ignored: %s", meta.get("namespace"), meta.get("name"), ALIASES_KEY, error)
            continue
        if isinstance(parsed, dict):
            out[str(meta.get("namespace") or "")] = {str(k): str(v) for k, v in parsed.items()}
    return out


def _with_imperative(
    entries: list[Workload], aliases: dict[str, dict[str, str]], policy: NamePolicy = namepolicy.OPEN
) -> list[Workload]:
    """Add the imperative aliases. A declared name (any namespace) always beats one, so the
    operator, which sees only declared names, reports the same owners as the gateway routes;
    between imperative aliases of two namespaces the first namespace (sorted) keeps it. An
    alias outside its ConfigMap namespace's prefixes (``policy``) is dropped."""
    by_name = {(e.namespace, n): e for e in entries for n in (e.served_name, *e.aliases)}
    taken = {n for e in entries for n in e.names}
    extra: dict[str, list[str]] = {}
    for namespace, table in sorted(aliases.items()):
        for alias, target in sorted(table.items()):
            owner = by_name.get((namespace, target))
            if owner is None:
                continue  # the target is not served (yet): the alias resolves once it is
            if not policy.allows(namespace, alias):
                log.warning(
                    "alias %r -> %r in %s ignored: %s may claim %s",
                    alias,
                    target,
                    namespace,
                    namespace,
                    policy.describe(namespace),
                )
                continue
            if alias in taken:
                if alias not in owner.names:
                    log.warning(
                        "alias %r -> %r in %s ignored: the name is already taken", alias, target, namespace
                    )
                continue
            taken.add(alias)
            extra.setdefault(owner.key, []).append(alias)
    return [
        dataclasses.replace(e, aliases=(*e.aliases, *extra[e.key])) if e.key in extra else e for e in entries
    ]


def build_entries(
    workloads: Iterable[dict[str, Any]],
    slices: Iterable[dict[str, Any]],
    aliases: dict[str, dict[str, str]] | None = None,
    policy: NamePolicy = namepolicy.OPEN,
) -> list[Workload]:
    """Routing entries for ``workloads``, each with the slices of its Service and, from
    ``aliases`` (``{namespace: {alias: target}}``), the imperative aliases naming it; names
    outside a namespace's prefixes (``policy``) are not routed."""
    by_service: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for sl in slices:
        meta = sl.get("metadata") or {}
        service = (meta.get("labels") or {}).get(LABEL_SERVICE_NAME)
        if service:
            by_service.setdefault((str(meta.get("namespace") or ""), str(service)), []).append(sl)
    entries = []
    for obj in workloads:
        meta = obj.get("metadata") or {}
        if meta.get("deletionTimestamp"):
            continue
        key = (str(meta.get("namespace") or ""), str(meta.get("name") or ""))
        entry = workload_entry(obj, by_service.get(key, []), policy)
        if entry is not None:
            entries.append(entry)
    return _with_imperative(entries, aliases or {}, policy)


class KubeConnection:
    """One API client shared by the gateway's Kubernetes parts, opened on first use.

    The client must be created on the serving event loop (aiohttp), so the command line builds
    this and the parts connect when the gateway starts.
    """

    def __init__(self, *, kubeconfig: str | None = None, context: str | None = None) -> None:
        self.kubeconfig = kubeconfig
        self.context = context
        self._kube: Kube | None = None

    async def kube(self) -> Kube:
        if self._kube is None:
            self._kube = await Kube.connect(
                field_manager=FIELD_MANAGER, kubeconfig=self.kubeconfig, context=self.context
            )
        return self._kube

    async def close(self) -> None:
        if self._kube is not None:
            await self._kube.close()
            self._kube = None


async def _kube_of(conn: Kube | KubeConnection) -> Kube:
    """The client of ``conn``; every write of the gateway goes as ``sparkrun-gateway``."""
    kube = conn if isinstance(conn, Kube) else await conn.kube()
    return kube if kube.field_manager == FIELD_MANAGER else kube.as_manager(FIELD_MANAGER)


def namespaces_of(namespace: str | Iterable[str] | None) -> tuple[str | None, ...]:
    """The namespaces to watch: ``(None,)`` (every namespace) for ``None`` or an empty list, else
    each named one once, in order (``watchNamespaces`` of the chart: one watch per namespace, so
    the gateway needs rights only there)."""
    if namespace is None or isinstance(namespace, str):
        return (namespace or None,)
    names = tuple(dict.fromkeys(n for n in namespace if n))
    return names or (None,)


class Watches:
    """One :class:`Informer` per namespace of one resource, seen as one cache."""

    def __init__(
        self, kube: Kube, resource: Resource, namespaces: Iterable[str | None], **options: Any
    ) -> None:
        self.informers = [Informer(kube, resource, namespace=ns, **options) for ns in namespaces]

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self.informers)

    def objects(self) -> Iterator[dict[str, Any]]:
        """Every cached object of every namespace (keys differ: they include the namespace)."""
        return itertools.chain.from_iterable(i.objects.values() for i in self.informers)

    async def start(self) -> None:
        for informer in self.informers:
            await informer.start()

    async def close(self) -> None:
        for informer in self.informers:
            await informer.close()


class KubeRoutingSource:
    """A :class:`~sparkrun_operator.gateway.routing.RoutingSource` fed by watches."""

    def __init__(
        self,
        conn: Kube | KubeConnection,
        *,
        namespace: str | Iterable[str] | None = None,
        name_policy: NamePolicy = namepolicy.OPEN,
        inference_pools: bool = False,
    ) -> None:
        self._conn = conn
        self._namespaces = namespaces_of(namespace)
        #: Which names each namespace may claim (``--name-prefixes``); the rest is not routed.
        self.name_policy = name_policy
        #: Route annotated foreign InferencePools when the apiserver serves them (``--inference-pools``:
        #: the command's default is ``auto``, so ``True``; off unless asked where built otherwise).
        self.inference_pools = inference_pools
        self._publisher = TablePublisher()
        self._workloads: Watches | None = None
        self._slices: Watches | None = None
        self._aliases: Watches | None = None
        self._pools: PoolWatch | None = None

    def snapshot(self) -> RoutingTable:
        return self._publisher.snapshot()

    async def wait_changed(self, version: int) -> RoutingTable:
        return await self._publisher.wait_changed(version)

    async def start(self) -> None:
        if self._workloads is not None:
            return
        kube = await _kube_of(self._conn)
        ns = self._namespaces
        prune = drop_managed_fields
        self._slices = Watches(
            kube,
            ENDPOINT_SLICES,
            ns,
            label_selector=LABEL_WORKLOAD,
            transform=prune,
            on_change=self._rebuild,
        )
        self._workloads = Watches(kube, WORKLOADS, ns, transform=prune, on_change=self._rebuild)
        self._aliases = Watches(
            kube,
            CONFIG_MAPS,
            ns,
            field_selector=f"metadata.name={ALIASES_CONFIG_MAP}",
            transform=prune,
            on_change=self._rebuild,
        )
        await self._slices.start()
        await self._aliases.start()
        if self.inference_pools and await pools.served(kube):
            log.info("routing annotated InferencePools (inference.networking.k8s.io/v1 is served)")
            self._pools = PoolWatch(kube, ns, self._rebuild, self.name_policy)
            await self._pools.start()
        await self._workloads.start()

    async def close(self) -> None:
        for informer in (self._workloads, self._slices, self._aliases, self._pools):
            if informer is not None:
                await informer.close()
        self._workloads = self._slices = self._aliases = self._pools = None

    def _rebuild(self) -> None:
        workloads, slices, aliases = self._workloads, self._slices, self._aliases
        if workloads is None or slices is None or aliases is None:
            return
        if not (workloads.synced and slices.synced and aliases.synced):
            return
        entries = build_entries(
            workloads.objects(),
            slices.objects(),
            imperative_aliases(aliases.objects()),
            self.name_policy,
        )
        if self._pools is not None:
            entries += self._pools.entries()  # NB: a workload's name wins (RoutingTable.build)
        # NB: a contested name affects only that name (plan/names.py); the rest always updates.
        self._publisher.publish(entries)


class KubeWaker:
    """Wakes a workload by setting ``spec.state: Running`` and, from zero, ``spec.replicas``."""

    def __init__(self, conn: Kube | KubeConnection) -> None:
        self.conn = conn

    async def wake(self, workload: Workload) -> None:
        log.info("waking %s (%s)", workload.key, workload.resting or workload.state)
        kube = await _kube_of(self.conn)
        if workload.resting == "Zero" and await self._from_zero(kube, workload):
            return
        await kube.merge_patch(WORKLOADS, workload.name, wake.STATE_RUNNING, namespace=workload.namespace)

    async def _from_zero(self, kube: Kube, workload: Workload) -> bool:
        """Replicas back to the resume count, only while they are still 0 (a JSON patch whose
        ``test`` fails, 422, when something else scaled it meanwhile: then only the state is set)."""
        try:
            await kube.request(
                "PATCH",
                WORKLOADS.path(workload.namespace, workload.name),
                body=wake.from_zero(workload.resume_replicas),
                content_type="application/json-patch+json",
            )
        except errors.KubeInvalid as error:
            log.info("%s is no longer at zero replicas (%s); setting its state only", workload.key, error)
            return False
        return True


def _decode(secret: dict[str, Any], field: str) -> str | None:
    raw = (secret.get("data") or {}).get(field)
    if raw is None:
        plain = (secret.get("stringData") or {}).get(field)
        return str(plain) if plain is not None else None
    try:
        return base64.b64decode(raw, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None


def grant_of(secret: dict[str, Any], *, admin_namespaces: Iterable[str] = ()) -> tuple[str, Grant] | None:
    """``(key, grant)`` of a gateway-key Secret, or None when it holds no usable key. The grant
    is limited to the Secret's namespace unless it is one of ``admin_namespaces``."""
    meta = secret.get("metadata") or {}
    key = (_decode(secret, "key") or "").strip()
    if not key:
        log.warning("gateway key Secret %s/%s has no data.key", meta.get("namespace"), meta.get("name"))
        return None
    raw_models = _decode(secret, "models")
    models = [m.strip() for m in (raw_models or "*").replace("\n", ",").split(",") if m.strip()]
    namespace = str(meta.get("namespace") or "")
    name = f"{namespace}/{meta.get('name')}"
    scope = None if namespace in set(admin_namespaces) else namespace
    return key, Grant(name, None if not models or "*" in models else frozenset(models), scope)


class SecretKeySource:
    """API keys from labelled Secrets, kept current by a watch (see module docs)."""

    def __init__(
        self,
        conn: Kube | KubeConnection,
        *,
        namespace: str | Iterable[str] | None = None,
        admin_namespaces: Iterable[str] = (),
    ) -> None:
        self._conn = conn
        self._namespaces = namespaces_of(namespace)
        self.admin_namespaces = frozenset(admin_namespaces)
        self._table = DigestTable()
        self._secrets: Watches | None = None

    async def start(self) -> None:
        if self._secrets is not None:
            return
        kube = await _kube_of(self._conn)
        self._secrets = Watches(
            kube,
            SECRETS,
            self._namespaces,
            label_selector=LABEL_GATEWAY_KEY,
            transform=drop_managed_fields,
            on_change=self._rebuild,
        )
        await self._secrets.start()

    async def close(self) -> None:
        if self._secrets is not None:
            await self._secrets.close()
            self._secrets = None

    def _rebuild(self) -> None:
        found = (
            grant_of(secret, admin_namespaces=self.admin_namespaces)
            for secret in (self._secrets.objects() if self._secrets is not None else ())
        )
        self._table = DigestTable([f for f in found if f is not None])

    def lookup(self, key: str) -> Grant | None:
        return self._table.lookup(key)
