"""The pure parts of ``sparkrun-k8s describe``: the target (``KIND/NAME`` with kinds, plurals and
short names, or a workload's name), the object as shown (managedFields and the last-applied
annotation left out) and the text sections a person reads."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.api.resources import (
    DAEMON_JOB,
    INFERENCE_BENCHMARK,
    INFERENCE_CLUSTER,
    INFERENCE_WORKLOAD,
    MODEL_CACHE,
    RECIPE,
)
from sparkrun_operator.cli import common, describe

SPARKRUN_K8S = str(Path(sys.executable).with_name("sparkrun-k8s"))


@pytest.mark.parametrize(
    ("target", "kind", "name"),
    [
        ("chat", INFERENCE_WORKLOAD, "chat"),
        (
            "sparkrun_0123456789abcdef_0123456789ab",
            INFERENCE_WORKLOAD,
            "sparkrun_0123456789abcdef_0123456789ab",
        ),
        ("iw/chat", INFERENCE_WORKLOAD, "chat"),
        ("workload/chat", INFERENCE_WORKLOAD, "chat"),
        ("InferenceWorkload/chat", INFERENCE_WORKLOAD, "chat"),
        ("ic/gpus", INFERENCE_CLUSTER, "gpus"),
        ("cluster/gpus", INFERENCE_CLUSTER, "gpus"),
        ("mc/qwen", MODEL_CACHE, "qwen"),
        ("cache/qwen", MODEL_CACHE, "qwen"),
        ("modelcaches/qwen", MODEL_CACHE, "qwen"),
        ("ib/run1", INFERENCE_BENCHMARK, "run1"),
        ("benchmark/run1", INFERENCE_BENCHMARK, "run1"),
        ("recipe/r", RECIPE, "r"),
        ("rcp/r", RECIPE, "r"),
        ("daemonjob/j", DAEMON_JOB, "j"),
        ("dj/j", DAEMON_JOB, "j"),
    ],
)
def test_parse_target(target: str, kind: Any, name: str) -> None:
    assert describe.parse_target(target) == (kind, name)


def test_parse_target_refuses_unknown_kinds_and_empty_names() -> None:
    with pytest.raises(common.CliError) as unknown:
        describe.parse_target("pizza\x1b/x")
    assert unknown.value.code == common.EXIT_USAGE
    assert "\x1b" not in str(unknown.value)
    with pytest.raises(common.CliError) as empty:
        describe.parse_target("iw/")
    assert empty.value.code == common.EXIT_USAGE


def test_shown_drops_what_no_one_reads() -> None:
    obj = {
        "metadata": {
            "name": "x",
            "managedFields": [{"manager": "kubectl"}],
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}", "keep": "me"},
        },
        "spec": {},
    }
    assert describe.shown(obj)["metadata"] == {"name": "x", "annotations": {"keep": "me"}}
    bare = describe.shown(
        {"metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "x"}}}
    )
    assert bare["metadata"] == {}


def _ago(seconds: int) -> str:
    when = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=seconds)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_text_of_a_workload() -> None:
    data = {
        "metadata": {"name": "chat", "namespace": "team-a", "creationTimestamp": _ago(300), "generation": 2},
        "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}, "replicas": 1},
        "status": {
            "phase": "Running",
            "observedGeneration": 2,
            "readyReplicas": 1,
            "workloadId": "sparkrun_0123456789abcdef_0123456789ab",
            "model": {"name": "Qwen/Qwen3-0.6B", "servedName": "chat-served", "aliases": ["chat"]},
            "startup": [
                {"stage": "accepted", "time": "2026-01-02T11:00:00Z"},
                {"stage": "scheduled", "time": "2026-01-02T11:00:04Z", "replica": 0},
                {"stage": "ready", "time": "2026-01-02T11:00:31Z", "replica": 0},
            ],
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "AllReplicasReady",
                    "lastTransitionTime": _ago(60),
                    "message": "1 of 1 replicas Ready",
                },
            ],
            "endpoints": [{"replica": 0, "url": "http://10.0.0.1:8000", "ready": True}],
            "lastFailure": {
                "reason": "OOMKilled",
                "time": _ago(200),
                "replica": 0,
                "rank": 1,
                "role": "worker",
                "exitCode": 137,
                "message": "killed",
                "log": ["line one", "line\x1b two"],
            },
        },
        "events": [
            {
                "type": "Normal",
                "reason": "CreatedJobSet",
                "message": "Created JobSet chat-0-abcde",
                "lastTimestamp": _ago(290),
                "count": 1,
                "reportingComponent": "kopf",
            },
        ],
    }
    out = describe.text(common.printable(data), INFERENCE_WORKLOAD)
    lines = out.splitlines()
    assert lines[0] == "InferenceWorkload team-a/chat"
    assert "  Replicas:    1/1 ready" in lines
    assert "  Model:       Qwen/Qwen3-0.6B (gateway names: chat-served, chat)" in lines
    assert "  Workload id: sparkrun_0123456789abcdef_0123456789ab" in lines
    assert "  Age:         5m" in lines
    startup = out.split("Startup:")[1].split("Conditions:")[0].splitlines()
    assert startup[1].split() == ["STAGE", "TIME", "SINCE", "REPLICA", "OUTCOME", "MESSAGE"]
    assert startup[4].split() == ["ready", "2026-01-02", "11:00:31Z", "+31s", "0"]
    conditions = out.split("Conditions:")[1].split("Endpoints:")[0].splitlines()
    assert conditions[2].split()[:4] == ["Ready", "True", "AllReplicasReady", "60s"]
    assert "http://10.0.0.1:8000" in out
    assert "  last: OOMKilled 3m ago (replica 0, rank 1, worker, exit code 137)" in lines
    assert "    | line? two" in lines
    events = out.split("Events:")[1].splitlines()
    assert events[2].split()[:5] == ["4m", "Normal", "CreatedJobSet", "kopf", "1"]


def test_text_of_other_kinds_and_no_events() -> None:
    cache = {
        "metadata": {"name": "qwen", "namespace": "m"},
        "spec": {"pinned": True, "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}}},
        "status": {"phase": "Downloading", "progress": {"bytesDone": 512, "bytesTotal": 2048}},
    }
    out = describe.text(cache, MODEL_CACHE)
    assert out.startswith("ModelCache m/qwen\n")
    facts = [line.split(":", 1) for line in out.split("\n\n")[0].splitlines()[1:]]
    assert {k.strip(): v.strip() for k, v in facts} == {
        "Phase": "Downloading",
        "Size": "2.0 KiB",
        "Done": "512 B",
        "Pinned": "yes",
    }
    assert "Events: none" in out
    cluster = {
        "metadata": {"name": "gpus"},
        "spec": {},
        "status": {"totals": {"nodes": 2, "readyNodes": 2, "gpus": {"allocatable": 8, "free": 3}}},
    }
    shown = describe.text(cluster, INFERENCE_CLUSTER)
    assert shown.startswith("InferenceCluster gpus\n")
    assert "3 free of 8 allocatable" in shown
    assert "  (empty)" in shown


def test_a_long_spec_is_cut() -> None:
    spec = {f"key{i}": i for i in range(describe.SPEC_LINES + 20)}
    out = describe.text({"metadata": {"name": "x", "namespace": "n"}, "spec": spec}, RECIPE)
    assert "  ... 20 more lines (-o yaml)" in out


def test_completion_without_a_cluster_completes_nothing_at_once(tmp_path: Any) -> None:
    import argparse
    import time

    config = tmp_path / "kubeconfig"
    config.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: x, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {}}]\n"
    )
    args = argparse.Namespace(kubeconfig=str(config), context=None, namespace="default")
    started = time.monotonic()
    assert describe.complete("ch", args) == []
    assert describe.complete("i", args) == ["iw/", "ic/", "ib/"]
    assert describe.complete("pizza/", args) == []
    assert describe.complete("ic/", args) == []
    missing = argparse.Namespace(kubeconfig=str(tmp_path / "absent"), context=None, namespace=None)
    assert describe.complete("", missing) == [f"{kind}/" for kind in describe.KIND_PREFIXES]
    assert time.monotonic() - started < 10


class _Apiserver(BaseHTTPRequestHandler):
    """A loopback apiserver with one ModelCache and a page of Events ``events_bytes`` long."""

    events_bytes = 0

    def do_GET(self) -> None:  # NB: http.server's protocol
        if self.path.startswith("/apis/sparkrun.dev/v1alpha1/namespaces/team-a/modelcaches/qwen"):
            body = json.dumps({"metadata": {"name": "qwen", "namespace": "team-a", "uid": "u-1"}, "spec": {}})
        elif self.path.startswith("/api/v1/namespaces/team-a/events?"):
            event = {"metadata": {"name": "e"}, "type": "Warning", "reason": "Spam", "message": "x" * 1000}
            count = max(1, self.events_bytes // 1100)
            body = json.dumps({"kind": "EventList", "items": [event] * count})
        else:
            self.send_error(404)
            return
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        with contextlib.suppress(OSError):  # NB: the client stops reading at its bound
            self.wfile.write(data)

    def log_message(self, *_: Any) -> None:
        pass


@pytest.mark.parametrize("events_bytes", [2000, 3 * describe.EVENTS_MAX_BYTES])
def test_events_are_read_up_to_a_bound(events_bytes: int, tmp_path: Path) -> None:
    """Tenants write Events: an answer over :data:`describe.EVENTS_MAX_BYTES` is not read past the
    bound, and the object is still shown, with the Events "not shown: too large"."""
    handler = type("Handler", (_Apiserver,), {"events_bytes": events_bytes})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        config = tmp_path / "kubeconfig"
        config.write_text(
            "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
            f"clusters: [{{name: x, cluster: {{server: 'http://127.0.0.1:{server.server_port}'}}}}]\n"
            "contexts: [{name: x, context: {cluster: x, user: x}}]\nusers: [{name: x, user: {token: t}}]\n"
        )
        argv = [SPARKRUN_K8S, "describe", "mc/qwen", "-n", "team-a", "--kubeconfig", str(config)]
        env = {**os.environ, "NO_COLOR": "1", "COLUMNS": "200"}
        shown = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)
        as_json = subprocess.run(
            [*argv, "-o", "json"], capture_output=True, text=True, timeout=60, env=env, check=False
        )
    finally:
        server.shutdown()
        server.server_close()
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("ModelCache team-a/qwen\n")
    data = json.loads(as_json.stdout)
    if events_bytes > describe.EVENTS_MAX_BYTES:
        assert "Events: not shown: too large (over 4.0 MiB;" in shown.stdout
        assert "involvedObject.uid=u-1" in shown.stdout
        assert data["events"] == []
        assert data["eventsNotShown"].startswith("too large")
    else:
        assert "Spam" in shown.stdout.split("Events:")[1]
        assert len(data["events"]) == 1
        assert "eventsNotShown" not in data
