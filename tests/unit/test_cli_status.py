"""The pure parts of ``sparkrun-k8s status``: the shared text helpers (``cli/view.py``: ages,
the one-line condition summary, the startup timeline, sizes), the rows each kind becomes, and the
text a person reads (sections left out when empty, notes, ``N more``, ``-A``, control characters)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparkrun_operator.cli import common, status, view

NOW = dt.datetime(2026, 1, 2, 12, 0, 0, tzinfo=dt.UTC)


def _cond(type_: str, state: str, reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": type_, "status": state, "reason": reason, "message": message}


def test_age_and_duration() -> None:
    assert view.age("2026-01-02T11:59:15Z", NOW) == "45s"
    assert view.age("2026-01-02T11:55:00Z", NOW) == "5m"
    assert view.age("2026-01-02T08:48:00Z", NOW) == "3h12m"
    assert view.age("2026-01-01T00:00:00Z", NOW) == "36h"
    assert view.age("2025-12-28T12:00:00.5Z", NOW) == "4d"
    assert view.age("2026-01-02T12:00:10Z", NOW) == "0s"  # a clock ahead never goes negative
    assert view.age(None, NOW) == ""
    assert view.age("yesterday", NOW) == ""
    assert view.age("9" * 100) == ""


def test_condition_summary_picks_what_a_person_needs() -> None:
    assert view.condition_summary([]) == ""
    assert view.condition_summary(None) == ""
    assert view.condition_summary([_cond("Ready", "True", "AllReplicasReady")]) == "Ready"
    degraded = [_cond("Ready", "True"), _cond("Degraded", "True", "GroupRestarting", "replica 0 restarts")]
    assert view.condition_summary(degraded) == "Degraded: GroupRestarting: replica 0 restarts"
    waiting = [
        _cond("Ready", "False", "WaitingForCache", "cache qwen is Downloading"),
        _cond("Progressing", "True", "Creating"),
        _cond("CacheReady", "False", "WaitingForCache", "cache qwen is Downloading"),
    ]
    assert view.condition_summary(waiting) == "CacheReady: WaitingForCache: cache qwen is Downloading"
    creating = [_cond("Ready", "False", "ReplicasNotReady"), _cond("Progressing", "True", "Creating")]
    assert view.condition_summary(creating) == "Progressing: Creating"
    assert view.condition_summary([_cond("Ready", "False", "Stopped")]) == "Not ready: Stopped"
    assert view.condition_summary([_cond("Complete", "True", "Done")]) == "Complete"
    # a tenant's message: one line, control characters replaced, clipped
    hostile = [_cond("Ready", "False", "X\x1b[2J", "a" * 500 + "\nsecond line")]
    summary = view.condition_summary(hostile)
    assert "\x1b" not in summary
    assert "second" not in summary
    assert summary.endswith("...")
    assert len(summary) < 200
    # garbage in conditions is ignored, never raised on
    assert view.condition_summary([None, 3, {"type": 5}, {"status": "True"}]) == ""


def test_startup_timeline_sorted_and_printable() -> None:
    status_ = {
        "startup": [
            {"stage": "ready", "time": "2026-01-02T11:00:09Z", "replica": 0},
            {"stage": "accepted", "time": "2026-01-02T11:00:00Z"},
            {
                "stage": "preExec",
                "time": "2026-01-02T11:00:05Z",
                "replica": 0,
                "outcome": "failed",
                "message": "exit 1\x07",
            },
            {"stage": "scheduled", "time": "not a time", "replica": True},
            "junk",
        ]
    }
    timeline = view.startup_timeline(status_)
    assert [row[0] for row in timeline] == ["accepted", "preExec", "ready", "scheduled"]
    assert timeline[1] == ("preExec", "2026-01-02T11:00:05Z", 0, "failed", "exit 1?")
    assert timeline[3][2] is None  # a boolean is not a replica index
    assert view.startup_timeline(None) == []
    assert view.startup_timeline({"startup": "x"}) == []
    assert view.since("2026-01-02T11:00:00Z", "2026-01-02T11:00:09Z") == "+9s"
    assert view.since("", "2026-01-02T11:00:09Z") == ""


def test_size() -> None:
    assert view.size(512) == "512 B"
    assert view.size(1536) == "1.5 KiB"
    assert view.size(3 * 1024**3) == "3.0 GiB"
    assert view.size(None) == ""
    assert view.size(-1) == ""
    assert view.size(True) == ""


def _workload(name: str, namespace: str = "team-a", **status_: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace, "creationTimestamp": "2026-01-02T11:55:00Z"},
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}, "replicas": 2},
        "status": status_,
    }


def _data(**sections: Any) -> dict[str, Any]:
    parsed = {name: status.Section(**section) for name, section in sections.items()}
    for name, _kind in status.SECTIONS:
        parsed.setdefault(name, status.Section())
    return status.snapshot(parsed)


def test_rows_have_stable_fields() -> None:
    row = status.workload_row(
        _workload(
            "chat",
            phase="Starting",
            readyReplicas=1,
            model={"name": "Qwen/Qwen3-0.6B", "servedName": "chat-served"},
            conditions=[_cond("Ready", "False", "ReplicasNotReady"), _cond("Progressing", "True", "Scaling")],
            lastFailure={"reason": "OOMKilled", "time": "2026-01-02T11:58:00Z", "message": "x"},
        )
    )
    assert row == {
        "namespace": "team-a",
        "name": "chat",
        "phase": "Starting",
        "ready": False,
        "readyReplicas": 1,
        "replicas": 2,
        "served": "chat-served",
        "model": "Qwen/Qwen3-0.6B",
        "workloadId": "",
        "condition": "Progressing: Scaling",
        "lastFailure": {"reason": "OOMKilled", "time": "2026-01-02T11:58:00Z"},
        "created": "2026-01-02T11:55:00Z",
    }
    cache = status.cache_row(
        {
            "metadata": {"name": "qwen", "namespace": "m"},
            "spec": {"source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}}, "pinned": True},
            "status": {"phase": "Downloading", "progress": {"bytesDone": 256, "bytesTotal": 1024}},
        }
    )
    assert (cache["percent"], cache["bytes"], cache["pinned"], cache["model"]) == (
        25,
        1024,
        True,
        "Qwen/Qwen3-0.6B",
    )
    cluster = status.cluster_row(
        {
            "metadata": {"name": "gpus"},
            "spec": {"default": True},
            "status": {"totals": {"nodes": 3, "readyNodes": 2, "gpus": {"allocatable": 8, "free": 5}}},
        }
    )
    assert (cluster["readyNodes"], cluster["nodes"], cluster["gpusFree"], cluster["gpusAllocatable"]) == (
        2,
        3,
        5,
        8,
    )
    bench = status.benchmark_row(
        {
            "metadata": {"name": "b", "namespace": "m"},
            "spec": {"target": {"workloadRef": {"name": "chat"}}},
            "status": {
                "phase": "Succeeded",
                "headline": {"ttftP50Ms": 41.2, "outputTokensPerSecond": 99.5, "x": "y"},
            },
        }
    )
    assert bench["target"] == "chat"
    assert bench["headline"] == {
        "ttftP50Ms": 41.2,
        "outputTokensPerSecond": 99.5,
    }


def test_text_sections_notes_and_more() -> None:
    ready = _workload(
        "chat",
        phase="Running",
        readyReplicas=2,
        model={"name": "m", "servedName": "chat-served"},
        conditions=[_cond("Ready", "True")],
    )
    data = _data(
        workloads={"items": [ready], "more": 3},
        caches={"note": "you may not list modelcaches in namespace team-a"},
    )
    out = status.text(data, now=NOW)
    lines = out.splitlines()
    assert lines[0] == "InferenceWorkloads"
    assert lines[1].split() == ["NAME", "PHASE", "READY", "SERVED", "AGE", "CONDITION"]
    assert lines[2].split() == ["chat", "Running", "2/2", "chat-served", "5m", "Ready"]
    assert "... and 3 more (raise --limit)" in out
    assert "ModelCaches: you may not list modelcaches in namespace team-a" in out
    assert "InferenceClusters" not in out
    assert "InferenceBenchmarks" not in out
    assert all(line == line.rstrip() for line in lines)
    wide = status.text(data, all_namespaces=True, now=NOW).splitlines()
    assert wide[1].split()[:2] == ["NAMESPACE", "NAME"]
    assert wide[2].split()[:2] == ["team-a", "chat"]
    unknown = _data(workloads={"items": [ready], "more": -1})
    assert "... and more (raise --limit)" in status.text(unknown, now=NOW)
    assert status.text(_data(), now=NOW).startswith("nothing to show")


def test_text_shows_the_last_failure_of_a_workload_not_ready() -> None:
    broken = _workload(
        "chat",
        phase="Degraded",
        conditions=[_cond("Ready", "False", "ReplicasNotReady")],
        lastFailure={"reason": "OOMKilled", "time": "2026-01-02T11:58:00Z"},
    )
    out = status.text(_data(workloads={"items": [broken]}), now=NOW)
    assert "Not ready: ReplicasNotReady (last failure: OOMKilled, 2m ago)" in out


def test_tenant_text_is_made_printable() -> None:
    evil = _workload("chat", phase="Running", model={"name": "m", "servedName": "ok\x1b]0;pwned\x07"})
    out = status.text(common.printable(_data(workloads={"items": [evil]})), now=NOW)
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "ok?]0;pwned?" in out


def test_condition_summary_of_a_benchmark_on_its_way() -> None:
    running = [
        _cond("TargetReady", "True", "Ready"),
        _cond("Complete", "False", "Running", "scenario short running"),
    ]
    assert view.condition_summary(running) == "Running: scenario short running"
    assert view.condition_summary([_cond("Complete", "False")]) == "Not complete"
    assert view.condition_summary([_cond("Failed", "True", "TargetLost")]) == "Failed: TargetLost"


def test_rows_stay_one_line_in_a_narrow_terminal() -> None:
    long = (
        "StorageReady: ClaimNotFound: PersistentVolumeClaim models not found in namespace team-a; create it"
    )
    cache = {
        "metadata": {"name": "qwen3", "namespace": "team-a", "creationTimestamp": "2026-01-02T11:55:00Z"},
        "spec": {"source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}}, "pinned": True},
        "status": {
            "phase": "Pending",
            "conditions": [_cond("StorageReady", "False", "ClaimNotFound", long[29:])],
        },
    }
    narrow = status.text(_data(caches={"items": [cache]}), now=NOW, width=80).splitlines()
    assert narrow[2].startswith("qwen3  Pending  Qwen/Qwen3-0.6B")
    assert narrow[2].endswith("...")
    assert max(len(line) for line in narrow) <= 80
    assert len(narrow) == 4  # title, header, one row, blank
    wide = status.text(_data(caches={"items": [cache]}), now=NOW, width=200).splitlines()
    assert wide[2].endswith(long)
