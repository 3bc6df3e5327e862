"""InferencePools another product created, routed by the model name on their annotation.

The Gateway API Inference Extension's ``InferencePool`` (``inference.networking.k8s.io/v1``)
names the pods of a model server, not the model (v1 pools carry no model name). A pool annotated
``sparkrun.dev/model-name: <name>`` (:data:`~..render.keys.ANNOTATION_POOL_MODEL`) is routed by
the gateway under that name, like a workload's served name:

- only pools the operator does not keep (no :data:`~..render.keys.LABEL_INFERENCE_POOL`: those
  select our own engines, which the gateway routes through their workloads already);
- the name is checked as a served name (:mod:`~..api.servedname`) and against the name policy of
  the pool's namespace (:mod:`~..api.namepolicy`), exactly as a workload's;
- its endpoints are the Ready pods of the pool's namespace matching ``spec.selector.matchLabels``
  (one label-selected pod watch per pool), at ``targetPorts[0].number`` over HTTP/1.1 (a pool
  with ``appProtocol: kubernetes.io/h2c`` is not routed);
- a pool never selects the operator's pods (engines, endpoint pickers: :data:`EXCLUDED_LABELS`,
  excluded in the selector the apiserver applies): those are routed through their workloads,
  under their names, name policy and authorization, never under a pool's;
- a pod's address is used only when it is an IP address a pod can have (no host name, loopback,
  link-local, unspecified or multicast address) and the pod is not on the host's network;
- a workload's name always wins over a pool's; between pools the oldest keeps the name
  (:meth:`~.routing.RoutingTable.build`); at most :data:`MAX_POOLS` pools are routed, chosen
  fairly between namespaces (:func:`chosen`), and only pools that can route count.

Everything read from a pool is bounded before it is used, and the cache keeps only what routing
reads (:func:`slim_pool`): a pool is a tenant's object.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

from sparkrun_operator.api import namepolicy, servedname
from sparkrun_operator.api.meta import parse_time
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.k8s import discovery
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.informer import Informer
from sparkrun_operator.k8s.resources import INFERENCE_POOLS, PODS
from sparkrun_operator.plan.served import TEXT_GENERATION
from sparkrun_operator.render import keys

from .routing import Workload

log = logging.getLogger("sparkrun.gateway.pools")

#: Foreign pools routed at once (each costs one pod watch; :func:`chosen` shares them out).
MAX_POOLS: Final = 64
#: Labels of the operator's pods (engines; endpoint pickers): no foreign pool selects them.
EXCLUDED_LABELS: Final = tuple(sorted((keys.LABEL_WORKLOAD, keys.LABEL_INFERENCE_POOL)))
#: Labels of one pool's selector (the CRD's own bound).
MAX_SELECTOR_LABELS: Final = 64
#: A label key (an optional DNS prefix, ``/``, a name) and a label value: characters.
MAX_LABEL_KEY: Final = 253
MAX_LABEL_VALUE: Final = 63
#: The pods of one pool turned into endpoints (sorted; the rest is ignored).
MAX_POOL_ENDPOINTS: Final = 1024
_KEY_CHARS: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_./")
_VALUE_CHARS: Final = _KEY_CHARS - {"/"}
_H2C: Final = "kubernetes.io/h2c"

PoolKey = tuple[str, str]


async def served(kube: Kube) -> bool:
    """Whether the apiserver serves ``inferencepools`` in ``inference.networking.k8s.io/v1``
    (:func:`~sparkrun_operator.k8s.discovery.serves`: a missing group, or discovery refused, is
    ``False``)."""
    return await discovery.serves(kube, INFERENCE_POOLS)


def _label_key(text: Any) -> bool:
    return (
        isinstance(text, str)
        and 0 < len(text) <= MAX_LABEL_KEY
        and text.count("/") <= 1
        and not text.startswith("/")
        and not text.endswith("/")
        and _KEY_CHARS.issuperset(text)
    )


def _label_value(text: Any) -> bool:
    return isinstance(text, str) and len(text) <= MAX_LABEL_VALUE and _VALUE_CHARS.issuperset(text)


def _match_labels(pool: Mapping[str, Any]) -> Mapping[str, str] | None:
    """``spec.selector.matchLabels`` when a selector can safely be built from it: not empty (it
    would select every pod of the namespace), not too large, only keys and values a label can
    have, and none of :data:`EXCLUDED_LABELS`."""
    spec = pool.get("spec")
    selector = spec.get("selector") if isinstance(spec, Mapping) else None
    labels = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    if not isinstance(labels, Mapping) or not 0 < len(labels) <= MAX_SELECTOR_LABELS:
        return None
    if not all(_label_key(k) and _label_value(v) and k not in EXCLUDED_LABELS for k, v in labels.items()):
        return None
    return labels


def selector_of(pool: Mapping[str, Any]) -> str | None:
    """``spec.selector.matchLabels`` as a label selector (``k=v,...``, sorted) that also excludes
    the operator's pods (``!key`` for each of :data:`EXCLUDED_LABELS`), or ``None`` when no
    selector can safely be built from it (:func:`_match_labels`)."""
    labels = _match_labels(pool)
    if labels is None:
        return None
    return ",".join([*(f"{k}={labels[k]}" for k in sorted(labels)), *(f"!{k}" for k in EXCLUDED_LABELS)])


def port_of(pool: Mapping[str, Any]) -> int | None:
    """``spec.targetPorts[0].number`` (1-65535), or ``None``; also ``None`` for an HTTP/2 pool."""
    spec = pool.get("spec")
    if not isinstance(spec, Mapping) or spec.get("appProtocol") == _H2C:
        return None
    ports = spec.get("targetPorts")
    first = ports[0] if isinstance(ports, list) and ports else None
    number = first.get("number") if isinstance(first, Mapping) else None
    if isinstance(number, int) and not isinstance(number, bool) and 0 < number < 65536:
        return number
    return None


def model_of(pool: Mapping[str, Any]) -> str | None:
    """The model name a foreign pool is routed by: its annotation, checked as a served name;
    ``None`` for a pool of ours (labelled), one without (or with an unusable) annotation."""
    meta = pool.get("metadata")
    if not isinstance(meta, Mapping):
        return None
    labels = meta.get("labels")
    if isinstance(labels, Mapping) and keys.LABEL_INFERENCE_POOL in labels:
        return None
    annotations = meta.get("annotations")
    name = annotations.get(keys.ANNOTATION_POOL_MODEL) if isinstance(annotations, Mapping) else None
    if not isinstance(name, str) or servedname.problem(name) is not None:
        return None
    return name


def _key(pool: Mapping[str, Any]) -> PoolKey:
    meta = pool.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _usable(pool: Mapping[str, Any], policy: NamePolicy) -> tuple[str, int] | None:
    """The model name and port of a pool that can route (see the module docs), else ``None``."""
    model = model_of(pool)
    namespace, name = _key(pool)
    meta = pool.get("metadata") or {}
    if model is None or not namespace or not name or meta.get("deletionTimestamp"):
        return None
    port = port_of(pool)
    if port is None or selector_of(pool) is None or not policy.allows(namespace, model):
        return None
    return model, port


def chosen(
    pools: Iterable[Mapping[str, Any]], policy: NamePolicy
) -> dict[PoolKey, tuple[Mapping[str, Any], str]]:
    """The pools to route (only those that can), with their selectors: at most
    :data:`MAX_POOLS`, shared fairly: every namespace's oldest pool before any namespace's
    second, and so on (then by age), so a tenant with many pools never starves another's."""
    by_namespace: dict[str, list[tuple[str, PoolKey, Mapping[str, Any], str]]] = {}
    for pool in pools:
        selector = selector_of(pool)
        if selector is None or _usable(pool, policy) is None:
            continue
        created = parse_time((pool.get("metadata") or {}).get("creationTimestamp"))
        key = _key(pool)
        by_namespace.setdefault(key[0], []).append(
            (created.isoformat() if created else "~", key, pool, selector)
        )
    ranked = []
    for found in by_namespace.values():
        found.sort(key=lambda item: (item[0], item[1]))
        ranked += [(rank, *item) for rank, item in enumerate(found)]
    ranked.sort(key=lambda item: (item[0], item[1], item[2]))
    return {key: (pool, selector) for _, _, key, pool, selector in ranked[:MAX_POOLS]}


def _address(ip: Any) -> str | None:
    """``ip`` written plainly when it is an address a pod can have: an IPv4 or IPv6 address (no
    host name, zone or port), not loopback, link-local (the cloud metadata address),
    unspecified, multicast or reserved, nor an IPv4-mapped IPv6 address."""
    if not isinstance(ip, str) or not 0 < len(ip) <= 45:
        return None
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and (address.ipv4_mapped or address.scope_id):
        return None
    if address.is_loopback or address.is_link_local or address.is_unspecified:
        return None
    if address.is_multicast or address.is_reserved:
        return None
    return str(address)


def _ready(pod: Mapping[str, Any]) -> str | None:
    """The pod's IP when it is Ready, not terminating, not on the host's network and its address
    is one a pod can have (:func:`_address`), else ``None``."""
    meta, status, spec = pod.get("metadata") or {}, pod.get("status") or {}, pod.get("spec") or {}
    if meta.get("deletionTimestamp") or status.get("phase") != "Running" or spec.get("hostNetwork"):
        return None
    conditions = status.get("conditions")
    if not isinstance(conditions, list) or not any(
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    ):
        return None
    return _address(status.get("podIP"))


def pool_entry(
    pool: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], policy: NamePolicy = namepolicy.OPEN
) -> Workload | None:
    """The routing entry of one foreign pool and the pods its selector matched, or ``None`` when
    it is not routed (see the module docs)."""
    usable = _usable(pool, policy)
    if usable is None:
        return None
    (model, port), (namespace, name) = usable, _key(pool)
    meta = pool.get("metadata") or {}
    ips = sorted({ip for pod in pods if (ip := _ready(pod)) is not None})[:MAX_POOL_ENDPOINTS]
    return Workload(
        namespace=namespace,
        name=name,
        served_name=model,
        capabilities=frozenset({TEXT_GENERATION}),
        endpoints=tuple(f"http://[{ip}]:{port}" if ":" in ip else f"http://{ip}:{port}" for ip in ips),
        created=parse_time(meta.get("creationTimestamp")),
        pool=True,
    )


def _slim_pod(pod: dict[str, Any]) -> dict[str, Any]:
    """What a pool's endpoints need of a pod (the cache holds only this)."""
    meta, status, spec = pod.get("metadata") or {}, pod.get("status") or {}, pod.get("spec") or {}
    return {
        "metadata": {
            k: meta[k] for k in ("name", "namespace", "deletionTimestamp", "resourceVersion") if k in meta
        },
        "spec": {"hostNetwork": spec.get("hostNetwork") is True},
        "status": {k: status[k] for k in ("phase", "podIP", "conditions") if k in status},
    }


def slim_pool(pool: dict[str, Any]) -> dict[str, Any]:
    """What routing reads of a pool (the cache holds only this, so a tenant's large pool costs
    the gateway little): its identity and age, whether it is the operator's, its model name, a
    selector that can be used (else none), its first target port and its protocol."""
    meta, spec = pool.get("metadata") or {}, pool.get("spec") or {}
    keep = ("name", "namespace", "creationTimestamp", "deletionTimestamp", "resourceVersion")
    labels, annotations = meta.get("labels"), meta.get("annotations")
    model = annotations.get(keys.ANNOTATION_POOL_MODEL) if isinstance(annotations, Mapping) else None
    ports = spec.get("targetPorts") if isinstance(spec, Mapping) else None
    match = _match_labels(pool)
    return {
        "metadata": {
            **{k: meta[k] for k in keep if isinstance(meta, Mapping) and k in meta},
            "labels": {keys.LABEL_INFERENCE_POOL: ""}
            if isinstance(labels, Mapping) and keys.LABEL_INFERENCE_POOL in labels
            else {},
            "annotations": {keys.ANNOTATION_POOL_MODEL: model}
            if isinstance(model, str) and len(model) <= servedname.SERVED_NAME_MAX_LENGTH
            else {},
        },
        "spec": {
            "selector": {"matchLabels": dict(match)} if match is not None else {},
            "targetPorts": ports[:1] if isinstance(ports, list) else [],
            **(
                {"appProtocol": spec["appProtocol"]}
                if isinstance(spec, Mapping) and "appProtocol" in spec
                else {}
            ),
        },
    }


class PoolWatch:
    """Foreign InferencePools of the served namespaces and the pods each one selects.

    One pool watch per namespace; one label-selected pod watch per routed pool, started and
    stopped as pools come, go or change their selector. ``on_change`` is called (on the loop,
    never blocking) after every change of either."""

    def __init__(
        self,
        kube: Kube,
        namespaces: Iterable[str | None],
        on_change: Callable[[], None],
        policy: NamePolicy = namepolicy.OPEN,
    ) -> None:
        self.kube = kube
        self.policy = policy
        self.on_change = on_change
        self.pools = [
            Informer(kube, INFERENCE_POOLS, namespace=ns, transform=slim_pool, on_change=self._changed)
            for ns in namespaces
        ]
        #: The pod watch of each routed pool, with the selector it was started for.
        self.pods: dict[PoolKey, tuple[str, Informer]] = {}
        self._chores: set[asyncio.Task[None]] = set()
        self._over = False

    @property
    def synced(self) -> bool:
        return all(i.synced for i in self.pools)

    def routed(self) -> dict[PoolKey, tuple[Mapping[str, Any], str]]:
        """The pools to route (:func:`chosen`), with their selectors."""
        every = [pool for informer in self.pools for pool in informer.objects.values()]
        picked = chosen(every, self.policy)
        over = len(picked) == MAX_POOLS and sum(1 for p in every if _usable(p, self.policy)) > MAX_POOLS
        if over and not self._over:
            log.warning(
                "more than %d routable InferencePools; routing %d, shared between namespaces",
                MAX_POOLS,
                MAX_POOLS,
            )
        self._over = over
        return picked

    def entries(self) -> list[Workload]:
        """The routing entries of the routed pools (pools whose pods are not listed yet have none)."""
        out = []
        for key, (pool, _) in self.routed().items():
            watch = self.pods.get(key)
            entry = pool_entry(pool, watch[1].objects.values() if watch else (), self.policy)
            if entry is not None:
                out.append(entry)
        return out

    async def start(self, sync_timeout: float = 30.0) -> None:
        """List and watch the pools (as the workloads: the gateway does not start without them),
        then give the routed pools' pod watches ``sync_timeout`` in all to list. A tenant's pool
        whose pods are slow to list, or refused, never holds the gateway's start back: its
        routes appear once its pods are listed."""
        for informer in self.pools:
            await informer.start(sync_timeout=sync_timeout)
        self._changed()
        try:
            async with asyncio.timeout(sync_timeout):
                while self._chores:
                    await asyncio.gather(*list(self._chores), return_exceptions=True)
                watches = [informer for _, informer in list(self.pods.values())]
                await asyncio.gather(*(w.start(sync_timeout=None) for w in watches), return_exceptions=True)
        except TimeoutError:
            log.warning(
                "the pods of some InferencePools were not listed within %g s; their routes appear "
                "once they are",
                sync_timeout,
            )

    async def close(self) -> None:
        for informer in self.pools:
            await informer.close()
        for task in list(self._chores):
            task.cancel()
        for _, informer in self.pods.values():
            await informer.close()
        self.pods.clear()

    def _changed(self) -> None:
        if self.synced:
            wanted = self.routed()
            for key in [k for k, (sel, _) in self.pods.items() if wanted.get(k, (None, None))[1] != sel]:
                self._chore(self.pods.pop(key)[1].close())
            for key, (_, selector) in wanted.items():
                if key not in self.pods:
                    informer = Informer(
                        self.kube,
                        PODS,
                        namespace=key[0],
                        label_selector=selector,
                        transform=_slim_pod,
                        on_change=self.on_change,
                    )
                    self.pods[key] = (selector, informer)
                    self._chore(informer.start(wait=False))
        self.on_change()

    def _chore(self, work: Any) -> None:
        """Run ``work`` (an informer's start or close) as a task of its own, kept until done."""
        task: asyncio.Task[None] = asyncio.ensure_future(work)
        self._chores.add(task)
        task.add_done_callback(self._chores.discard)
        task.add_done_callback(_log_failure)


def _log_failure(task: asyncio.Task[None]) -> None:
    if not task.cancelled() and (error := task.exception()) is not None:
        log.warning("a pool's pod watch: %s", error)
