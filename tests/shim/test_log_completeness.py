"""Log completeness of ``/v1/streams/logs`` on the testbed (issue 29; ``shim/logends.py``).

Real pods on the testbed's process nodes, labelled as a workload's pods of the daemon's
namespace, print numbered lines; a read principal streams them through the real shim (the pod
log API of kube-apiserver, proxied to the process node's kubelet API). Every stream ends with
the ``completeness`` frame:

- complete: a followed pod whose container exits while it is read (every line, in order);
- incomplete: a followed pod deleted mid-stream (``pod_deleted``), and a running pod read without
  following (``running``);
- truncated: ``tail`` (the last lines) and ``limit_bytes`` (the first bytes) of a finished pod.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.process.helpers import phase, pod, pod_spec, shell, wait_pod
from tests.shim.conftest import Daemon

pytestmark = pytest.mark.testbed


@pytest.fixture
def make_pod(daemon: Daemon) -> Iterator[Callable[[str], str]]:
    """``make_pod(script)``: a workload-labelled pod of the daemon's namespace running ``script``
    on a process node; returns its source id. Deleted after the test."""
    made: list[str] = []

    def make(script: str) -> str:
        name = "logs-" + secrets.token_hex(3)
        body = pod(name, pod_spec([shell("engine", script)]), labels={"sparkrun.dev/workload": name})
        body["metadata"]["namespace"] = daemon.namespace
        daemon.kube.create(body)
        made.append(name)
        return f"{daemon.namespace}/{name}/engine"

    yield make
    for name in made:
        daemon.kube.delete("v1", "Pod", name, namespace=daemon.namespace)


def _name(source_id: str) -> str:
    return source_id.split("/")[1]


def _stream(
    daemon: Daemon,
    params: dict[str, str],
    on_line: Callable[[dict[str, Any]], None] | None = None,
) -> list[dict[str, Any]]:
    """Every frame of one stream, read to its end (``on_line`` sees each ``log`` frame as it
    arrives). Fails if the stream does not end within two minutes."""
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    with daemon.http("reader") as client, client.stream("GET", "/v1/streams/logs", params=params) as answer:
        assert answer.status_code == 200, answer.read()
        for line in answer.iter_lines():
            assert time.monotonic() < deadline, frames[-5:]
            if not line.startswith("data: "):
                continue
            frames.append(json.loads(line[6:]))
            if frames[-1]["type"] == "log" and on_line is not None:
                on_line(frames[-1])
    return frames


def _marker(frames: list[dict[str, Any]]) -> dict[str, Any]:
    assert frames, "the stream sent nothing"
    last = frames[-1]
    assert last["type"] == "completeness", f"the last frame is not the marker: {frames[-3:]}"
    assert sum(f["type"] == "completeness" for f in frames) == 1
    return last


def _texts(frames: list[dict[str, Any]]) -> list[str]:
    return [f["text"] for f in frames if f["type"] == "log"]


def test_a_followed_pod_that_exits_is_complete(daemon: Daemon, make_pod: Callable[[str], str]) -> None:
    source = make_pod("echo line-1; sleep 1; echo line-2; sleep 1; echo line-3")
    wait_pod(daemon.kube, daemon.namespace, _name(source), lambda p: phase(p) in ("Running", "Succeeded"))
    frames = _stream(daemon, {"source_id": source, "follow": "true"})
    assert _texts(frames) == ["line-1", "line-2", "line-3"]
    assert _marker(frames) == {
        "type": "completeness",
        "status": "complete",
        "complete": True,
        "truncated": False,
        "sources": [{"source_id": source, "status": "complete", "lines": 3}],
        "incomplete": [],
        "truncations": [],
    }


def test_a_pod_deleted_mid_stream_is_incomplete(daemon: Daemon, make_pod: Callable[[str], str]) -> None:
    source = make_pod("echo before-delete; sleep 600")
    name = _name(source)
    wait_pod(daemon.kube, daemon.namespace, name, lambda p: phase(p) == "Running")
    deleted: list[str] = []

    def delete_once(frame: dict[str, Any]) -> None:
        if not deleted:
            assert frame["text"] == "before-delete"
            daemon.kube.delete("v1", "Pod", name, namespace=daemon.namespace)
            deleted.append(name)

    frames = _stream(daemon, {"source_id": source, "follow": "true"}, on_line=delete_once)
    assert deleted == [name]
    assert _texts(frames) == ["before-delete"]
    marker = _marker(frames)
    assert (marker["status"], marker["complete"]) == ("incomplete", False)
    assert [(i["source_id"], i["reason"]) for i in marker["incomplete"]] == [(source, "pod_deleted")]
    assert marker["sources"] == [{"source_id": source, "status": "incomplete", "lines": 1}]


def test_a_running_pod_read_without_following_is_incomplete(
    daemon: Daemon, make_pod: Callable[[str], str]
) -> None:
    source = make_pod("echo started; sleep 600")
    wait_pod(daemon.kube, daemon.namespace, _name(source), lambda p: phase(p) == "Running")
    frames: list[dict[str, Any]] = []
    deadline = time.monotonic() + 60
    while "started" not in _texts(frames):  # NB: the process may not have printed yet
        assert time.monotonic() < deadline, frames
        frames = _stream(daemon, {"source_id": source})
    marker = _marker(frames)
    assert marker["status"] == "incomplete"
    assert [(i["source_id"], i["reason"]) for i in marker["incomplete"]] == [(source, "running")]


def test_tail_and_limit_bytes_truncate_a_finished_pod(daemon: Daemon, make_pod: Callable[[str], str]) -> None:
    source = make_pod("for i in 1 2 3 4 5; do echo line-$i; done")
    wait_pod(daemon.kube, daemon.namespace, _name(source), lambda p: phase(p) == "Succeeded")

    frames = _stream(daemon, {"source_id": source, "tail": "2"})
    assert _texts(frames) == ["line-4", "line-5"]
    marker = _marker(frames)
    assert (marker["status"], marker["truncated"], marker["incomplete"]) == ("truncated", True, [])
    assert marker["truncations"] == [{"source_id": source, "bound": "tail", "limit": 2}]

    frames = _stream(daemon, {"source_id": source, "limit_bytes": "9"})  # "line-1\nli"
    assert _texts(frames) == ["line-1", "li"]
    marker = _marker(frames)
    assert marker["status"] == "truncated"
    assert marker["truncations"] == [{"source_id": source, "bound": "limit_bytes", "limit": 9}]

    # The whole log, unbounded (and a tail larger than it): complete.
    for params in ({"source_id": source}, {"source_id": source, "tail": "50"}):
        frames = _stream(daemon, params)
        assert _texts(frames) == [f"line-{i}" for i in range(1, 6)]
        assert _marker(frames)["status"] == "complete", params
