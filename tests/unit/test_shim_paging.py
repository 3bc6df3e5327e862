"""A list query's pages and the shim's query cache (shim/routes_ops.py ``_query``, shim/paging.py).

In process, with the real route code and a counting executor: the cache holds the full answer
and every page is cut from it (one execution for a whole walk within the TTL); an answer
without ``cursor``/``limit`` is the cached bytes themselves; a job clears the cache, and the
next page reads the new answer.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.requests import Request

from sparkrun_operator.k8s.auth import UserInfo
from sparkrun_operator.ops import catalog
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.shim.identity import Caller
from sparkrun_operator.shim.querycache import QueryCache
from sparkrun_operator.shim.routes_ops import OperationRoutes
from sparkrun_operator.shim.state import ShimConfig


def _routes(rows: list[dict[str, Any]], calls: list[int]) -> OperationRoutes:
    async def search(ctx: OperationContext, args: dict[str, Any]) -> Any:
        calls.append(1)
        return [dict(row) for row in rows]

    routes = OperationRoutes.__new__(OperationRoutes)
    routes.config = ShimConfig()
    routes.query_cache = QueryCache(ttl=600, size=16, max_bytes=1 << 20)
    routes.queries_in_flight = 0
    routes.executors = {"catalog.search": search}
    routes.rest = None  # type: ignore[assignment]  # the executor above reads nothing
    return routes


def _request(query: str) -> Request:
    scope = {"type": "http", "method": "POST", "path": "/v1/catalog/search", "query_string": query.encode()}
    return Request({**scope, "headers": []})


def test_a_walk_pages_the_cached_full_answer() -> None:
    rows = [{"name": f"r-{i:02d}", "metadata": {}} for i in range(7)]
    calls: list[int] = []
    routes = _routes(rows, calls)
    op = catalog.load().get("catalog.search")
    caller = Caller(user=UserInfo(username="alice"), manager="daemon", via="bearer")

    async def walk() -> tuple[list[str], bytes, bytes]:
        whole = await routes._query(op, {}, caller, _request(""))
        seen: list[str] = []
        query = "limit=3"
        for _ in range(10):
            answer = await routes._query(op, {}, caller, _request(query))
            seen += [row["name"] for row in json.loads(bytes(answer.body))]
            token = answer.headers.get("x-next-cursor")
            if token is None:
                break
            query = f"limit=3&cursor={token}"
        again = await routes._query(op, {}, caller, _request("unknown=1"))
        return seen, bytes(whole.body), bytes(again.body)

    seen, whole, again = asyncio.run(walk())
    assert seen == [row["name"] for row in rows]
    assert len(calls) == 1, "the walk was served from the cached full answer"
    assert whole == again == json.dumps(rows, separators=(",", ":")).encode()
    routes.query_cache.clear()  # what any job does
    rows.append({"name": "r-00a", "metadata": {}})

    async def next_page() -> list[str]:
        first = await routes._query(op, {}, caller, _request("limit=1"))
        token = first.headers["x-next-cursor"]
        answer = await routes._query(op, {}, caller, _request(f"limit=1&cursor={token}"))
        return [row["name"] for row in json.loads(bytes(answer.body))]

    assert asyncio.run(next_page()) == ["r-00a"]
    assert len(calls) == 2


def test_a_page_of_a_query_that_answers_an_etag_still_says_it() -> None:
    """``workloads.history`` answers the workload's ETag header (ADR 0049), paged or not."""

    async def history(ctx: OperationContext, args: dict[str, Any]) -> Any:
        ctx.etag = '"41"'
        return {"workload": "chat-blue", "namespace": "ns", "apply": "Immediate", "revisions": []}

    routes = _routes([], [])
    name = "plugins.sparkrun-k8s.workloads.history"
    routes.executors = {name: history}
    op = catalog.load().get(name)
    caller = Caller(user=UserInfo(username="alice"), manager="daemon", via="bearer")

    async def ask(query: str) -> str | None:
        answer = await routes._query(op, {"workload": "chat-blue"}, caller, _request(query))
        return answer.headers.get("etag")

    assert asyncio.run(ask("")) == '"41"'
    assert asyncio.run(ask("limit=5")) == '"41"'
    assert asyncio.run(ask("cursor=")) == '"41"'
