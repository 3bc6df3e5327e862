"""Who is calling and what they may do.

A :class:`Caller` is an authenticated Kubernetes user plus its manager identity. Permissions are
the daemon's hierarchical scopes ``read`` < ``operate`` < ``admin`` and the independent
``answer-secret``, each a verb on ``sparkrun.dev/daemonoperations`` checked with a
SubjectAccessReview: a caller has a scope when any verb at or above it is granted (the shipped
ClusterRoles grant all lower verbs too, so one cached review usually decides).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sparkrun_operator.k8s.auth import Authenticator, Authorizer, ManagerDirectory, UserInfo
from sparkrun_operator.ops.catalog import SCOPES
from sparkrun_operator.ops.errors import Forbidden

__all__ = ["SECRET_VERB", "Caller", "Gate"]

SECRET_VERB = "answer-secret"


@dataclass(frozen=True)
class Caller:
    """An authenticated principal."""

    user: UserInfo
    manager: str
    via: Literal["bearer", "front-proxy"]

    @property
    def principal(self) -> str:
        return self.user.username


class Gate:
    """Authentication and authorization decisions (all cached in the k8s layer)."""

    def __init__(
        self, authenticator: Authenticator, authorizer: Authorizer, managers: ManagerDirectory
    ) -> None:
        self.authenticator = authenticator
        self.authorizer = authorizer
        self.managers = managers

    async def from_token(self, token: str, *, source: str = "") -> Caller | None:
        """The caller of a bearer token sent from address ``source`` (``None``: invalid token)."""
        user = await self.authenticator.authenticate(token, source=source)
        if user is None:
            return None
        return Caller(user=user, manager=await self.managers.manager_of(user), via="bearer")

    async def from_front_proxy(
        self, username: str, groups: Sequence[str], extra: Mapping[str, Sequence[str]]
    ) -> Caller:
        user = UserInfo(
            username=username, groups=tuple(groups), extra={k: tuple(v) for k, v in extra.items()}
        )
        return Caller(user=user, manager=await self.managers.manager_of(user), via="front-proxy")

    async def allows(self, caller: Caller, scope: str, *, secret: bool = False) -> bool:
        """Whether the caller holds ``scope`` (and ``answer-secret`` when ``secret``)."""
        if secret and not await self.authorizer.allowed(caller.user, SECRET_VERB):
            return False
        if scope not in SCOPES:
            return False
        for verb in SCOPES[SCOPES.index(scope) :]:
            if await self.authorizer.allowed(caller.user, verb):
                return True
        return False

    async def require(self, caller: Caller, scope: str, *, secret: bool = False) -> None:
        """Raise ``Forbidden`` (403) unless the caller holds ``scope``."""
        if not await self.allows(caller, scope, secret=secret):
            raise Forbidden("Insufficient permission")

    async def is_admin(self, caller: Caller) -> bool:
        return await self.authorizer.allowed(caller.user, "admin")
