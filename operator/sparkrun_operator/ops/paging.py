"""Cursor paging of the daemon API's lists (ADR 0049): opaque bounded cursors and keyset slices.

Pure (no I/O, no clock); the shim's glue (query parameters, headers) is ``shim/paging.py``.

- A cursor is ``base64url(compact JSON {"v", "r", "f", "k", "s"})`` without padding: the format
  version, the route or operation it belongs to, a digest of the filters and arguments (and the
  principal) it was issued for, the last key the page returned and a checksum of the rest. It is
  at most :data:`MAX_CURSOR` characters; a longer, malformed, damaged or foreign one is a 422
  ``ValueError`` (:class:`~sparkrun_operator.ops.errors.Invalid`), never a 500. The checksum is
  not a secret (shim replicas share no key): it catches a damaged or hand-edited cursor, and a
  forged one gains nothing, as a cursor is only a position in what the caller may see anyway.
- Keyset, never offsets: every list declares a :class:`ListSpec` whose key is immutable and unique
  per item; a page is the first ``limit`` items whose key comes strictly after the cursor's key
  in the list's order, so an item created or deleted between pages never shifts what a held
  cursor returns, and every item present for the whole walk is returned exactly once.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from sparkrun_operator import safeload
from sparkrun_operator.ops.errors import Invalid

__all__ = [
    "DEFAULT_PAGE",
    "JOBS",
    "LISTS",
    "MAX_CURSOR",
    "MAX_PAGE",
    "Key",
    "ListSpec",
    "Page",
    "bounded_text",
    "decode",
    "encode",
    "filter_digest",
    "page",
    "page_result",
]

#: The page size without ``limit``, and the most one page holds.
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 200
#: The most characters of a cursor. The largest key, :data:`TEXT_KEY` control characters (JSON
#: writes each as six: ``\u0001``) plus its digest, encodes to about 2,300; a server must never
#: issue a cursor it would refuse (tests/unit/test_paging.py).
MAX_CURSOR: Final = 4096
#: Characters of a tenant-written text key kept as is (:func:`bounded_text`).
TEXT_KEY: Final = 256
VERSION: Final = 1

_ALPHABET: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
_BOUNDS: Final = safeload.Bounds("cursor", MAX_CURSOR, 3)
_FIELDS: Final = frozenset({"v", "r", "f", "k", "s"})

#: A key: strings and numbers, compared as a tuple.
Key = tuple[str | int | float, ...]
#: A key part's type: ``s`` text, ``n`` number.
Part = Literal["s", "n"]


@dataclass(frozen=True)
class ListSpec:
    """How one list pages: the key of an item, its parts' types and the order.

    ``shape``: ``array`` (the result is the list), ``field`` (the list is ``result[field]``, the
    other fields stay) or ``mapping`` (an object; items are its ``(name, value)`` pairs and a page
    is an object with some of them).
    """

    key: Callable[[Any], Key]
    parts: tuple[Part, ...]
    descending: bool = False
    shape: Literal["array", "field", "mapping"] = "array"
    field: str = ""
    #: How the order reads in the docs.
    order: str = ""


@dataclass(frozen=True)
class Page:
    """One page: its items and the key to continue after (``None`` on the last page)."""

    items: list[Any]
    after: Key | None


def bounded_text(text: str) -> tuple[str, str]:
    """A key for tenant-written text of any length, bounded: its first :data:`TEXT_KEY`
    characters and, for a longer text only, its SHA-256. The order is the text's own for texts
    up to that length; longer texts sharing a prefix order by digest (total, stable, unique)."""
    if len(text) <= TEXT_KEY:
        return (text, "")
    return (text[:TEXT_KEY], hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest())


def _name(row: Any) -> Key:
    return (str(row.get("name", "")) if isinstance(row, Mapping) else "",)


def _job_key(obj: Any) -> Key:
    meta = obj.get("metadata") or {}
    return (str(meta.get("creationTimestamp") or ""), str(meta.get("name") or ""))


def _workload_key(row: Any) -> Key:
    meta = row.get("metadata") or {}
    started = row.get("started_at")
    when = started if isinstance(started, int | float) and not isinstance(started, bool) else 0
    return (when, str(meta.get("namespace") or ""), str(meta.get("name") or ""))


def _alias_key(pair: Any) -> Key:
    return bounded_text(str(pair[0]))


def _revision_key(row: Any) -> Key:
    number = row.get("number")
    return (number if isinstance(number, int) and not isinstance(number, bool) else 0,)


_BY_NAME: Final = ListSpec(_name, ("s",), order="name, ascending")

#: ``/v1/jobs`` with a cursor: newest first by (metadata.creationTimestamp, name).
JOBS: Final = ListSpec(
    _job_key, ("s", "s"), descending=True, order="newest first: creationTimestamp, then job id, descending"
)

#: The list query operations and how each pages (tests/unit/test_paging.py: every query whose
#: result schema is an array has one).
LISTS: Final[Mapping[str, ListSpec]] = {
    "workloads.list": ListSpec(
        _workload_key,
        ("n", "s", "s"),
        descending=True,
        order="newest first: started_at (creation), then metadata.namespace/name, descending",
    ),
    "catalog.clusters": _BY_NAME,
    "catalog.registries": _BY_NAME,
    # NB: a registry's recipe and another's (or a local one) may share a catalog name: the
    # reference (the Recipe object's name) keeps the key unique (issue 32)
    "catalog.search": ListSpec(
        lambda row: (str(row.get("name", "")), str(row.get("reference", ""))),
        ("s", "s"),
        order="name, then reference, ascending",
    ),
    "catalog.recipes": ListSpec(
        lambda row: (str(row.get("reference", "")),),
        ("s",),
        shape="field",
        field="recipes",
        order="reference, ascending (within the answer to the body's offset/limit)",
    ),
    "proxy.list_aliases": ListSpec(
        _alias_key, ("s", "s"), shape="mapping", order="alias, ascending (a very long alias by digest)"
    ),
    "proxy.list_gateways": ListSpec(lambda name: (str(name),), ("s",), order="name, ascending"),
    "plugins.sparkrun-k8s.workloads.history": ListSpec(
        _revision_key, ("n",), shape="field", field="revisions", order="revision number, ascending"
    ),
    "plugins.sparkrun-k8s.workloads.leases": ListSpec(
        lambda row: (str(row.get("workload", "")),),
        ("s",),
        shape="field",
        field="leases",
        order="workload name, ascending",
    ),
}


def filter_digest(route: str, filters: Any, principal: str) -> str:
    """What a cursor is bound to: the route or operation, its filters or arguments, the caller."""
    text = json.dumps([route, filters, principal], sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _checksum(version: Any, route: Any, digest: Any, key: Any) -> str:
    text = json.dumps([version, route, digest, key], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def encode(route: str, digest: str, key: Key) -> str:
    """The cursor that continues after ``key`` on ``route`` with the filters of ``digest``."""
    parts = list(key)
    body = {"v": VERSION, "r": route, "f": digest, "k": parts, "s": _checksum(VERSION, route, digest, parts)}
    raw = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return base64.urlsafe_b64encode(raw.encode("utf-8", "surrogatepass")).decode("ascii").rstrip("=")


def _refuse(detail: str, reason: str) -> Invalid:
    return Invalid(detail, attrs={"parameter": "cursor", "reason": reason})


def _matches(part: Any, kind: Part) -> bool:
    if kind == "s":
        return isinstance(part, str)
    return isinstance(part, int | float) and not isinstance(part, bool)


def decode(token: str, *, route: str, digest: str, parts: Sequence[Part]) -> Key:
    """The key a cursor continues after; raises ``Invalid`` (422) for a cursor that is too long,
    malformed, damaged, of another route or of other filters. Bounded: the length is checked
    before anything is decoded."""
    if len(token) > MAX_CURSOR:
        raise _refuse(f"cursor is longer than {MAX_CURSOR} characters", "cursor_too_long")
    if not set(token) <= _ALPHABET or len(token) % 4 == 1:
        raise _refuse("cursor is malformed", "cursor_malformed")
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        # NB: surrogatepass, as encode: a lone surrogate in a tenant's alias survives the trip.
        body = safeload.load_json(raw.decode("utf-8", "surrogatepass"), _BOUNDS)
    except (binascii.Error, ValueError):
        raise _refuse("cursor is malformed", "cursor_malformed") from None
    if not isinstance(body, dict) or set(body) != _FIELDS:
        raise _refuse("cursor is malformed", "cursor_malformed")
    version, owner, bound, key = body["v"], body["r"], body["f"], body["k"]
    if body["s"] != _checksum(version, owner, bound, key):
        raise _refuse("cursor is damaged", "cursor_damaged")
    if version != VERSION or owner != route:
        raise _refuse("cursor belongs to another list", "cursor_mismatch")
    if bound != digest:
        raise _refuse("cursor was issued for other filters or arguments", "cursor_mismatch")
    if not isinstance(key, list) or len(key) != len(parts) or not all(map(_matches, key, parts)):
        raise _refuse("cursor is malformed", "cursor_malformed")
    return tuple(key)


def page(items: Sequence[Any], spec: ListSpec, after: Key | None, limit: int) -> Page:
    """The first ``limit`` items (1..) in the list's order whose key comes strictly after
    ``after`` (``None``: from the start); ``after`` of the result is set when more follow."""
    keyed = sorted(
        ((spec.key(item), item) for item in items), key=lambda pair: pair[0], reverse=spec.descending
    )
    if after is not None:
        if spec.descending:
            keyed = [pair for pair in keyed if pair[0] < after]
        else:
            keyed = [pair for pair in keyed if pair[0] > after]
    size = max(limit, 1)
    chosen = keyed[:size]
    more = len(keyed) > size
    return Page([item for _, item in chosen], chosen[-1][0] if more else None)


def page_result(result: Any, spec: ListSpec, after: Key | None, limit: int) -> tuple[Any, Key | None]:
    """One page of an operation's ``result`` in the result's own schema (an array stays an
    array, an object keeps its other fields) and the key to continue after. A result not of
    the declared shape is answered whole, as the last page."""
    if spec.shape == "array" and isinstance(result, list):
        found = page(result, spec, after, limit)
        return found.items, found.after
    if spec.shape == "field" and isinstance(result, dict) and isinstance(result.get(spec.field), list):
        found = page(result[spec.field], spec, after, limit)
        return {**result, spec.field: found.items}, found.after
    if spec.shape == "mapping" and isinstance(result, dict):
        found = page(list(result.items()), spec, after, limit)
        return dict(found.items), found.after
    return result, None
