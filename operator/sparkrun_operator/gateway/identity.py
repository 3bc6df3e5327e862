"""Kubernetes identities at the gateway (``--auth=kubernetes``): who calls, and what it may use.

A request carries a Kubernetes bearer token (a ServiceAccount's, or any token the apiserver
authenticates). The caller is the ``TokenReview``'s user; a workload is the caller's when a
``SubjectAccessReview`` allows it verb ``create`` on ``sparkrun.dev`` ``inferenceworkloads``,
subresource ``inference``, in the workload's namespace and by its name (the chart's ClusterRole
``sparkrun-inference``, bound per namespace). Both reviews are :mod:`sparkrun_operator.k8s.auth`'s,
the shim's: cached (token by digest; decisions per user digest, namespace and name) with TTLs and
entry bounds, and rate-limited (TokenReviews per source address, or per user for a token
accepted before; access reviews per username), so a request costs no API call once its answers
are cached.

Failures map to the wire: a token the apiserver rejects is 401; a review that could not be made
(the apiserver did not answer) is 503 ``auth_unavailable``; a caller over its review rate is 429
``auth_throttled`` (with ``Retry-After``). A workload the caller may not use is answered as an
absent one by the caller of :meth:`KubeIdentity.may_use` (404 ``No instance found``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TypeVar

from sparkrun_operator.api.meta import GROUP
from sparkrun_operator.k8s.auth import (
    AccessReviewer,
    Attributes,
    Authenticator,
    ReviewsThrottled,
    SourceLimiter,
    UserInfo,
)
from sparkrun_operator.k8s.client import Kube

from .errors import GatewayError, clip
from .routing import Workload

log = logging.getLogger("sparkrun.gateway.identity")

T = TypeVar("T")

RESOURCE = "inferenceworkloads"
SUBRESOURCE = "inference"
VERB = "create"
METRICS_PATH = "/metrics"
ACCESS_RATE = 50.0
"""SubjectAccessReviews a user may cause per second once its burst is spent ..."""
ACCESS_BURST = 1000.0
"""... and at once: a first listing asks one per namespace, then one per workload of each
namespace the user is not bound in as a whole, so the burst covers a listing of a cluster of
several hundred workloads; answers are then cached."""


def inference_attributes(namespace: str, name: str) -> Attributes:
    """The ``resourceAttributes`` of "may send inference to workload ``namespace/name``" (``name``
    empty: to every workload of the namespace)."""
    return (
        ("group", GROUP),
        ("name", name),
        ("namespace", namespace),
        ("resource", RESOURCE),
        ("subresource", SUBRESOURCE),
        ("verb", VERB),
    )


class KubeIdentity:
    """TokenReview and SubjectAccessReview for the gateway, on one API client.

    ``kube`` is the client, or a coroutine function that opens it (the gateway's shared
    connection, which must be opened on the serving loop): :meth:`start` calls it. With
    ``audiences``, only tokens minted for one of them are accepted (a projected token with that
    audience), so a token sent to the gateway is no credential for the apiserver itself.
    """

    def __init__(
        self,
        kube: Kube | Callable[[], Awaitable[Kube]],
        *,
        token_ttl: float = 30.0,
        rejected_ttl: float = 5.0,
        access_ttl: float = 10.0,
        denied_ttl: float = 5.0,
        max_tokens: int = 10_000,
        max_decisions: int = 16_384,
        token_limiter: SourceLimiter | None = None,
        access_limiter: SourceLimiter | None = None,
        list_concurrency: int = 8,
        audiences: tuple[str, ...] = (),
    ) -> None:
        self._open = kube
        self.audiences = audiences
        self._settings = (token_ttl, rejected_ttl, access_ttl, denied_ttl, max_tokens, max_decisions)
        self._limiters = (token_limiter, access_limiter)
        self.list_concurrency = list_concurrency
        self.authenticator: Authenticator | None = None
        self.reviewer: AccessReviewer | None = None

    async def start(self) -> None:
        if self.authenticator is not None:
            return
        kube = self._open if isinstance(self._open, Kube) else await self._open()
        token_ttl, rejected_ttl, access_ttl, denied_ttl, max_tokens, max_decisions = self._settings
        self.authenticator = Authenticator(
            kube,
            ttl=token_ttl,
            negative_ttl=rejected_ttl,
            limiter=self._limiters[0],
            max_entries=max_tokens,
            audiences=self.audiences,
        )
        self.reviewer = AccessReviewer(
            kube,
            ttl=access_ttl,
            negative_ttl=denied_ttl,
            max_entries=max_decisions,
            limiter=self._limiters[1] or SourceLimiter(rate=ACCESS_RATE, burst=ACCESS_BURST),
        )

    async def authenticate(self, token: str | None, *, source: str) -> UserInfo:
        """The user ``token`` belongs to: 401 without one or for an invalid token."""
        if not token:
            raise GatewayError(401, "Missing token (send Authorization: Bearer <Kubernetes token>)")
        authenticator = self._started(self.authenticator)
        user = await _reviewed(authenticator.authenticate(token, source=source), "token")
        if user is None:
            raise GatewayError(401, "Invalid or expired Kubernetes token", code="invalid_api_key")
        return user

    @staticmethod
    def caller_of(user: UserInfo) -> str:
        """The caller a user is to the gateway (cancel registry, per-caller cap): its uid, else
        its name."""
        return f"k8s:{user.uid}" if user.uid else f"k8s-user:{user.username}"

    async def may_use(self, user: UserInfo, namespace: str, name: str) -> bool:
        """Whether ``user`` may send inference to (and so wake) the workload ``namespace/name``."""
        reviewer = self._started(self.reviewer)
        return await _reviewed(reviewer.permits(user, inference_attributes(namespace, name)), "access")

    async def may_read_metrics(self, user: UserInfo) -> bool:
        """Whether ``user`` may ``get`` the non-resource URL ``/metrics`` (as for any component)."""
        reviewer = self._started(self.reviewer)
        attributes = (("path", METRICS_PATH), ("verb", "get"))
        return await _reviewed(reviewer.permits(user, attributes, non_resource=True), "access")

    async def usable(self, user: UserInfo, workloads: Iterable[Workload]) -> set[str]:
        """The keys of the ``workloads`` ``user`` may use: one namespace-wide review per namespace
        (name ""), then a review per workload only where the namespace-wide one denies, at most
        ``list_concurrency`` reviews at once."""
        by_namespace: dict[str, list[Workload]] = {}
        for wl in workloads:
            by_namespace.setdefault(wl.namespace, []).append(wl)
        slots = asyncio.Semaphore(self.list_concurrency)

        async def check(namespace: str, name: str) -> bool:
            async with slots:
                return await self.may_use(user, namespace, name)

        namespaces = sorted(by_namespace)
        wide = await asyncio.gather(*(check(ns, "") for ns in namespaces))
        allowed = {wl.key for ns, ok in zip(namespaces, wide, strict=True) if ok for wl in by_namespace[ns]}
        rest = [wl for ns, ok in zip(namespaces, wide, strict=True) if not ok for wl in by_namespace[ns]]
        each = await asyncio.gather(*(check(wl.namespace, wl.name) for wl in rest))
        allowed.update(wl.key for wl, ok in zip(rest, each, strict=True) if ok)
        return allowed

    @staticmethod
    def _started(part: T | None) -> T:
        if part is None:
            raise GatewayError(503, "Authentication is not ready", code="auth_unavailable", retry_after=1.0)
        return part


async def _reviewed(review: Awaitable[T], what: str) -> T:
    """The review's answer; 429 when throttled, 503 when the apiserver did not answer."""
    try:
        return await review
    except ReviewsThrottled as error:
        raise GatewayError(
            429,
            f"Too many {what} reviews for this caller; retry shortly",
            code="auth_throttled",
            retry_after=max(1.0, error.retry_after),
        ) from error
    except GatewayError:
        raise
    except Exception as error:  # NB: any failure to get an answer: the caller learns "unavailable"
        log.warning("%s review failed: %s", what, clip(str(error)))
        raise GatewayError(
            503,
            "Authentication is unavailable: the Kubernetes API did not answer; retry shortly",
            code="auth_unavailable",
            retry_after=2.0,
        ) from error
