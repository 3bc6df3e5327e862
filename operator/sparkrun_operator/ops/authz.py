"""The daemon's authorization rule, and the checks of the principal a job or query acts for (ADR 0021).

**The rule** is written once, in :func:`missing_scope`: a user holds a daemon scope when any verb
at or above it in :data:`~sparkrun_operator.ops.catalog.SCOPES` (``read`` < ``operate`` <
``admin``) is granted on ``sparkrun.dev/daemonoperations``; a secret-prompting operation needs
:data:`SECRET_VERB` too; :func:`is_admin` is holding ``admin``. The shim's gate
(``shim/identity.py`` ``Gate``) asks it on every request and the operator's executor asks it again
before a job runs, each with the cached ``k8s.auth.Authorizer`` of its namespace as the
:class:`Reviewer`. ``tests/unit/test_one_authorization_rule.py`` fails on a second definition.

Operations run with the operator's (or the shim's) rights, on behalf of a principal. Before one
acts, the principal's own rights are checked again with SubjectAccessReviews:

- :func:`check_scope`: the daemon scope of the operation (plus ``answer-secret`` for
  secret-prompting operations) in the job's namespace, right before a job executes: a principal
  that lost its scope since submitting (or never had it: a DaemonJob written directly) is refused;
- :func:`require_access`: a Kubernetes permission of the principal itself, for an operation
  that acts outside the API's namespace (``plugins.k8s.jobset_status`` in another namespace
  needs ``get jobsets`` there): the operator never lends its cluster-wide rights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Protocol

from sparkrun_operator.k8s.auth import Authorizer, UserInfo, subject_access_review
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.ops.catalog import SCOPES
from sparkrun_operator.ops.errors import DaemonError, Forbidden

__all__ = [
    "ADMIN_SCOPE",
    "SECRET_VERB",
    "PrincipalNotAuthorized",
    "Reviewer",
    "allowed",
    "check_scope",
    "holds_scope",
    "is_admin",
    "missing_scope",
    "principal_of",
    "require_access",
    "reviews_in",
]

#: The verb, independent of the scopes, that lets a principal answer secret prompts.
SECRET_VERB: Final = "answer-secret"
#: The highest scope: its holders see every principal's jobs.
ADMIN_SCOPE: Final = "admin"


class Reviewer(Protocol):
    """Whether a user is granted a verb on ``sparkrun.dev/daemonoperations`` (``k8s.auth.Authorizer``)."""

    async def allowed(self, user: UserInfo, verb: str) -> bool: ...


def reviews_in(rest: Kube, namespace: str) -> Reviewer:
    """A :class:`Reviewer` for ``namespace`` that asks the apiserver every time (a one-off decision)."""
    return Authorizer(rest, namespace, ttl=0.0, negative_ttl=0.0)


async def missing_scope(
    reviewer: Reviewer, user: UserInfo, scope: str, *, secret: bool = False
) -> str | None:
    """The daemon scope rule: ``None`` when ``user`` holds ``scope`` (and :data:`SECRET_VERB` when
    ``secret``), else what it lacks: :data:`SECRET_VERB` (asked first) or ``scope``.

    A scope is held when any verb at or above it in ``SCOPES`` is granted (the shipped
    ClusterRoles grant the lower verbs too, so one cached review usually decides); a name that
    is not a scope is never held.
    """
    if secret and not await reviewer.allowed(user, SECRET_VERB):
        return SECRET_VERB
    if scope in SCOPES:
        for verb in SCOPES[SCOPES.index(scope) :]:
            if await reviewer.allowed(user, verb):
                return None
    return scope


async def holds_scope(reviewer: Reviewer, user: UserInfo, scope: str, *, secret: bool = False) -> bool:
    """Whether ``user`` holds ``scope`` (and ``answer-secret`` when ``secret``): :func:`missing_scope`."""
    return await missing_scope(reviewer, user, scope, secret=secret) is None


async def is_admin(reviewer: Reviewer, user: UserInfo | None) -> bool:
    """Whether ``user`` holds the admin scope (``None``, an unknown principal, does not)."""
    return user is not None and await holds_scope(reviewer, user, ADMIN_SCOPE)


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


async def check_scope(reviewer: Reviewer, user: UserInfo, scope: str, *, secret: bool = False) -> None:
    """Raise :class:`PrincipalNotAuthorized` unless ``user`` holds ``scope`` (:func:`missing_scope`)."""
    missing = await missing_scope(reviewer, user, scope, secret=secret)
    if missing is None:
        return
    if secret and missing == SECRET_VERB:
        raise PrincipalNotAuthorized(
            f"{user.username} may not answer secret prompts",
            attrs={"reason": "principal_lacks_scope", "scope": SECRET_VERB},
        )
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


async def require_access(
    rest: Kube,
    user: UserInfo | None,
    *,
    verb: str,
    group: str,
    resource: str,
    namespace: str,
    name: str | None = None,
    because: str = "",
    reason: str = "namespace_not_authorized",
) -> None:
    """Raise :class:`PrincipalNotAuthorized` unless ``user`` itself may ``verb`` the resource.

    ``namespace`` empty: a cluster-scoped resource; ``because`` is appended to the message and
    ``reason`` is the error's ``attrs.reason``."""
    if not await allowed(
        rest, user, verb=verb, group=group, resource=resource, namespace=namespace, name=name
    ):
        who = user.username if user is not None else "an unknown principal"
        where = f"in namespace {namespace}" if namespace else "(cluster-scoped)"
        what = f"{resource}.{group}" if group else resource
        message = f"{who} may not {verb} {what} {where}" + (f": {because}" if because else "")
        attrs: dict[str, Any] = {"reason": reason, "verb": verb}
        if namespace:
            attrs["namespace"] = namespace
        raise PrincipalNotAuthorized(message, attrs=attrs)
