"""``sparkrun-k8s run``: the pure parts. The name derived from a model, the spec built from the
options (``--set PATH=VALUE`` included, and what it refuses), the request printed once Ready, and
the progress display (cli/progress.py): the timeline's rows, the condition chosen, the cache line
(no rate or ETA from a tiny sample), the lines logged per change, the failure text, and control
characters from the objects neutralised; Ctrl-C (a real SIGINT) cancelling only what is guarded.
Against the testbed: tests/cli/test_run.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
from typing import Any

import pytest

from sparkrun_operator.cli import progress
from sparkrun_operator.cli.common import EXIT_USAGE, CliError
from sparkrun_operator.cli.interrupts import Interrupts
from sparkrun_operator.cli.progress import try_line
from sparkrun_operator.cli.run import apply_set, build_spec, derive_name, manifest

CREATED = "2026-01-02T03:00:00Z"


def _workload(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "chat", "namespace": "team-a", "generation": 1, "creationTimestamp": CREATED},
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B", "cacheRef": {"name": "qwen-cache"}}, "replicas": 1},
        "status": {"observedGeneration": 1, **status},
    }


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("Qwen/Qwen3-0.6B", "qwen3-0-6b"),
        ("meta-llama/Llama-3.1-8B-Instruct", "llama-3-1-8b-instruct"),
        ("/models/7b", "m-7b"),
        ("org/" + "x" * 80, "x" * 35),
        ("org/___", "workload"),
        ("org/Model--Name-", "model-name"),
    ],
)
def test_the_name_derived_from_a_model_is_a_workload_name(model: str, name: str) -> None:
    derived = derive_name(model)
    assert derived == name
    assert len(derived) <= 35
    assert derived[0].isalpha()
    assert derived[-1].isalnum()


def test_the_spec_from_the_options() -> None:
    spec = build_spec(
        model="Qwen/Qwen3-0.6B",
        recipe=None,
        served_name="chat",
        replicas=2,
        gpus=4,
        cluster="pool-a",
        sets=[
            "engine.maxModelLen=8192",
            "spec.engine.enableSleepMode=true",
            "scheduling.nodeSelector={a: b}",
        ],
    )
    assert spec == {
        "model": {"name": "Qwen/Qwen3-0.6B", "servedName": "chat"},
        "replicas": 2,
        "topology": {"gpusPerNode": 4, "tensorParallel": 4},
        "cluster": "pool-a",
        "engine": {"maxModelLen": 8192, "enableSleepMode": True},
        "scheduling": {"nodeSelector": {"a": "b"}},
    }
    recipe = build_spec(model=None, recipe="qwen-recipe")
    assert recipe == {"recipe": {"name": "qwen-recipe"}}
    assert manifest("chat", "team-a", recipe)["metadata"] == {"name": "chat", "namespace": "team-a"}


@pytest.mark.parametrize(
    "assignment",
    [
        "engine.maxModelLen",
        "=3",
        "engine..x=1",
        "engine.max-len=1",
        "a.b.c.d.e.f.g.h.i=1",
        "x=" + "y" * 5000,
        "x=[a",
    ],
)
def test_a_set_that_is_not_path_equals_yaml_is_a_usage_error(assignment: str) -> None:
    with pytest.raises(CliError) as caught:
        apply_set({}, assignment)
    assert caught.value.code == EXIT_USAGE


def test_served_name_with_a_recipe_is_a_usage_error() -> None:
    with pytest.raises(CliError) as caught:
        build_spec(model=None, recipe="r", served_name="x")
    assert caught.value.code == EXIT_USAGE


def test_the_url_in_the_request_is_one_shell_word() -> None:
    """The URL comes from the cluster (a Service's address, a Gateway's listener): quoted, so a
    pasted line cannot run what the URL holds."""
    hostile = "http://gw.example:80/$(touch x);id"
    words = shlex.split(try_line(hostile, "chat"))
    assert words[4] == hostile + "/v1/chat/completions"
    assert "'" + hostile in try_line(hostile, "chat")
    proxied = shlex.split(try_line("https://api:6443", "chat", proxy_path="/api/v1/x y;id/proxy"))
    assert proxied[6] == "/api/v1/x y;id/proxy/v1/chat/completions"


def test_the_request_printed_is_a_shell_line_with_the_served_name() -> None:
    line = try_line("http://10.0.0.7:8000", "it's chat")
    words = shlex.split(line)
    # NB: -w '\n' ends the answer with a newline (the next prompt starts on a line of its own)
    assert words[:5] == ["curl", "-sS", "-w", "\\n", "http://10.0.0.7:8000/v1/chat/completions"]
    assert json.loads(words[-1])["model"] == "it's chat"
    proxied = shlex.split(
        try_line("https://api:6443/x", "chat", proxy_path="/api/v1/namespaces/s/services/g:http/proxy")
    )
    assert json.loads(proxied[1])["model"] == "chat"
    assert proxied[3:] == [
        "kubectl",
        "create",
        "--raw",
        "/api/v1/namespaces/s/services/g:http/proxy/v1/chat/completions",
        "-f",
        "-",
    ]


def test_the_timeline_marks_reached_stages_and_the_current_one() -> None:
    obj = _workload(
        phase="Starting",
        startup=[
            {"stage": "accepted", "time": "2026-01-02T03:00:01Z"},
            {"stage": "cacheReady", "time": "2026-01-02T03:00:02Z"},
            {"stage": "scheduled", "time": "2026-01-02T03:01:05Z", "replica": 0},
            {
                "stage": "preExec",
                "time": "2026-01-02T03:01:06Z",
                "replica": 0,
                "outcome": "failed",
                "message": "x\x1b[2J",
            },
        ],
        conditions=[{"type": "Ready", "status": "False", "reason": "Starting", "message": "pods starting"}],
    )
    rows = {row.stage: row for row in progress.timeline(obj)}
    assert [r.mark for r in progress.timeline(obj)] == ["✓", "✓", "✓", "▸", "·", "✗"]
    assert rows["scheduled"].offset == 65
    assert rows["scheduled"].replicas == 1
    assert rows["preExec"].note == "x?[2J"
    snap = progress.snapshot(obj)
    assert not snap.ready
    assert not snap.failed
    assert snap.condition == "Starting: pods starting"
    text = progress.block(snap, 70)
    assert "✓ scheduled     +1m05s" in text
    assert "▸ running" in text
    assert "phase Starting: Starting: pods starting" in text
    assert "elapsed 1m10s" in text


def test_a_stage_passed_without_being_reached_is_skipped() -> None:
    obj = _workload(
        startup=[
            {"stage": "accepted", "time": CREATED},
            {"stage": "scheduled", "time": CREATED, "replica": 0},
        ]
    )
    assert [(r.stage, r.mark) for r in progress.timeline(obj)] == [
        ("accepted", "✓"),
        ("cacheReady", "-"),
        ("scheduled", "✓"),
        ("running", "▸"),
        ("ready", "·"),
    ]
    assert [r.mark for r in progress.timeline(_workload())] == ["▸", "·", "·", "·", "·"]


def test_the_condition_shown() -> None:
    ready = _workload(phase="Running", conditions=[{"type": "Ready", "status": "True", "reason": "Ready"}])
    assert progress.condition_line(ready) == "Ready"
    assert progress.snapshot(ready).ready
    stale = _workload(conditions=[{"type": "Ready", "status": "True"}])
    stale["metadata"]["generation"] = 2
    assert not progress.is_ready(stale)
    degraded = _workload(
        phase="Degraded",
        conditions=[
            {"type": "Ready", "status": "False", "reason": "Starting"},
            {"type": "Degraded", "status": "True", "reason": "GroupFailed", "message": "rank 1 exited"},
        ],
    )
    assert progress.condition_line(degraded) == "GroupFailed: rank 1 exited"
    assert progress.snapshot(degraded).failed
    assert progress.condition_line(_workload()) == "waiting for the operator"


def test_the_cache_line_shows_a_rate_only_after_a_real_sample() -> None:
    cache: dict[str, Any] = {
        "metadata": {"name": "qwen-cache"},
        "status": {
            "phase": "Downloading",
            "progress": {
                "bytesDone": 1536 * 1024,
                "bytesTotal": 3 * 1024 * 1024,
                "bytesPerSecond": 0,
                "etaSeconds": 15686,
            },
        },
    }
    assert progress.cache_line(cache) == "cache qwen-cache: Downloading 50% (1.5 MiB of 3.0 MiB)"
    cache["status"]["progress"] = {
        "bytesDone": 512 * 1024 * 1024,
        "bytesTotal": 2048 * 1024 * 1024,
        "filesDone": 1,
        "filesTotal": 4,
        "bytesPerSecond": 50 * 1024 * 1024,
        "etaSeconds": 30,
    }
    assert progress.cache_line(cache) == (
        "cache qwen-cache: Downloading 25% (512.0 MiB of 2.0 GiB), 1/4 files, 50.0 MiB/s, ETA 30s"
    )
    # a trickle (an older downloader's first sample): its rate, but no ETA below rate.MIN_RATE
    cache["status"]["progress"].update(bytesPerSecond=500, etaSeconds=999_999)
    assert progress.cache_line(cache) == (
        "cache qwen-cache: Downloading 25% (512.0 MiB of 2.0 GiB), 1/4 files, 500 B/s"
    )
    # below 1 B/s: the first sample's noise the operator's status message leaves out (rate.reported)
    cache["status"]["progress"].update(bytesPerSecond=0.5, etaSeconds=15686)
    assert progress.cache_line(cache) == "cache qwen-cache: Downloading 25% (512.0 MiB of 2.0 GiB), 1/4 files"
    waiting = _workload(conditions=[{"type": "CacheReady", "status": "False"}])
    assert progress.cache_name(waiting) == "qwen-cache"
    waiting["status"]["conditions"][0]["status"] = "True"
    assert progress.cache_name(waiting) is None


def test_changes_log_each_stage_once_and_each_new_condition() -> None:
    first = progress.snapshot(_workload(phase="Pending", startup=[{"stage": "accepted", "time": CREATED}]))
    assert progress.changes(None, first) == ["✓ accepted      +0s", "phase Pending: waiting for the operator"]
    assert progress.changes(first, first) == []
    second = progress.snapshot(
        _workload(
            phase="Starting",
            startup=[{"stage": "accepted", "time": CREATED}, {"stage": "cacheReady", "time": CREATED}],
        )
    )
    assert progress.changes(first, second) == [
        "✓ cacheReady    +0s",
        "phase Starting: waiting for the operator",
    ]


def test_the_failure_text() -> None:
    obj = _workload(
        phase="Failed",
        lastFailure={
            "reason": "Error",
            "message": "engine exited\x07",
            "time": CREATED,
            "replica": 0,
            "role": "worker",
            "rank": 1,
            "exitCode": 3,
            "object": "Pod/chat-0-abcde-worker-0-0",
            "log": ["CUDA out of memory", "bye\x1b]0;x"],
        },
    )
    assert progress.failure_text(obj).splitlines() == [
        "Error (replica 0, worker rank 1, Pod/chat-0-abcde-worker-0-0, exit code 3)",
        "engine exited?",
        "  | CUDA out of memory",
        "  | bye?]0;x",
    ]
    assert (
        progress.failure_text(_workload(conditions=[{"type": "Ready", "status": "False", "reason": "X"}]))
        == "X"
    )


@pytest.mark.parametrize(("seconds", "text"), [(0, "0s"), (59.9, "59s"), (61, "1m01s"), (7300, "2h01m")])
def test_durations(seconds: float, text: str) -> None:
    assert progress.duration(seconds) == text


def test_each_ctrl_c_cancels_what_is_guarded_then_and_nothing_else() -> None:
    async def scenario() -> list[object]:
        interrupts = Interrupts()
        interrupts.install()
        seen: list[object] = []
        try:
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
            seen.append(await interrupts.guard(asyncio.sleep(30, "waited")))
            loop.call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
            seen.append(await asyncio.sleep(0.3, "unguarded"))  # a SIGINT here is only counted
            seen.append(interrupts.count)
            loop.call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
            seen.append(await interrupts.guard(asyncio.sleep(30, "cleaned")))
            seen.append(await interrupts.guard(asyncio.sleep(0, "done")))
            seen.append(interrupts.count)
        finally:
            interrupts.uninstall()
        return seen

    assert asyncio.run(scenario()) == [None, "unguarded", 2, None, "done", 3]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
