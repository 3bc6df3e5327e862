"""Kubernetes authentication and authorization for the daemon API shim.

- :class:`Authenticator`: bearer tokens through ``TokenReview``;
- :class:`Authorizer`: permissions through ``SubjectAccessReview`` on group ``sparkrun.dev``,
  resource ``daemonoperations``, verbs ``read``, ``operate``, ``admin``, ``answer-secret``;
- :class:`ManagerDirectory`: a principal's workload manager identity, from the annotation
  ``sparkrun.dev/manager`` of its ServiceAccount (``daemon`` otherwise);
- :func:`request_header_config`: the front-proxy (aggregation layer) settings the apiserver
  publishes in ``kube-system/extension-apiserver-authentication``.

Every review result is cached for a short time (positive and negative answers separately) so a
client polling a job costs no API calls, and concurrent identical lookups share one request.
A revoked token or removed RoleBinding therefore takes effect within the TTL (seconds).
Tokens are never stored: cache keys are their SHA-256 digests.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import CONFIG_MAPS, SERVICE_ACCOUNTS, Kube

__all__ = [
    "DAEMON_RESOURCE",
    "DEFAULT_MANAGER",
    "MANAGER_ANNOTATION",
    "Authenticator",
    "Authorizer",
    "ManagerDirectory",
    "RequestHeaderConfig",
    "TtlCache",
    "UserInfo",
    "request_header_config",
]

DAEMON_GROUP = "sparkrun.dev"
DAEMON_RESOURCE = "daemonoperations"
MANAGER_ANNOTATION = "sparkrun.dev/manager"
DEFAULT_MANAGER = "daemon"
_MANAGER = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_SA_USER = re.compile(r"^system:serviceaccount:([^:]+):([^:]+)$")

K = TypeVar("K")
V = TypeVar("V")


@dataclass(frozen=True)
class UserInfo:
    """An authenticated Kubernetes user."""

    username: str
    uid: str | None = None
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    key: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        # A stable cache key for everything that authorization depends on (computed once:
        # every authorization decision looks it up).
        extra = sorted((k, tuple(v)) for k, v in self.extra.items())
        object.__setattr__(self, "key", json.dumps([self.username, self.uid, sorted(self.groups), extra]))

    @property
    def service_account(self) -> tuple[str, str] | None:
        """``(namespace, name)`` when the user is a ServiceAccount."""
        found = _SA_USER.match(self.username)
        return (found.group(1), found.group(2)) if found else None


class TtlCache(Generic[K, V]):
    """A bounded cache with per-entry expiry and single-flight loading."""

    def __init__(self, *, max_entries: int = 10_000, clock: Callable[[], float] = time.monotonic) -> None:
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._loading: dict[K, asyncio.Future[V]] = {}
        self.max_entries = max_entries
        self.clock = clock
        self.hits = 0
        self.misses = 0

    def peek(self, key: K) -> V | None:
        entry = self._entries.get(key)
        if entry is None or entry[0] <= self.clock():
            return None
        return entry[1]

    def put(self, key: K, value: V, ttl: float) -> None:
        self._entries[key] = (self.clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)

    def clear(self) -> None:
        self._entries.clear()

    async def get(self, key: K, load: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        """The cached value, else ``load()`` -> ``(value, ttl)`` (shared by concurrent callers).

        The load runs as its own task: a caller that is cancelled (an SSE client that went
        away) stops waiting, but the load goes on for the other callers, and they get its answer.
        """
        entry = self._entries.get(key)
        if entry is not None and entry[0] > self.clock():
            self.hits += 1
            return entry[1]
        pending = self._loading.get(key)
        if pending is None:
            self.misses += 1
            pending = self._loading[key] = asyncio.ensure_future(self._load(key, load))
            pending.add_done_callback(_retrieve)
        # NB: shield: cancelling one waiter must not cancel the load every waiter shares.
        return await asyncio.shield(pending)

    async def _load(self, key: K, load: Callable[[], Awaitable[tuple[V, float]]]) -> V:
        try:
            value, ttl = await load()
        finally:
            self._loading.pop(key, None)
        self.put(key, value, ttl)
        return value


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a shared load's failure retrieved (every waiter may have gone before it ended)."""
    if not task.cancelled():
        task.exception()


class Authenticator:
    """Bearer token -> user, by ``TokenReview`` (cached by token digest)."""

    def __init__(
        self,
        rest: Kube,
        *,
        ttl: float = 10.0,
        negative_ttl: float = 2.0,
        audiences: tuple[str, ...] = (),
    ) -> None:
        self.rest = rest
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.audiences = audiences
        self.cache: TtlCache[str, UserInfo | None] = TtlCache()

    async def authenticate(self, token: str) -> UserInfo | None:
        """The user the token belongs to, or ``None`` when it is invalid or expired."""
        digest = hashlib.sha256(token.encode()).hexdigest()
        return await self.cache.get(digest, lambda: self._review(token))

    async def _review(self, token: str) -> tuple[UserInfo | None, float]:
        spec: dict[str, object] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        review = await self.rest.request(
            "POST",
            "/apis/authentication.k8s.io/v1/tokenreviews",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec},
        )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return None, self.negative_ttl
        user = status.get("user") or {}
        info = UserInfo(
            username=str(user.get("username", "")),
            uid=user.get("uid") or None,
            groups=tuple(user.get("groups") or ()),
            extra={k: tuple(v) for k, v in (user.get("extra") or {}).items()},
        )
        if not info.username:
            return None, self.negative_ttl
        return info, self.ttl


class Authorizer:
    """Whether a user may use a verb on ``sparkrun.dev/daemonoperations``, by ``SubjectAccessReview``.

    Reviews are namespaced to ``namespace`` (the shim's namespace), so both ClusterRoleBindings
    and RoleBindings in that namespace grant access.
    """

    def __init__(
        self, rest: Kube, namespace: str | None, *, ttl: float = 5.0, negative_ttl: float = 2.0
    ) -> None:
        self.rest = rest
        self.namespace = namespace
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.cache: TtlCache[tuple[str, str], bool] = TtlCache()
        self.reviews = 0

    async def allowed(self, user: UserInfo, verb: str) -> bool:
        return await self.cache.get((user.key, verb), lambda: self._review(user, verb))

    async def _review(self, user: UserInfo, verb: str) -> tuple[bool, float]:
        self.reviews += 1
        attributes: dict[str, str] = {"group": DAEMON_GROUP, "resource": DAEMON_RESOURCE, "verb": verb}
        if self.namespace:
            attributes["namespace"] = self.namespace
        spec: dict[str, object] = {
            "user": user.username,
            "groups": list(user.groups),
            "resourceAttributes": attributes,
        }
        if user.uid:
            spec["uid"] = user.uid
        if user.extra:
            spec["extra"] = {k: list(v) for k, v in user.extra.items()}
        review = await self.rest.request(
            "POST",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
            body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        allowed = bool((review.get("status") or {}).get("allowed"))
        return allowed, self.ttl if allowed else self.negative_ttl


class ManagerDirectory:
    """The manager identity of a principal: its ServiceAccount's ``sparkrun.dev/manager``."""

    def __init__(self, rest: Kube, *, ttl: float = 30.0) -> None:
        self.rest = rest
        self.ttl = ttl
        self.cache: TtlCache[tuple[str, str], str] = TtlCache()

    async def manager_of(self, user: UserInfo) -> str:
        account = user.service_account
        if account is None:
            return DEFAULT_MANAGER
        return await self.cache.get(account, lambda: self._lookup(*account))

    async def _lookup(self, namespace: str, name: str) -> tuple[str, float]:
        try:
            found = await self.rest.get(SERVICE_ACCOUNTS, name, namespace)
        except k8s_errors.KubeError as error:
            if error.status == 403:  # not allowed to read ServiceAccounts: no manager annotations
                return DEFAULT_MANAGER, self.ttl
            raise
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        value = annotations.get(MANAGER_ANNOTATION, DEFAULT_MANAGER)
        if not isinstance(value, str) or not _MANAGER.match(value):
            value = DEFAULT_MANAGER
        return value, self.ttl


@dataclass(frozen=True)
class RequestHeaderConfig:
    """How the aggregation layer passes the user (``--requestheader-*`` of the apiserver)."""

    client_ca_pem: str
    allowed_names: tuple[str, ...] = ()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_headers_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)


def _names(raw: str | None, default: tuple[str, ...]) -> tuple[str, ...]:
    if not raw:
        return default
    try:
        value = json.loads(raw)
    except ValueError:
        return default
    return tuple(str(v) for v in value) if isinstance(value, list) else default


async def request_header_config(rest: Kube) -> RequestHeaderConfig | None:
    """The front-proxy settings, or ``None`` when the apiserver has no aggregation layer."""
    found = await rest.get(CONFIG_MAPS, "extension-apiserver-authentication", "kube-system")
    data = (found or {}).get("data") or {}
    ca = data.get("requestheader-client-ca-file")
    if not ca:
        return None
    return RequestHeaderConfig(
        client_ca_pem=ca,
        allowed_names=_names(data.get("requestheader-allowed-names"), ()),
        username_headers=_names(data.get("requestheader-username-headers"), ("X-Remote-User",)),
        group_headers=_names(data.get("requestheader-group-headers"), ("X-Remote-Group",)),
        extra_headers_prefixes=_names(data.get("requestheader-extra-headers-prefix"), ("X-Remote-Extra-",)),
    )
