"""Routing documents, the static source, the balancer and key grants (no network).

Covers: field validation with the offending path, name conflicts, reloads that keep the last good
table, least-outstanding choice, ejection backoff, bounded-load prefix affinity, key lookup.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path

import pytest

from sparkrun_operator.gateway import StaticKeySource, StaticRoutingSource
from sparkrun_operator.gateway.auth import DigestTable, Grant, MergedKeySource, extract_key
from sparkrun_operator.gateway.balancer import Balancer
from sparkrun_operator.gateway.routing import (
    RoutingError,
    RoutingTable,
    Workload,
    dump_document,
    parse_document,
)
from sparkrun_operator.plan import names


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ("workloads: [{servedName: m}]", "workloads[0].name is required"),
        ("workloads: [{name: a}]", "workloads[0].servedName is required"),
        ("workloads: [{name: a, servedName: m, state: Asleep}]", "workloads[0].state must be one of"),
        ("workloads: [{name: a, servedName: m, capabilities: [vision]}]", "unknown ['vision']"),
        ("workloads: [{name: a, servedName: m, endpoints: [10.0.0.1:8000]}]", "is not an http(s) URL"),
        ("workloads: [{name: a, servedName: m, timeouts: {read: -1}}]", "timeouts.read must be a positive"),
        ("workloads: 3", "'workloads' must be a list"),
        ("[1]", "must be a mapping"),
    ],
)
def test_bad_documents_name_the_field(doc: str, needle: str) -> None:
    with pytest.raises(RoutingError) as err:
        RoutingTable.build(parse_document(doc), 1)
    assert needle in str(err.value)


def test_document_round_trip() -> None:
    text = (
        "workloads:\n  - {namespace: ml, name: a, servedName: m, aliases: [x], state: Sleeping,\n"
        "     capabilities: [embedding], endpoints: ['http://h:1/'], prefixAffinity: true,\n"
        "     timeouts: {connect: 2, read: 9}}\n"
    )
    (wl,) = parse_document(text)
    assert wl.key == "ml/a"
    assert wl.endpoints == ("http://h:1",)
    assert wl.connect_timeout == 2.0
    assert not wl.routable
    assert parse_document(dump_document([wl])) == [wl]


async def test_static_source_keeps_the_last_good_table(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text("workloads: [{name: a, servedName: m, endpoints: ['http://h:1']}]\n")
    source = StaticRoutingSource(path, poll_interval=3600)
    await source.start()
    try:
        first = source.snapshot()
        assert first.lookup("m") is not None
        path.write_text("workloads: [{name: a}]\n")
        assert await source.reload() is False
        assert source.snapshot() is first
        path.write_text("workloads: [{name: a, servedName: n, endpoints: ['http://h:1']}]\n")
        waiter = asyncio.create_task(source.wait_changed(first.version))
        assert await source.reload() is True
        table = await asyncio.wait_for(waiter, 1)
        assert table.lookup("n") is not None
        assert table.lookup("m") is None
    finally:
        await source.close()


async def test_static_source_refuses_to_start_on_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text("workloads: [{name: a}]\n")
    with pytest.raises(RoutingError):
        await StaticRoutingSource(path).start()


def test_least_outstanding_and_rotation() -> None:
    bal = Balancer()
    urls = ["http://a", "http://b", "http://c"]
    picks = [bal.pick(urls) for _ in range(3)]
    assert {p.url for p in picks if p} == set(urls)  # idle backends are used in turn
    busy = bal.backend("http://a")
    busy.outstanding = 5
    bal.backend("http://b").outstanding = 1
    chosen = bal.pick(urls)
    assert chosen is not None
    assert chosen.url == "http://c"
    assert bal.pick(urls, exclude=urls) is None


def test_ejection_backs_off_and_recovers() -> None:
    now = [100.0]
    bal = Balancer(eject_base=1.0, eject_max=4.0, clock=lambda: now[0])
    urls = ["http://bad", "http://good"]
    bad = bal.backend("http://bad")
    backoffs = []
    for _ in range(4):
        backoffs.append(bal.failure(bad, urls, at_once=True))
        now[0] += 10  # the ejection ran out; the backend failed again
    assert backoffs == [1.0, 2.0, 4.0, 4.0]
    bal.failure(bad, urls, at_once=True)
    picked = {bal.pick(urls).url for _ in range(5)}  # type: ignore[union-attr]
    assert picked == {"http://good"}
    only = bal.pick(["http://bad"])  # all ejected: try anyway
    assert only is bad
    now[0] += 5
    bal.success(bad)
    assert bad.healthy(now[0])
    assert bad.failures == bad.ejections == 0


def test_ejection_needs_consecutive_failures_and_keeps_half_the_pool() -> None:
    bal = Balancer(consecutive=5, max_ejected_percent=50, clock=lambda: 100.0)
    urls = [f"http://b{i}" for i in range(4)]
    b0, b1, b2 = (bal.backend(u) for u in urls[:3])
    assert [bal.failure(b0, urls) for _ in range(5)] == [None, None, None, None, 1.0]
    bal.success(b1)
    assert [bal.failure(b1, urls) for _ in range(5)][-1] == 1.0
    assert [bal.failure(b2, urls) for _ in range(9)] == [None] * 9  # 2 of 4 are out: no more
    assert bal.failure(b2, urls, at_once=True) is None
    assert sum(1 for u in urls if not bal.backend(u).healthy(100.0)) == 2
    lone = Balancer(clock=lambda: 100.0)  # one endpoint: it may still be ejected
    solo = lone.backend("http://solo")
    assert lone.failure(solo, ["http://solo"], at_once=True) == 1.0


def test_prefix_affinity_is_sticky_but_bounded() -> None:
    bal = Balancer(load_factor=1.25)
    urls = [f"http://b{i}" for i in range(4)]
    key = b"system prompt"
    first = bal.pick(urls, affinity_key=key)
    assert first is not None
    assert all(bal.pick(urls, affinity_key=key) is first for _ in range(5))
    first.outstanding = 10  # far over its fair share: spill to the next on the ring
    spill = bal.pick(urls, affinity_key=key)
    assert spill is not None
    assert spill is not first


def test_keys() -> None:
    keys = StaticKeySource.from_mapping({"sk-a": ["m"], "sk-all": ["*"]})
    grant = keys.lookup("sk-a")
    assert grant is not None
    assert grant.allows("m", "ml")
    assert not grant.allows("n", "ml")
    all_grant = keys.lookup("sk-all")
    assert all_grant is not None
    assert all_grant.allows("anything", "ml")
    assert keys.lookup("sk-b") is None
    assert extract_key({b"authorization": b"Bearer sk-a"}) == "sk-a"
    assert extract_key({b"x-api-key": b"sk-x", b"authorization": b"Bearer sk-a"}) == "sk-x"
    assert extract_key({b"authorization": b"Basic abc"}) is None


def test_key_file(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text("keys:\n  - {key: sk-1, name: team, models: [m]}\n  - {key: sk-2}\n")
    keys = StaticKeySource.from_file(path)
    assert keys.lookup("sk-1") is not None
    grant2 = keys.lookup("sk-2")
    assert grant2 is not None
    assert grant2.models is None
    path.write_text("keys:\n  - {models: [m]}\n")
    with pytest.raises(ValueError, match=r"keys\[0\] needs a non-empty 'key'"):
        StaticKeySource.from_file(path)


def _wl(
    ns: str, name: str, served: str, aliases: tuple[str, ...] = (), created: int | None = None
) -> Workload:
    when = (
        dt.datetime(2026, 1, 1, tzinfo=dt.UTC) + dt.timedelta(seconds=created)
        if created is not None
        else None
    )
    return Workload(namespace=ns, name=name, served_name=served, aliases=aliases, created=when)


def test_the_oldest_claim_keeps_a_contested_name() -> None:
    """Issue 15: a collision affects only the contested name; the rule is plan/names.py's."""
    old = _wl("b", "old", "llama", aliases=("shared",), created=0)
    new = _wl("a", "new", "qwen", aliases=("llama",), created=10)  # claims the older one's name
    rival = _wl("c", "rival", "shared", created=5)  # a served name does not beat an older alias
    other = _wl("d", "other", "mistral", created=20)
    table = RoutingTable.build([new, old, rival, other], 1)  # order does not matter
    assert table.lookup("llama") is old
    assert table.lookup("qwen") is new  # the loser keeps its other names
    assert table.lookup("shared") is old
    assert table.lookup("mistral") is other
    assert table.lookup("rival") is None
    assert {(c.model, c.winner, c.loser) for c in table.conflicts} == {
        ("llama", "b/old", "a/new"),
        ("shared", "b/old", "c/rival"),
    }
    # Equal (or missing) timestamps: namespace, then name, decide.
    tie = RoutingTable.build([_wl("z", "a", "m"), _wl("y", "b", "m")], 2)
    assert tie.lookup("m") is not None
    assert tie.lookup("m").key == "y/b"  # type: ignore[union-attr]
    # One pure function decides for the gateway and the operator's planner.
    claims = [old.claim(), new.claim(), rival.claim()]

    def holders(model: str) -> list[names.Claim]:
        return [c for c in claims if model in c.names]

    lost = names.conflicts(rival.claim(), holders)
    assert [(c.model, c.winner.key, c.alias) for c in lost] == [("shared", "b/old", False)]
    assert "served name 'shared' is served by b/old" in lost[0].describe()
    assert names.conflicts(old.claim(), holders) == []


async def test_a_conflict_in_a_routing_file_does_not_freeze_the_table(tmp_path: Path) -> None:
    path = tmp_path / "routes.yaml"
    path.write_text("workloads: [{name: a, servedName: m}, {name: b, servedName: x, aliases: [m]}]\n")
    source = StaticRoutingSource(path, poll_interval=3600)
    await source.start()  # before: RoutingError, nothing routed
    try:
        table = source.snapshot()
        assert table.lookup("m") is not None
        assert table.lookup("m").name == "a"  # type: ignore[union-attr]
        assert table.lookup("x") is not None
        path.write_text(
            "workloads: [{name: a, servedName: m}, {name: b, servedName: x, aliases: [m]},\n"
            "  {name: c, servedName: y}]\n"
        )
        assert await source.reload() is True  # later changes are applied while the conflict lasts
        assert source.snapshot().lookup("y") is not None
    finally:
        await source.close()


def test_key_lookup_is_by_digest() -> None:
    table = DigestTable({f"sk-{i}": Grant(f"k{i}", None) for i in range(10_000)})
    assert len(table) == 10_000
    found = table.lookup("sk-9999")
    assert found is not None
    assert found.name == "k9999"
    assert table.lookup("sk-10000") is None
    assert table.lookup("") is None
    # Stored by digest, never by the key itself.
    assert all(isinstance(k, bytes) and len(k) == 32 for k in table._by_digest)
    merged = MergedKeySource(StaticKeySource.from_mapping({"sk-file": ["*"]}), table)
    assert merged.lookup("sk-file") is not None
    assert merged.lookup("sk-5") is not None
    assert merged.lookup("sk-none") is None
