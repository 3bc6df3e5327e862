"""Kubernetes authentication and authorization for the daemon API shim.

- :class:`Authenticator`: bearer tokens through ``TokenReview``;
- :class:`Authorizer`: permissions through ``SubjectAccessReview`` on group ``sparkrun.dev``,
  resource ``daemonoperations``, verbs ``read``, ``operate``, ``admin``, ``answer-secret``;
- :class:`AccessReviewer`: any ``SubjectAccessReview`` (resource or non-resource attributes),
  cached per (user principal, attributes) and rate-limited per user (the gateway's workload checks);
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
from typing import Any, Final, Generic, TypeVar

from sparkrun_operator.api.meta import GROUP
from sparkrun_operator.errors import SparkrunError
from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import CONFIG_MAPS, SERVICE_ACCOUNTS
from sparkrun_operator.render import keys

__all__ = [
    "DAEMON_RESOURCE",
    "DEFAULT_MANAGER",
    "MANAGER_ANNOTATION",
    "AccessReviewer",
    "Authenticator",
    "Authorizer",
    "ManagerDirectory",
    "RequestHeaderConfig",
    "ReviewsThrottled",
    "SourceLimiter",
    "TtlCache",
    "UserInfo",
    "request_header_config",
]

DAEMON_GROUP = GROUP
DAEMON_RESOURCE = "daemonoperations"
MANAGER_ANNOTATION = keys.ANNOTATION_MANAGER
DEFAULT_MANAGER = "daemon"
_MANAGER = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")
_SA_USER = re.compile(r"^system:serviceaccount:([^:]+):([^:]+)$")

K = TypeVar("K")
V = TypeVar("V")

#: ``extra`` keys the apiserver sets per ServiceAccount token (its id, and the pod and node a
#: bound token belongs to): RBAC reads none of them, so a decision is the user's, not the token's.
PER_CREDENTIAL: Final = frozenset(
    f"authentication.kubernetes.io/{k}"
    for k in ("credential-id", "pod-name", "pod-uid", "node-name", "node-uid")
)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()


@dataclass(frozen=True)
class UserInfo:
    """An authenticated Kubernetes user."""

    username: str
    uid: str | None = None
    groups: tuple[str, ...] = ()
    extra: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    key: str = field(init=False, repr=False, compare=False)
    principal: str = field(init=False, repr=False, compare=False)
    """The SHA-256 (hex) of :attr:`key` without the ``extra`` that only binds one token
    (:data:`PER_CREDENTIAL`): a short cache key for per-user decisions, the same for every token
    of a ServiceAccount, so its pods share their decisions."""
    service_account: tuple[str, str] | None = field(init=False, repr=False, compare=False)
    """``(namespace, name)`` when the user is a ServiceAccount (read on every gateway request:
    matched once)."""

    def __post_init__(self) -> None:
        # A stable cache key for everything that authorization depends on (computed once:
        # every authorization decision looks it up).
        extra = sorted((k, tuple(v)) for k, v in self.extra.items())
        object.__setattr__(self, "key", json.dumps([self.username, self.uid, sorted(self.groups), extra]))
        lasting = [(k, v) for k, v in extra if k not in PER_CREDENTIAL]
        principal = _sha256(json.dumps([self.username, self.uid, sorted(self.groups), lasting]))
        object.__setattr__(self, "principal", principal)
        found = _SA_USER.match(self.username)
        object.__setattr__(self, "service_account", (found.group(1), found.group(2)) if found else None)


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

    def discard(self, key: K) -> None:
        self._entries.pop(key, None)

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
        if ttl > 0:  # NB: a load may keep its answer elsewhere (ttl 0: not cached here)
            self.put(key, value, ttl)
        return value

    def loading(self, key: K) -> bool:
        """Whether a load of ``key`` is in flight (joining it costs nothing)."""
        return key in self._loading


def _retrieve(task: asyncio.Future[Any]) -> None:
    """Mark a shared load's failure retrieved (every waiter may have gone before it ended)."""
    if not task.cancelled():
        task.exception()


class ReviewsThrottled(SparkrunError):
    """Too many TokenReviews for one source address (or access reviews for one user); retry
    after ``retry_after`` seconds."""

    def __init__(self, retry_after: float, what: str = "token reviews") -> None:
        super().__init__(f"too many {what}; retry in {retry_after:.1f} s")
        self.retry_after = retry_after


class SourceLimiter:
    """A token bucket per source address (``rate`` per second, ``burst`` at once), bounded in sources."""

    def __init__(
        self,
        *,
        rate: float = 5.0,
        burst: float = 20.0,
        max_sources: int = 4096,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst, self.max_sources, self.clock = rate, burst, max_sources, clock
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def take(self, source: str) -> float:
        """Take one token: 0 when allowed, else the seconds until the next token."""
        now = self.clock()
        tokens, last = self._buckets.pop(source, (self.burst, now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        wait = 0.0
        if tokens >= 1.0:
            tokens -= 1.0
        else:
            wait = (1.0 - tokens) / self.rate
        self._buckets[source] = (tokens, now)
        while len(self._buckets) > self.max_sources:
            self._buckets.popitem(last=False)  # NB: a forgotten source starts with a full bucket
        return wait


class Authenticator:
    """Bearer token -> user, by ``TokenReview`` (cached by token digest).

    Valid tokens are cached for ``ttl`` seconds and invalid ones, separately, for
    ``negative_ttl`` seconds (so a flood of bad tokens cannot evict good ones). A token that is in
    neither cache costs a TokenReview, which each source address may spend at ``limiter``'s rate:
    beyond it :class:`ReviewsThrottled` is raised without asking the apiserver; at most
    ``max_concurrent`` reviews are in flight at once. A token accepted before (its digest and
    user remembered for ``remember`` seconds, at most ``max_entries``) whose address has no
    budget left is reviewed again, once its entry expired, on its user's budget
    (``known_limiter``, per username): behind a proxy every caller has one address, and invalid
    tokens sent through it must not lock the known callers out.
    """

    def __init__(
        self,
        rest: Kube,
        *,
        ttl: float = 10.0,
        negative_ttl: float = 10.0,
        audiences: tuple[str, ...] = (),
        limiter: SourceLimiter | None = None,
        max_rejected: int = 8192,
        max_concurrent: int = 16,
        max_entries: int = 10_000,
        known_limiter: SourceLimiter | None = None,
        remember: float = 3600.0,
    ) -> None:
        self.rest = rest
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.audiences = audiences
        self.cache: TtlCache[str, UserInfo | None] = TtlCache(max_entries=max_entries)
        self.rejected: TtlCache[str, bool] = TtlCache(max_entries=max_rejected)
        self.limiter = limiter or SourceLimiter()
        #: Digest -> username of the tokens accepted within ``remember`` seconds (a re-review of
        #: one its address cannot pay for is charged to ``known_limiter``, by username).
        self.known: TtlCache[str, str] = TtlCache(max_entries=max_entries, clock=self.cache.clock)
        self.known_limiter = known_limiter or SourceLimiter(rate=20.0, burst=200.0)
        self.remember = remember
        self._slots = asyncio.Semaphore(max_concurrent)
        self.reviews = 0
        self.throttled = 0

    async def authenticate(self, token: str, *, source: str = "") -> UserInfo | None:
        """The user the token belongs to, or ``None`` when it is invalid or expired.

        Raises :class:`ReviewsThrottled` when ``source`` has used up its TokenReviews.
        """
        digest = _sha256(token)
        known = self.cache.peek(digest)
        if known is not None:
            self.cache.hits += 1
            return known
        if self.rejected.peek(digest):
            self.rejected.hits += 1
            return None
        if not self.cache.loading(digest):
            wait = self.limiter.take(source)
            known_as = self.known.peek(digest) if wait > 0 else None
            if known_as is not None:  # NB: accepted before: its user's budget, not the address's
                wait = self.known_limiter.take(known_as)
            if wait > 0:
                self.throttled += 1
                raise ReviewsThrottled(wait)
        return await self.cache.get(digest, lambda: self._review(token, digest))

    async def _review(self, token: str, digest: str) -> tuple[UserInfo | None, float]:
        info = await self._ask(token)
        if info is None:
            self.rejected.put(digest, True, self.negative_ttl)
            self.known.discard(digest)
            return None, 0.0
        self.known.put(digest, info.username, self.remember)
        return info, self.ttl

    async def _ask(self, token: str) -> UserInfo | None:
        spec: dict[str, object] = {"token": token}
        if self.audiences:
            spec["audiences"] = list(self.audiences)
        async with self._slots:
            self.reviews += 1
            review = await self.rest.request(
                "POST",
                "/apis/authentication.k8s.io/v1/tokenreviews",
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": spec},
            )
        status = review.get("status") or {}
        if not status.get("authenticated"):
            return None
        # NB: an authenticator that ignores audiences answers without them: not for us then.
        if self.audiences and not set(status.get("audiences") or ()) & set(self.audiences):
            return None
        user = status.get("user") or {}
        info = UserInfo(
            username=str(user.get("username", "")),
            uid=user.get("uid") or None,
            groups=tuple(user.get("groups") or ()),
            extra={k: tuple(v) for k, v in (user.get("extra") or {}).items()},
        )
        return info if info.username else None


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
        allowed = await subject_access_review(self.rest, user, attributes)
        return allowed, self.ttl if allowed else self.negative_ttl


Attributes = tuple[tuple[str, str], ...]
"""A SubjectAccessReview's attributes as sorted pairs (hashable: part of a cache key)."""


class AccessReviewer:
    """Whether a user may do what a ``SubjectAccessReview``'s attributes name, cached.

    Answers are cached per (:attr:`UserInfo.principal`: the user, less the ``extra`` that binds
    one token; attributes): allowed for ``ttl`` seconds, denied for
    ``negative_ttl``, at most ``max_entries`` (oldest first out). A decision in neither costs a
    review, which each user (by username: not per token, whose ``extra`` names its credential
    id) may spend at ``limiter``'s
    rate (beyond it :class:`ReviewsThrottled`, without asking the apiserver); at most
    ``max_concurrent`` reviews are in flight; concurrent identical questions share one review.
    A failed review (the apiserver did not answer) raises the client's error and caches nothing.
    """

    def __init__(
        self,
        rest: Kube,
        *,
        ttl: float = 10.0,
        negative_ttl: float = 5.0,
        max_entries: int = 16_384,
        limiter: SourceLimiter | None = None,
        max_concurrent: int = 16,
    ) -> None:
        self.rest = rest
        self.ttl = ttl
        self.negative_ttl = negative_ttl
        self.cache: TtlCache[tuple[str, bool, Attributes], bool] = TtlCache(max_entries=max_entries)
        self.limiter = limiter or SourceLimiter(rate=20.0, burst=200.0)
        self._slots = asyncio.Semaphore(max_concurrent)
        self.reviews = 0
        self.throttled = 0

    async def permits(self, user: UserInfo, attributes: Attributes, *, non_resource: bool = False) -> bool:
        """Whether ``user`` may (``attributes``: ``resourceAttributes``, or with
        ``non_resource`` ``nonResourceAttributes``). Raises :class:`ReviewsThrottled`."""
        key = (user.principal, non_resource, attributes)
        known = self.cache.peek(key)
        if known is not None:
            self.cache.hits += 1
            return known
        if not self.cache.loading(key):
            wait = self.limiter.take(user.username)
            if wait > 0:
                self.throttled += 1
                raise ReviewsThrottled(wait, "access reviews")
        return await self.cache.get(key, lambda: self._review(user, attributes, non_resource))

    async def _review(self, user: UserInfo, attributes: Attributes, non_resource: bool) -> tuple[bool, float]:
        async with self._slots:
            self.reviews += 1
            allowed = await subject_access_review(
                self.rest, user, dict(attributes), non_resource=non_resource
            )
        return allowed, self.ttl if allowed else self.negative_ttl


async def subject_access_review(
    rest: Kube, user: UserInfo, attributes: Mapping[str, str], *, non_resource: bool = False
) -> bool:
    """Whether ``user`` (name, groups, uid, extra) may do what ``attributes`` (a
    SubjectAccessReview's ``resourceAttributes``, or ``nonResourceAttributes`` with
    ``non_resource``) name: one review, no cache."""
    spec: dict[str, object] = {
        "user": user.username,
        "groups": list(user.groups),
        "nonResourceAttributes" if non_resource else "resourceAttributes": dict(attributes),
    }
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra.items()}
    review = await rest.request(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
    )
    return bool((review.get("status") or {}).get("allowed"))


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
            if isinstance(error, k8s_errors.KubeForbidden):  # may not read ServiceAccounts: no managers
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
