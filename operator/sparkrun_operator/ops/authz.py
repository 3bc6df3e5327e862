"""Authorization of the principal a job or query acts for (ADR 0021).

Operations run with the operator's (or the shim's) rights, on behalf of a principal. Before one
acts, the principal's own rights are checked again with SubjectAccessReviews:

- :func:`check_scope`: the daemon scope of the operation (``read`` < ``operate`` < ``admin``,
  plus ``answer-secret`` for secret-prompting operations) on ``sparkrun.dev/daemonoperations``
  in the job's namespace, right before a job executes: a principal that lost its scope since
  submitting (or never had it: a DaemonJob written directly) is refused;
- :func:`require_access`: a Kubernetes permission of the principal itself, for an operation
  that acts outside the API's namespace (``plugins.k8s.jobset_status`` in another namespace
  needs ``get jobsets`` there): the operator never lends its cluster-wide rights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sparkrun_operator.k8s.auth import (
    DAEMON_GROUP,
    DAEMON_RESOURCE,
    Authorizer,
    UserInfo,
    subject_access_review,
)
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops.catalog import SCOPES
from sparkrun_operator.ops.errors import DaemonError, Forbidden

__all__ = [
    "SECRET_VERB",
    "PrincipalNotAuthorized",
    "allowed",
    "check_scope",
    "is_admin",
    "principal_of",
    "require_access",
]

SECRET_VERB = "answer-secret"


class PrincipalNotAuthorized(Forbidden):
    """The principal does not hold the permission the operation needs (checked at execution)."""

    type_name = "PermissionError"
    typed = True

    def __init__(self, detail: str, *, attrs: Mapping[str, Any]) -> None:
        DaemonError.__init__(self, detail, attrs=attrs)


def principal_of(spec: Mapping[str, Any]) -> UserInfo | None:
    """The :class:`UserInfo` of a DaemonJob's ``spec.principal`` (``None`` when missing)."""
    raw = spec.get("principal") or {}
    username = raw.get("username")
    if not isinstance(username, str) or not username:
        return None
    return UserInfo(username=username, uid=raw.get("uid") or None, groups=tuple(raw.get("groups") or ()))


async def check_scope(authorizer: Authorizer, user: UserInfo, scope: str, *, secret: bool = False) -> None:
    """Raise :class:`PrincipalNotAuthorized` unless ``user`` holds ``scope`` (see the module doc)."""
    if secret and not await authorizer.allowed(user, SECRET_VERB):
        raise PrincipalNotAuthorized(
            f"{user.username} may not answer secret prompts",
            attrs={"reason": "principal_lacks_scope", "scope": SECRET_VERB},
        )
    if scope in SCOPES:
        for verb in SCOPES[SCOPES.index(scope) :]:
            if await authorizer.allowed(user, verb):
                return
    raise PrincipalNotAuthorized(
        f"{user.username} no longer holds the {scope} scope this operation needs",
        attrs={"reason": "principal_lacks_scope", "scope": scope},
    )


async def allowed(
    rest: Kube,
    user: UserInfo | None,
    *,
    verb: str,
    group: str,
    resource: str,
    namespace: str,
    name: str | None = None,
) -> bool:
    """Whether ``user`` itself may ``verb`` the resource (one SubjectAccessReview; ``None``: no)."""
    if user is None:
        return False
    attributes: dict[str, str] = {"group": group, "resource": resource, "verb": verb, "namespace": namespace}
    if name:
        attributes["name"] = name
    return await subject_access_review(rest, user, attributes)


async def is_admin(rest: Kube, user: UserInfo | None, namespace: str) -> bool:
    """Whether ``user`` holds the daemon's admin scope in ``namespace``."""
    return await allowed(
        rest, user, verb="admin", group=DAEMON_GROUP, resource=DAEMON_RESOURCE, namespace=namespace
    )


async def require_access(
    rest: Kube,
    user: UserInfo | None,
    *,
    verb: str,
    group: str,
    resource: str,
    namespace: str,
    name: str | None = None,
) -> None:
    """Raise :class:`PrincipalNotAuthorized` unless ``user`` itself may ``verb`` the resource."""
    if not await allowed(
        rest, user, verb=verb, group=group, resource=resource, namespace=namespace, name=name
    ):
        who = user.username if user is not None else "an unknown principal"
        raise PrincipalNotAuthorized(
            f"{who} may not {verb} {resource} in namespace {namespace}",
            attrs={"reason": "namespace_not_authorized", "namespace": namespace},
        )
