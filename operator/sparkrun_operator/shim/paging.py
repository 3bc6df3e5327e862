"""The shim's side of cursor paging (ADR 0049): the ``cursor``/``limit`` query parameters in,
one page and its continuation headers (``X-Next-Cursor``, ``Link: <...>; rel="next"``) out.

The codec and the keyset slices are ``ops/paging.py``; this module only reads the request and
writes the response. The body of a page is the list's own schema; the continuation is in the
headers only, absent on the last page. The ``Link`` target is a relative reference (``?...``),
so it resolves against whatever URL the client called (``/v1/...``, an operation alias, or the
aggregated API's prefix).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import Response

from sparkrun_operator.ops import paging
from sparkrun_operator.ops.errors import Invalid

__all__ = ["PageAsk", "asked", "page_headers", "paged_reply"]


@dataclass(frozen=True)
class PageAsk:
    """A page the caller asked for: the key to continue after (``None``: the first page), the
    page size, the cursor's binding and the other query parameters the next link repeats."""

    route: str
    digest: str
    after: paging.Key | None
    limit: int
    keep: tuple[tuple[str, str], ...] = ()


def _limit(request: Request) -> int:
    raw = request.query_params.get("limit")
    if raw is None:
        return paging.DEFAULT_PAGE
    try:
        value = int(raw)
    except ValueError:
        raise Invalid(
            "limit must be an integer", attrs={"parameter": "limit", "reason": "limit_malformed"}
        ) from None
    return min(max(value, 1), paging.MAX_PAGE)


def asked(
    request: Request,
    *,
    route: str,
    filters: object,
    principal: str,
    parts: tuple[paging.Part, ...],
    cursor_only: bool = False,
    keep: Mapping[str, str | None] | None = None,
) -> PageAsk | None:
    """The page asked for, or ``None`` when the caller did not ask for paging (no ``cursor``,
    and no ``limit`` either unless ``cursor_only``: ``/v1/jobs``, whose ``limit`` predates
    cursors, pages only with a cursor). A bad cursor or limit raises ``Invalid`` (422)."""
    params = request.query_params
    if "cursor" not in params and (cursor_only or "limit" not in params):
        return None
    digest = paging.filter_digest(route, filters, principal)
    token = params.get("cursor") or ""
    after = paging.decode(token, route=route, digest=digest, parts=parts) if token else None
    kept = tuple((name, value) for name, value in (keep or {}).items() if value is not None)
    return PageAsk(route, digest, after, _limit(request), kept)


def page_headers(ask: PageAsk, after: paging.Key | None) -> dict[str, str]:
    """``X-Next-Cursor`` and ``Link`` to the page after ``after``; none on the last page."""
    if after is None:
        return {}
    token = paging.encode(ask.route, ask.digest, after)
    query = urlencode([*ask.keep, ("limit", str(ask.limit)), ("cursor", token)])
    return {"X-Next-Cursor": token, "Link": f'<?{query}>; rel="next"'}


def paged_reply(result: object, spec: paging.ListSpec, ask: PageAsk) -> Response:
    """One page of an operation's full ``result`` (cached or fresh) as the response."""
    body, after = paging.page_result(result, spec, ask.after, ask.limit)
    return Response(
        json.dumps(body, separators=(",", ":"), allow_nan=False).encode(),
        media_type="application/json",
        headers=page_headers(ask, after),
    )
