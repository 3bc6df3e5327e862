"""``If-Match`` on the daemon API's mutations (ADR 0049): the header, the ETag and the table of
conditional operations.

An object's ETag is its ``metadata.resourceVersion`` as a strong, quoted entity tag
(``"<resourceVersion>"``, :func:`etag`). ``If-Match`` (RFC 9110 13.1.1) is ``*`` or a
comma-separated list of entity tags; :func:`parse` reads it with plain string operations within
:data:`MAX_HEADER` characters and :data:`MAX_TAGS` tags (a tenant writes it) and raises
``Invalid`` (422) for anything else. Comparison is strong: a weak tag (``W/"..."``) parses but
never matches; ``*`` matches any existing object.

:data:`TABLE` maps every operation that changes one named object to a :class:`Conditional`: the
kind of its target, the query whose answer carries that target's ETag (the "matching query"),
and a resolver that finds the target from the operation's arguments exactly as its executor
does (``NotFound`` when absent, ``Invalid`` when the arguments name no single object).
Operation families add theirs with :func:`register` when their executor module is imported
(``ops/executors/__init__.py`` imports them all, so a process that has the executors has the
whole table); an operation not in the table refuses ``If-Match`` with 422 naming it. A query
that writes one object (the daemon API's own writes) may register too: its executor gets the
precondition as ``ctx.if_match`` as a job's does.

The daemon API checks the header at submission (:func:`check`, a synchronous 412) and passes
the matched resourceVersion into the job (``spec.ifMatch``); the executor's write of the target
carries it as a precondition (:func:`patch_with` in a merge patch, a delete's preconditions, or
:func:`version_test` in a JSON patch; :func:`write` / :func:`moved` turn the refusal into
:class:`PreconditionFailed`), so a write made between the check and the execution still refuses.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.errors import KubeConflict
from sparkrun_operator.k8s.resources import Resource
from sparkrun_operator.ops.errors import Invalid, PreconditionFailed

__all__ = [
    "MAX_HEADER",
    "MAX_TAGS",
    "TABLE",
    "Conditional",
    "IfMatch",
    "ResolveContext",
    "Target",
    "check",
    "check_object",
    "conditional",
    "conflict",
    "etag",
    "header_of",
    "moved",
    "parse",
    "patch_with",
    "register",
    "stale",
    "version_test",
    "write",
]

#: The most characters of an ``If-Match`` value (all its fields together).
MAX_HEADER: Final = 2048
#: The most entity tags one ``If-Match`` may list.
MAX_TAGS: Final = 32
#: The most characters of one opaque tag (a resourceVersion is a decimal uint64 in practice).
MAX_TAG: Final = 128


def etag(resource_version: str) -> str:
    """The strong ETag of an object at ``resource_version``: ``"<resourceVersion>"``."""
    return f'"{resource_version}"'


def _etagc(char: str) -> bool:
    """RFC 9110 ``etagc``: ``%x21 / %x23-7E`` (obs-text, bytes above 0x7F, is refused here)."""
    code = ord(char)
    return code == 0x21 or 0x23 <= code <= 0x7E


@dataclass(frozen=True)
class IfMatch:
    """A parsed ``If-Match``: ``*``, or strong tags (opaque values, quotes removed) and the count
    of weak ones (which never match)."""

    raw: str
    any: bool = False
    strong: tuple[str, ...] = ()
    weak: int = 0

    def matches(self, resource_version: str) -> bool:
        """Strong comparison against an existing object's resourceVersion."""
        return self.any or resource_version in self.strong

    def precondition(self, resource_version: str) -> str | None:
        """What a job carries once this header matched the object at ``resource_version``:
        that resourceVersion, or ``None`` for ``*`` (the object only had to exist)."""
        return None if self.any else resource_version


def _tags(value: str) -> tuple[list[str], int]:
    """Strong opaque tags and the weak count of a non-``*`` list; ``Invalid`` when malformed."""
    strong: list[str] = []
    weak = 0
    i, n = 0, len(value)
    while i < n:
        char = value[i]
        if char in " \t,":
            i += 1
            continue
        is_weak = value.startswith("W/", i)
        if is_weak:
            i += 2
        if i >= n or value[i] != '"':
            raise Invalid(f"If-Match: expected a quoted entity tag at offset {i}")
        end = value.find('"', i + 1)
        if end < 0:
            raise Invalid("If-Match: unterminated entity tag")
        tag = value[i + 1 : end]
        if len(tag) > MAX_TAG or not all(_etagc(c) for c in tag):
            raise Invalid(
                f"If-Match: an entity tag holds at most {MAX_TAG} visible ASCII characters (no quotes)"
            )
        i = end + 1
        while i < n and value[i] in " \t":
            i += 1
        if i < n and value[i] != ",":
            raise Invalid(f"If-Match: expected ',' after an entity tag at offset {i}")
        if is_weak:
            weak += 1
        else:
            strong.append(tag)
        if len(strong) + weak > MAX_TAGS:
            raise Invalid(f"If-Match: more than {MAX_TAGS} entity tags")
    return strong, weak


def parse(raw: str) -> IfMatch:
    """Parse an ``If-Match`` value (several header fields joined with ``,``).

    Bounded before anything is scanned; no regular expression, one pass. Raises ``Invalid``
    for an empty value, a ``*`` with anything else, an unquoted or unterminated tag, a tag with
    characters outside ``etagc`` or longer than :data:`MAX_TAG`, or too many tags."""
    if len(raw) > MAX_HEADER:
        raise Invalid(f"If-Match: longer than {MAX_HEADER} characters")
    value = raw.strip(" \t")
    if value == "*":
        return IfMatch(raw=raw, any=True)
    strong, weak = _tags(value)
    if not strong and not weak:
        raise Invalid("If-Match: no entity tag")
    return IfMatch(raw=raw, strong=tuple(strong), weak=weak)


def header_of(values: list[str]) -> IfMatch | None:
    """The request's ``If-Match`` from all its header fields (``None`` when it has none)."""
    if not values:
        return None
    total = sum(len(v) + 1 for v in values)
    if total > MAX_HEADER + 1:
        raise Invalid(f"If-Match: longer than {MAX_HEADER} characters")
    return parse(",".join(values))


# ---------------------------------------------------------------------------------------------
# The table of conditional operations
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """The one object an operation changes, as read when the precondition is checked."""

    kind: str
    resource: Resource
    name: str
    namespace: str | None
    obj: Mapping[str, Any]

    @property
    def resource_version(self) -> str:
        return str((self.obj.get("metadata") or {}).get("resourceVersion") or "")


@dataclass(frozen=True)
class ResolveContext:
    """What a resolver reads with: the daemon API's client (read rights), its namespace."""

    rest: Kube
    namespace: str


#: Finds the target of an operation from its (validated) arguments; raises ``NotFound`` as the
#: executor would, ``Invalid`` when the arguments name no single object.
Resolver = Callable[[ResolveContext, Mapping[str, Any]], Awaitable[Target]]


@dataclass(frozen=True)
class Conditional:
    """One operation that takes ``If-Match``."""

    operation: str
    #: The target's kind (``InferenceWorkload``, ``InferenceCluster``, ``ModelCache``, ``DaemonJob``).
    kind: str
    #: The query that answers the target's ETag (for the documentation and error messages).
    query: str
    resolve: Resolver


#: Operation name -> its conditional entry. Filled by :func:`register`.
TABLE: dict[str, Conditional] = {}


def register(operation: str, *, kind: str, query: str, resolve: Resolver) -> None:
    """Declare ``operation`` conditional: its target is the ``kind`` object ``resolve`` finds,
    whose ETag ``query`` answers. Registering an operation twice is a programming error."""
    if operation in TABLE:
        raise ValueError(f"{operation} is already registered for If-Match")
    TABLE[operation] = Conditional(operation, kind, query, resolve)


def conditional(operation: str) -> Conditional:
    """The table entry of ``operation``; ``Invalid`` (422) naming it when it takes no ``If-Match``."""
    found = TABLE.get(operation)
    if found is None:
        raise Invalid(
            f"If-Match is not supported by {operation}: it does not change one named object",
            attrs={"operation": operation},
        )
    return found


def stale(given: IfMatch, *, kind: str, name: str, resource_version: str) -> PreconditionFailed:
    """The 412 for an object at ``resource_version`` that ``given`` does not match."""
    return PreconditionFailed(
        f"{kind} {name} is at ETag {etag(resource_version)}, not the one If-Match names; "
        "read it again and retry",
        attrs={"etag": etag(resource_version), "if_match": given.raw, "kind": kind, "name": name},
    )


def check_object(given: IfMatch | None, obj: Mapping[str, Any], *, kind: str) -> str | None:
    """Compare ``given`` with an object already read; returns the precondition to carry."""
    if given is None:
        return None
    meta = obj.get("metadata") or {}
    version = str(meta.get("resourceVersion") or "")
    if not given.matches(version):
        raise stale(given, kind=kind, name=str(meta.get("name") or ""), resource_version=version)
    return given.precondition(version)


async def check(
    ctx: ResolveContext, operation: str, arguments: Mapping[str, Any], given: IfMatch | None
) -> str | None:
    """The submission-time check: ``None`` without a header; otherwise resolve the target
    (``NotFound``/``Invalid`` as the operation would), compare (:class:`PreconditionFailed`) and
    return the resourceVersion the job's write must still find (``None`` for ``*``)."""
    if given is None:
        return None
    entry = conditional(operation)
    target = await entry.resolve(ctx, arguments)
    return check_object(given, target.obj, kind=target.kind)


# ---------------------------------------------------------------------------------------------
# The executor's side: conditional writes
# ---------------------------------------------------------------------------------------------


def version_test(resource_version: str) -> dict[str, Any]:
    """The JSON patch operation that makes a JSON patch conditional on ``resource_version`` (a
    failed ``test`` is a 422 from Kubernetes: the writer then asks :func:`moved`)."""
    return {"op": "test", "path": "/metadata/resourceVersion", "value": resource_version}


async def moved(
    rest: Kube, resource: Resource, name: str, namespace: str | None, resource_version: str
) -> PreconditionFailed | None:
    """After a refused JSON patch that tested ``resource_version``: the 412 when the object is no
    longer at it, ``None`` when it still is (the refusal had another cause)."""
    current = await rest.get(resource, name, namespace)
    now = str(((current or {}).get("metadata") or {}).get("resourceVersion") or "")
    if now == resource_version:
        return None
    return _changed(resource, name, resource_version, now)


@asynccontextmanager
async def write(
    rest: Kube, resource: Resource, name: str, namespace: str | None, resource_version: str | None
) -> AsyncIterator[None]:
    """Around a write that carries ``resource_version`` as a precondition (merge patch, delete):
    Kubernetes' 409 becomes :class:`PreconditionFailed` with the object's current ETag. Without a
    precondition (``None``) errors pass through unchanged."""
    try:
        yield
    except KubeConflict as error:
        if resource_version is None:
            raise
        raise await conflict(rest, resource, name, namespace, resource_version) from error


def patch_with(patch: Mapping[str, Any], resource_version: str | None) -> dict[str, Any]:
    """A JSON merge patch that, when ``resource_version`` is given, carries it as
    ``metadata.resourceVersion``: the apiserver then refuses it (409) unless the object is still
    at that version."""
    out = dict(patch)
    if resource_version is not None:
        meta = dict(out.get("metadata") or {})
        meta["resourceVersion"] = resource_version
        out["metadata"] = meta
    return out


async def merge_patch(
    rest: Kube,
    resource: Resource,
    name: str,
    namespace: str | None,
    patch: Mapping[str, Any],
    resource_version: str | None,
) -> Any:
    """A JSON merge patch of ``name`` made at ``resource_version`` (``None``: unconditionally):
    :func:`patch_with` inside :func:`write`, so that Kubernetes' 409 is the 412 with the
    object's current ETag. Returns the object as written."""
    async with write(rest, resource, name, namespace, resource_version):
        return await rest.merge_patch(resource, name, patch_with(patch, resource_version), namespace)


async def unchanged(
    rest: Kube, resource: Resource, obj: Mapping[str, Any], resource_version: str | None
) -> None:
    """Under If-Match (``resource_version``), an object the operation leaves as it is, or writes
    without a precondition of its own, must still be at the version checked: else the 412 with
    its current ETag (its write would have tested it)."""
    meta = obj.get("metadata") or {}
    if resource_version is not None and meta.get("resourceVersion") != resource_version:
        raise await conflict(rest, resource, str(meta["name"]), meta.get("namespace"), resource_version)


async def conflict(
    rest: Kube, resource: Resource, name: str, namespace: str | None, resource_version: str
) -> PreconditionFailed:
    """The job's 412 after Kubernetes refused a write carrying ``resource_version`` (409): reads
    the object again to say where it is now."""
    current = await rest.get(resource, name, namespace)
    now = str(((current or {}).get("metadata") or {}).get("resourceVersion") or "")
    return _changed(resource, name, resource_version, now)


def _changed(resource: Resource, name: str, resource_version: str, now: str) -> PreconditionFailed:
    kind = resource.kind or resource.plural
    return PreconditionFailed(
        f"{kind} {name} changed since If-Match was checked (it is at "
        f"{etag(now) if now else 'no version: deleted'}); read it again and retry",
        attrs={
            "etag": etag(now) if now else None,
            "if_match": etag(resource_version),
            "kind": kind,
            "name": name,
        },
    )
