"""The completeness marker of ``/v1/streams/logs`` (``shim/streams.py``, ``shim/logends.py``).

The shim's log producer runs against an in-memory pod log API: each case scripts what the read of
a source returns (lines, an error, a wait for a signal) and what the pod looks like once the read
ended, and checks that the stream's last frame is the ``completeness`` marker with the verdict
sparkwing's log completeness asks for. The testbed tests (``tests/shim/test_log_completeness.py``)
read real pods; these cover each reason and bound deterministically.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from sparkrun_operator.k8s import errors as k8s_errors
from sparkrun_operator.k8s.resources import PODS
from sparkrun_operator.ops.errors import Forbidden, Invalid
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.shim import logends
from sparkrun_operator.shim.streams import Streams

NS = "ns"


def _pod(name: str, *, uid: str = "u1", state: str = "terminated", restarts: int = 0, **meta: Any) -> Any:
    states = {
        "terminated": {"terminated": {"exitCode": 0}},
        "running": {"running": {}},
        "waiting": {"waiting": {}},
    }
    return {
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "labels": {"sparkrun.dev/workload": "w", "sparkrun.dev/role": "leader"},
            **meta,
        },
        "spec": {"nodeName": "n1", "containers": [{"name": "engine"}]},
        "status": {
            "containerStatuses": [{"name": "engine", "state": states[state], "restartCount": restarts}]
        },
    }


class FakeKube:
    """The calls the log stream makes: list workloads and pods, read a pod, stream a pod's log."""

    def __init__(self, pods: list[Any]) -> None:
        self.pods = {p["metadata"]["name"]: p for p in pods}
        #: per pod: the lines its log read yields, then what ends it (None: EOF, or an exception)
        self.logs: dict[str, tuple[list[bytes], BaseException | None]] = {}
        #: per pod: the pod as read after its log ended (missing key: unchanged; None: gone)
        self.after: dict[str, Any] = {}
        #: per pod: an event the read waits on after its lines (a following read)
        self.hold: dict[str, asyncio.Event] = {}
        self.queries: list[dict[str, Any]] = []
        self.ended: set[str] = set()

    async def list(self, resource: Any, namespace: str, *, label_selector: str | None = None) -> list[Any]:
        return list(self.pods.values()) if resource is PODS else []

    async def get(self, resource: Any, name: str, namespace: str) -> Any:
        if resource is not PODS:
            return None
        if name in self.ended and name in self.after:
            found = self.after[name]
            if isinstance(found, list):  # one per read, the last one repeated
                found = found.pop(0) if len(found) > 1 else found[0]
            if isinstance(found, BaseException):
                raise found
            return found
        return self.pods.get(name)

    async def stream_lines(self, path: str, *, query: dict[str, Any]) -> AsyncIterator[bytes]:
        name = path.split("/")[-2]
        self.queries.append(query)
        lines, end = self.logs.get(name, ([], None))
        for line in lines:
            yield line
        if name in self.hold:
            await self.hold[name].wait()
        self.ended.add(name)
        if end is not None:
            raise end


async def _allowed() -> None:
    return None


def _frames(chunks: list[bytes]) -> list[dict[str, Any]]:
    out = []
    for chunk in chunks:
        for line in chunk.decode().splitlines():
            if line.startswith("data: "):
                out.append(json.loads(line[6:]))
    return out


async def _collect(
    kube: FakeKube,
    params: dict[str, str],
    *,
    recheck: Callable[[], Any] = _allowed,
    settle: float = 0.3,
) -> list[dict[str, Any]]:
    streams = Streams(rest=kube, settings=Settings(namespace=NS))  # type: ignore[arg-type]
    streams.settle = settle
    chunks = []
    async for chunk in streams.logs(params, recheck):
        chunks.append(chunk)
    return _frames(chunks)


def _marker(frames: list[dict[str, Any]]) -> dict[str, Any]:
    assert frames, "no frames"
    last = frames[-1]
    assert last["type"] == "completeness", frames
    assert [f for f in frames if f["type"] == "completeness"] == [last]
    return last


def test_a_terminated_container_read_to_the_end_is_complete() -> None:
    kube = FakeKube([_pod("p")])
    kube.logs["p"] = ([b"one\n", b"two\n"], None)
    frames = asyncio.run(_collect(kube, {}))
    assert [f["text"] for f in frames if f["type"] == "log"] == ["one", "two"]
    marker = _marker(frames)
    assert marker == {
        "type": "completeness",
        "status": "complete",
        "complete": True,
        "truncated": False,
        "sources": [{"source_id": "ns/p/engine", "status": "complete", "lines": 2}],
        "incomplete": [],
        "truncations": [],
    }


def test_no_source_is_a_complete_stream_of_nothing() -> None:
    marker = _marker(asyncio.run(_collect(FakeKube([]), {})))
    assert (marker["status"], marker["sources"]) == ("complete", [])


@pytest.mark.parametrize(
    ("after", "detail"),
    [
        (None, "gone"),
        (_pod("p", uid="u2"), "another pod of the name"),
        (_pod("p", state="running", deletionTimestamp="2026-01-01T00:00:00Z"), "terminating"),
    ],
)
def test_a_pod_deleted_while_followed_is_incomplete(after: Any, detail: str) -> None:
    kube = FakeKube([_pod("p", state="running")])
    kube.logs["p"] = ([b"before\n"], None)
    kube.after["p"] = after
    marker = _marker(asyncio.run(_collect(kube, {"follow": "true"})))
    assert marker["status"] == "incomplete", detail
    assert [(i["source_id"], i["reason"]) for i in marker["incomplete"]] == [("ns/p/engine", "pod_deleted")]
    assert marker["sources"] == [{"source_id": "ns/p/engine", "status": "incomplete", "lines": 1}]


def test_a_finished_log_read_to_its_end_is_complete_whatever_became_of_the_pod() -> None:
    for after in (None, _pod("p", deletionTimestamp="2026-01-01T00:00:00Z")):
        kube = FakeKube([_pod("p")])  # NB: terminated when the stream began
        kube.logs["p"] = ([b"all\n"], None)
        kube.after["p"] = after
        assert _marker(asyncio.run(_collect(kube, {})))["status"] == "complete", after
    kube = FakeKube([_pod("p")])
    kube.logs["p"] = ([b"all\n"], None)
    kube.after["p"] = _pod("p", state="running", restarts=1)
    assert _marker(asyncio.run(_collect(kube, {})))["incomplete"][0]["reason"] == "container_restarted"


def test_a_finished_log_of_a_pod_replaced_by_another_of_its_name_is_not_complete() -> None:
    # NB: the read by name may have carried the new pod's log as the old source's: never complete
    kube = FakeKube([_pod("p")])  # terminated when the stream began
    kube.logs["p"] = ([b"whose?\n"], None)
    kube.after["p"] = _pod("p", uid="u2")  # deleted and recreated with the same name
    marker = _marker(asyncio.run(_collect(kube, {})))
    assert marker["status"] == "incomplete"
    assert [(i["source_id"], i["reason"]) for i in marker["incomplete"]] == [("ns/p/engine", "pod_deleted")]


def test_running_containers_are_incomplete_with_the_reason_of_the_read() -> None:
    kube = FakeKube([_pod("p", state="running")])
    kube.logs["p"] = ([b"x\n"], None)
    assert _marker(asyncio.run(_collect(kube, {})))["incomplete"][0]["reason"] == "running"
    assert _marker(asyncio.run(_collect(kube, {"follow": "true"})))["incomplete"][0]["reason"] == "stream_cut"
    kube.after["p"] = _pod("p", state="running", restarts=1)
    kube.ended.add("p")
    assert (
        _marker(asyncio.run(_collect(kube, {"follow": "true"})))["incomplete"][0]["reason"]
        == "container_restarted"
    )


def test_a_read_that_does_not_follow_is_complete_only_if_the_container_had_terminated_before() -> None:
    # NB: it ended, then the container wrote more and exited before its pod was read: not complete
    kube = FakeKube([_pod("p", state="running")])
    kube.logs["p"] = ([b"early\n"], None)
    kube.after["p"] = _pod("p")  # terminated by the time the read ended
    marker = _marker(asyncio.run(_collect(kube, {})))
    assert [i["reason"] for i in marker["incomplete"]] == ["running"]


def test_a_followed_end_waits_for_the_status_to_say_terminated() -> None:
    """The log of a container that exited ends before its pod's status says so: not a cut."""
    kube = FakeKube([_pod("p", state="running")])
    kube.logs["p"] = ([b"last\n"], None)
    kube.after["p"] = [_pod("p", state="running"), _pod("p", state="running"), _pod("p")]
    marker = _marker(asyncio.run(_collect(kube, {"follow": "true"}, settle=30)))
    assert (marker["status"], marker["incomplete"]) == ("complete", [])


def test_a_read_error_and_an_unreadable_pod_are_incomplete() -> None:
    kube = FakeKube([_pod("p")])
    kube.logs["p"] = ([b"x\n"], k8s_errors.KubeUnavailable("reset", status=503))
    frames = asyncio.run(_collect(kube, {}))
    assert [f["type"] for f in frames] == ["log", "error", "completeness"]
    assert frames[-1]["incomplete"][0]["reason"] == "read_error"
    assert "reset" in frames[-1]["incomplete"][0]["detail"]
    kube = FakeKube([_pod("p")])
    kube.after["p"] = k8s_errors.KubeUnavailable("apiserver down", status=503)
    assert _marker(asyncio.run(_collect(kube, {})))["incomplete"][0]["reason"] == "status_unknown"


def test_bounds_truncate_when_reached_and_only_then() -> None:
    kube = FakeKube([_pod("p")])
    kube.logs["p"] = ([b"a\n", b"b\n"], None)
    marker = _marker(asyncio.run(_collect(kube, {"tail": "2"})))
    assert (marker["status"], marker["truncated"], marker["complete"]) == ("truncated", True, False)
    assert marker["truncations"] == [{"source_id": "ns/p/engine", "bound": "tail", "limit": 2}]
    assert _marker(asyncio.run(_collect(kube, {"tail": "3"})))["status"] == "complete"
    marker = _marker(asyncio.run(_collect(kube, {"limit_bytes": "4"})))
    assert marker["truncations"] == [{"source_id": "ns/p/engine", "bound": "limit_bytes", "limit": 4}]
    assert kube.queries[-1]["limitBytes"] == 4
    assert _marker(asyncio.run(_collect(kube, {"limit_bytes": "5"})))["status"] == "complete"
    # A read that stopped at its byte bound while the container runs is truncated, not cut.
    kube = FakeKube([_pod("p", state="running")])
    kube.logs["p"] = ([b"abcd"], None)
    marker = _marker(asyncio.run(_collect(kube, {"limit_bytes": "4", "follow": "true"})))
    assert (marker["status"], marker["incomplete"]) == ("truncated", [])
    with pytest.raises(Invalid):
        asyncio.run(_collect(kube, {"limit_bytes": "0"}))
    # A line carried in pieces (over the shim's 1 MiB) counts once against the tail.
    kube = FakeKube([_pod("p")])
    kube.logs["p"] = ([b"x" * 10, b"y" * 10, b"z\n", b"last"], None)
    marker = _marker(asyncio.run(_collect(kube, {"tail": "3"})))
    assert (marker["status"], marker["sources"][0]["lines"]) == ("complete", 4)
    assert _marker(asyncio.run(_collect(kube, {"tail": "2"})))["truncations"][0]["bound"] == "tail"


def test_incomplete_wins_over_truncated_across_sources() -> None:
    kube = FakeKube([_pod("a"), _pod("b", uid="u9", state="running")])
    kube.logs["a"] = ([b"1\n"], None)
    kube.logs["b"] = ([b"1\n"], None)
    marker = _marker(asyncio.run(_collect(kube, {"tail": "1"})))
    assert marker["status"] == "incomplete"
    assert {s["source_id"]: s["status"] for s in marker["sources"]} == {
        "ns/a/engine": "truncated",
        "ns/b/engine": "incomplete",
    }
    assert len(marker["truncations"]) == 2


def test_lines_dropped_under_backpressure_make_the_source_incomplete() -> None:
    kube = FakeKube([_pod("p")])
    kube.logs["p"] = ([f"{i}\n".encode() for i in range(600)], None)

    # NB: the fake read never suspends: it fills the queue (256 lines) before the stream sends one
    frames = asyncio.run(_collect(kube, {}))
    marker = _marker(frames)
    dropped = sum(f["dropped"] for f in frames if f["type"] == "gap")
    carried = len([f for f in frames if f["type"] == "log"])
    assert dropped > 0
    assert carried + dropped == 600
    assert marker["sources"][0]["lines"] == carried
    assert [i["reason"] for i in marker["incomplete"]] == ["dropped"]


def test_a_stream_the_shim_closes_says_which_sources_it_cut() -> None:
    kube = FakeKube([_pod("done"), _pod("live", uid="u7", state="running")])
    kube.logs["done"] = ([b"d\n"], None)
    kube.logs["live"] = ([b"l\n"], None)
    kube.hold["live"] = asyncio.Event()  # NB: never set: this read follows until the stream ends
    calls = 0

    async def revoked() -> None:
        nonlocal calls
        calls += 1
        raise Forbidden("Insufficient permission")

    async def run() -> list[dict[str, Any]]:
        streams = Streams(rest=kube, settings=Settings(namespace=NS))  # type: ignore[arg-type]
        streams.heartbeat = 0.2  # NB: the first quiet spell checks the caller again
        chunks = []
        async for chunk in streams.logs({"follow": "true"}, revoked):
            chunks.append(chunk)
        return _frames(chunks)

    frames = asyncio.run(run())
    assert calls == 1
    assert frames[-2]["type"] == "error"
    assert frames[-2]["detail"] == "Insufficient permission"
    marker = _marker(frames)
    assert {s["source_id"]: s["status"] for s in marker["sources"]} == {
        "ns/done/engine": "complete",
        "ns/live/engine": "incomplete",
    }
    assert [(i["source_id"], i["reason"]) for i in marker["incomplete"]] == [
        ("ns/live/engine", "stream_closed")
    ]


def test_every_reason_and_bound_is_documented() -> None:
    text = (__import__("pathlib").Path(__file__).parents[2] / "docs" / "daemon-api.md").read_text()
    for reason in logends.REASONS:
        assert f"`{reason}`" in text, reason
    for bound in logends.BOUNDS:
        assert f"`{bound}`" in text, bound
