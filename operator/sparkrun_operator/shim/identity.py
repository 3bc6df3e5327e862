"""Who is calling and what they may do.

A :class:`Caller` is an authenticated Kubernetes user plus its manager identity. Permissions are
the daemon's hierarchical scopes ``read`` < ``operate`` < ``admin`` and the independent
``answer-secret``, each a verb on ``sparkrun.dev/daemonoperations`` checked with a cached
SubjectAccessReview. The rule that decides (a caller has a scope when any verb at or above it is
granted) is the daemon's one rule, ``ops.authz.missing_scope``, which the operator's executor
applies again before a job runs; this gate only asks it and answers 403.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from sparkrun_operator.k8s.auth import Authenticator, Authorizer, ManagerDirectory, UserInfo
from sparkrun_operator.ops import authz
from sparkrun_operator.ops.errors import Forbidden

__all__ = ["Caller", "Gate"]


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
        """Whether the caller holds ``scope`` (and ``answer-secret`` when ``secret``): the one rule."""
        return await authz.holds_scope(self.authorizer, caller.user, scope, secret=secret)

    async def require(self, caller: Caller, scope: str, *, secret: bool = False) -> None:
        """Raise ``Forbidden`` (403, detail only) unless the caller holds ``scope``."""
        if not await self.allows(caller, scope, secret=secret):
            raise Forbidden("Insufficient permission")

    async def admin(self, caller: Caller) -> bool:
        """Whether the caller holds the admin scope (sees every principal's jobs): ``authz.is_admin``."""
        return await authz.is_admin(self.authorizer, caller.user)
