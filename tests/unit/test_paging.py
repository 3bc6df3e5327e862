"""Cursor paging (ops/paging.py, shim/paging.py): the codec refuses every hostile cursor with a
422 ``Invalid`` (never another exception), and keyset pages stay exact under concurrent writes.

Property-style over seeded random walks: between pages items are created (before, at and after
the cursor's position) and deleted; every item present for the whole walk is returned exactly
once and no item is returned twice.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import random
from typing import Any

import pytest
from starlette.requests import Request

from sparkrun_operator.ops import catalog, paging
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.shim.paging import asked, page_headers

DIGEST = paging.filter_digest("workloads.list", {"arguments": {}}, "alice")


def _refused(token: str, *, route: str = "workloads.list", digest: str = DIGEST) -> dict[str, Any]:
    with pytest.raises(Invalid) as caught:
        paging.decode(token, route=route, digest=digest, parts=("n", "s", "s"))
    assert caught.value.status == 422
    assert caught.value.error_type == "ValueError"
    assert caught.value.attrs["parameter"] == "cursor"
    return caught.value.attrs


def _raw(body: Any) -> str:
    text = json.dumps(body, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


def _sealed(version: Any, route: Any, digest: Any, key: Any) -> str:
    """A hand-made cursor with a correct checksum (what a careful forger makes)."""
    return _raw(
        {"v": version, "r": route, "f": digest, "k": key, "s": paging._checksum(version, route, digest, key)}
    )


def test_a_cursor_round_trips_and_is_opaque_url_safe_text() -> None:
    key = (1700000000.5, "ns", "qwen")
    token = paging.encode("workloads.list", DIGEST, key)
    assert set(token) <= paging._ALPHABET
    assert len(token) <= paging.MAX_CURSOR
    assert paging.decode(token, route="workloads.list", digest=DIGEST, parts=("n", "s", "s")) == key


@pytest.mark.parametrize(
    ("token", "reason"),
    [
        ("A" * (paging.MAX_CURSOR + 1), "cursor_too_long"),
        ("a" * 10_000_000, "cursor_too_long"),
        ("abc$", "cursor_malformed"),
        ("abc=", "cursor_malformed"),
        ("abcde", "cursor_malformed"),
        ("abc\n", "cursor_malformed"),
        (base64.urlsafe_b64encode(b"\xff\xfe").decode().rstrip("="), "cursor_malformed"),
        (base64.urlsafe_b64encode(b"not json").decode().rstrip("="), "cursor_malformed"),
        (_raw([1, 2]), "cursor_malformed"),
        (_raw({"v": 1}), "cursor_malformed"),
        (_raw("[" * 300 + "]" * 300), "cursor_malformed"),
        (base64.urlsafe_b64encode(b"[" * 1500).decode().rstrip("="), "cursor_malformed"),
        (
            _raw({"v": 1, "r": "workloads.list", "f": DIGEST, "k": [1, "a", "b"], "s": "0" * 16}),
            "cursor_damaged",
        ),
        (_sealed(2, "workloads.list", DIGEST, [1, "a", "b"]), "cursor_mismatch"),
        (_sealed(1, "catalog.search", DIGEST, [1, "a", "b"]), "cursor_mismatch"),
        (_sealed(1, "workloads.list", "0" * 32, [1, "a", "b"]), "cursor_mismatch"),
        (_sealed(1, "workloads.list", DIGEST, [True, "a", "b"]), "cursor_malformed"),
        (_sealed(1, "workloads.list", DIGEST, ["1", "a", "b"]), "cursor_malformed"),
        (_sealed(1, "workloads.list", DIGEST, [1, "a"]), "cursor_malformed"),
        (_sealed(1, "workloads.list", DIGEST, {"a": 1}), "cursor_malformed"),
        (_sealed(1, "workloads.list", DIGEST, [[1], "a", "b"]), "cursor_malformed"),
    ],
)
def test_hostile_cursors_are_a_422_naming_the_reason(token: str, reason: str) -> None:
    assert _refused(token)["reason"] == reason


def test_a_tampered_cursor_is_refused() -> None:
    token = paging.encode("workloads.list", DIGEST, (5, "ns", "a"))
    body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    body["k"] = [5, "ns", "b"]
    assert _refused(_raw(body))["reason"] == "cursor_damaged"
    flipped = token[:-3] + ("A" if token[-3] != "A" else "B") + token[-2:]
    assert _refused(flipped)["reason"] in {"cursor_damaged", "cursor_malformed"}


def test_a_cursor_is_bound_to_its_route_filters_and_principal() -> None:
    token = paging.encode("workloads.list", DIGEST, (5, "ns", "a"))
    other_filters = paging.filter_digest("workloads.list", {"arguments": {"limit": 3}}, "alice")
    other_principal = paging.filter_digest("workloads.list", {"arguments": {}}, "bob")
    assert len({DIGEST, other_filters, other_principal}) == 3
    assert _refused(token, digest=other_filters)["reason"] == "cursor_mismatch"
    assert _refused(token, digest=other_principal)["reason"] == "cursor_mismatch"
    assert _refused(token, route="catalog.search")["reason"] == "cursor_mismatch"


def test_random_text_never_escapes_as_another_exception() -> None:
    rng = random.Random(7)
    alphabet = [*sorted(paging._ALPHABET), "=", "%", "~", ".", "\x00", "é"]
    for _ in range(3000):
        token = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 120)))
        try:
            paging.decode(token, route="workloads.list", digest=DIGEST, parts=("n", "s", "s"))
        except Invalid:
            continue


def test_the_longest_tenant_text_key_stays_within_the_bound() -> None:
    worst = "\U0001f600" * 4096
    key = paging.bounded_text(worst)
    assert len(key[0]) == paging.TEXT_KEY
    assert len(key[1]) == 64
    token = paging.encode("proxy.list_aliases", DIGEST, key)
    assert len(token) <= paging.MAX_CURSOR
    assert paging.decode(token, route="proxy.list_aliases", digest=DIGEST, parts=("s", "s")) == key
    lone = "a\ud800b"
    token = paging.encode("proxy.list_aliases", DIGEST, paging.bounded_text(lone))
    assert paging.decode(token, route="proxy.list_aliases", digest=DIGEST, parts=("s", "s")) == (lone, "")


@pytest.mark.parametrize("char", ["\x01", "\x00", '"', "\\", "\u2028", "\ud800", "\U0010ffff"])
def test_a_key_of_any_characters_makes_a_cursor_that_is_accepted(char: str) -> None:
    """A tenant's alias of control characters (JSON escapes each as six) still gives a cursor
    the API takes back: the server never issues a cursor it would refuse as too long."""
    for length in (paging.TEXT_KEY, paging.TEXT_KEY + 1, 4096):
        key = paging.bounded_text(char * length)
        digest = paging.filter_digest("proxy.list_aliases", {"arguments": {}, "manager": "m"}, "p" * 1024)
        token = paging.encode("proxy.list_aliases", digest, key)
        assert len(token) <= paging.MAX_CURSOR
        assert paging.decode(token, route="proxy.list_aliases", digest=digest, parts=("s", "s")) == key


def test_bounded_text_orders_as_the_text_and_stays_unique() -> None:
    texts = ["a", "ab", "b", "a" * 300, "a" * 300 + "b", "a" * 300 + "c", "a" * 256, "b" * 400]
    keys = {paging.bounded_text(t) for t in texts}
    assert len(keys) == len(texts)
    short = sorted(t for t in texts if len(t) <= paging.TEXT_KEY)
    assert sorted(short, key=paging.bounded_text) == short


def _walk(
    items: dict[str, Any], spec: paging.ListSpec, rng: random.Random, new: Any
) -> tuple[set[str], list[str]]:
    """Page through ``items`` (id -> item) while creating and deleting between pages; the ids
    present for the whole walk and every id returned, in order."""
    throughout = set(items)
    seen: list[str] = []
    after: paging.Key | None = None
    for _ in range(10_000):
        found = paging.page(list(items.values()), spec, after, rng.randrange(1, 6))
        seen += [row["id"] for row in found.items]
        if found.after is None:
            return throughout, seen
        after = found.after
        for _ in range(rng.randrange(0, 4)):
            if items and rng.random() < 0.5:
                gone = rng.choice(sorted(items))
                del items[gone]
                throughout.discard(gone)
            else:
                row = new(rng)
                items[row["id"]] = row
    raise AssertionError("the walk did not end")


def _job(rng: random.Random) -> dict[str, Any]:
    name = f"{rng.getrandbits(128):032x}"
    when = dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=rng.randrange(0, 40))
    stamp = when.strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"id": name, "metadata": {"name": name, "creationTimestamp": stamp}}


def _workload(rng: random.Random) -> dict[str, Any]:
    name = f"w-{rng.getrandbits(40):x}"
    return {
        "id": name,
        "started_at": float(rng.randrange(0, 30)),
        "metadata": {"namespace": "ns", "name": name},
    }


def _named(rng: random.Random) -> dict[str, Any]:
    name = f"r-{rng.getrandbits(40):x}"
    return {"id": name, "name": name}


@pytest.mark.parametrize(
    ("spec", "new"),
    [
        (paging.JOBS, _job),
        (paging.LISTS["workloads.list"], _workload),
        (paging.LISTS["catalog.search"], _named),
    ],
    ids=["jobs", "workloads", "by-name"],
)
def test_pages_under_concurrent_writes_see_every_lasting_item_exactly_once(
    spec: paging.ListSpec, new: Any
) -> None:
    for seed in range(300):
        rng = random.Random(seed)
        items = {row["id"]: row for row in (new(rng) for _ in range(rng.randrange(0, 40)))}
        throughout, seen = _walk(items, spec, rng, new)
        assert len(seen) == len(set(seen)), f"seed {seed}: an item was returned twice"
        assert throughout <= set(seen), f"seed {seed}: missed {throughout - set(seen)}"


def test_descending_lists_are_newest_first_and_ties_go_by_name() -> None:
    rows = [
        {"id": n, "metadata": {"name": n, "creationTimestamp": t}}
        for n, t in [
            ("a", "2026-01-01T00:00:01Z"),
            ("b", "2026-01-01T00:00:01Z"),
            ("c", "2026-01-01T00:00:00Z"),
        ]
    ]
    first = paging.page(rows, paging.JOBS, None, 2)
    assert [r["id"] for r in first.items] == ["b", "a"]
    assert first.after == ("2026-01-01T00:00:01Z", "a")
    last = paging.page(rows, paging.JOBS, first.after, 2)
    assert [r["id"] for r in last.items] == ["c"]
    assert last.after is None


def test_a_page_keeps_the_result_schema() -> None:
    recipes = {"recipes": [{"reference": r} for r in "cab"], "total": 3, "facets": {}, "next_offset": None}
    body, after = paging.page_result(recipes, paging.LISTS["catalog.recipes"], None, 2)
    assert body == {**recipes, "recipes": [{"reference": "a"}, {"reference": "b"}]}
    assert after == ("b",)
    aliases = {"z": "m1", "a": "m2", "m": "m3"}
    body, after = paging.page_result(aliases, paging.LISTS["proxy.list_aliases"], None, 2)
    assert body == {"a": "m2", "m": "m3"}
    assert after == ("m", "")
    body, after = paging.page_result(aliases, paging.LISTS["proxy.list_aliases"], after, 2)
    assert body == {"z": "m1"}
    assert after is None
    body, after = paging.page_result(["sparkrun-gateway"], paging.LISTS["proxy.list_gateways"], None, 50)
    assert body == ["sparkrun-gateway"]
    assert after is None
    assert paging.page_result("odd", paging.LISTS["catalog.search"], None, 1) == ("odd", None)


def test_every_list_query_declares_its_key() -> None:
    ops = catalog.load()
    lists = {op.name for op in ops if op.kind == "query" and op.result_schema.get("type") == "array"}
    assert lists, "no list query in the catalog"
    assert lists <= set(paging.LISTS), f"list queries without a paging key: {lists - set(paging.LISTS)}"
    for name in paging.LISTS:
        assert ops.find(name) is not None, f"{name} is not an operation"
        assert ops.get(name).kind == "query", f"{name} is not a query operation"


#: Array fields of query results that are details of one answer, not the list it answers.
NOT_LISTS = {("catalog.recipes", "unavailable_registries")}


def test_every_list_inside_a_query_result_declares_its_key() -> None:
    """A list query answering an object (``{"leases": [...]}``) pages on its list field too."""
    for op in catalog.load():
        if op.kind != "query" or op.result_schema.get("type") != "object":
            continue
        for field, schema in (op.result_schema.get("properties") or {}).items():
            if not isinstance(schema, dict) or schema.get("type") != "array" or (op.name, field) in NOT_LISTS:
                continue
            spec = paging.LISTS.get(op.name)
            assert spec is not None, f"{op.name}: its list {field} has no paging key"
            assert (spec.shape, spec.field) == ("field", field), op.name


def _request(query: str) -> Request:
    return Request(
        {"type": "http", "method": "GET", "path": "/v1/jobs", "query_string": query.encode(), "headers": []}
    )


def test_the_shim_reads_paging_only_when_asked_and_links_the_next_page() -> None:
    common: dict[str, Any] = {
        "route": "/v1/jobs",
        "filters": {"state": None},
        "principal": "p",
        "parts": ("s", "s"),
    }
    assert asked(_request("limit=5"), cursor_only=True, **common) is None
    assert asked(_request("state=queued&x=1"), **common) is None
    ask = asked(_request("limit=5"), **common)
    assert ask is not None
    assert ask.after is None
    assert ask.limit == 5
    big = asked(_request("cursor=&limit=100000"), cursor_only=True, keep={"state": "queued"}, **common)
    assert big is not None
    assert big.limit == paging.MAX_PAGE
    assert asked(_request("cursor="), **common).limit == paging.DEFAULT_PAGE  # type: ignore[union-attr]
    assert page_headers(big, None) == {}
    headers = page_headers(big, ("2026-01-01T00:00:00Z", "ab"))
    token = headers["X-Next-Cursor"]
    assert headers["Link"] == f'<?state=queued&limit=200&cursor={token}>; rel="next"'
    again = asked(_request(f"cursor={token}"), **common)
    assert again is not None
    assert again.after == ("2026-01-01T00:00:00Z", "ab")
    with pytest.raises(Invalid):
        asked(_request("cursor=&limit=ten"), **common)
    with pytest.raises(Invalid):
        asked(_request(f"cursor={token}"), **{**common, "filters": {"state": "queued"}})
