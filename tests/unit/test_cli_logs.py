"""``sparkrun-k8s logs``: the pure parts. Which pods are the workload's engine pods and their
prefixes (``[r0/leader]``, ``[r1/worker-2]``, from the operator's labels and the Indexed Job's
completion index), the order they print in, the label selector, --since durations, the log query
per option, colour only on a terminal without NO_COLOR, and tenant bytes made printable (text) or
escaped (JSON), and the completion of NAME offering nothing (quickly) without a cluster. Against
the testbed: tests/cli/test_logs.py.
"""

from __future__ import annotations

import argparse
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest

from sparkrun_operator.cli import logs
from tests.completion import complete


def _pod(
    name: str, role: str | None, replica: str | None, index: str | None = None, **extra: Any
) -> dict[str, Any]:
    labels = {"sparkrun.dev/workload": "chat"}
    if role is not None:
        labels["sparkrun.dev/role"] = role
    if replica is not None:
        labels["sparkrun.dev/replica"] = replica
    if index is not None:
        labels[logs.COMPLETION_INDEX] = index
    return {"metadata": {"name": name, "uid": f"uid-{name}", "labels": labels}, **extra}


def test_sources_prefixes_and_order() -> None:
    pods = [
        _pod("w1b", "worker", "1", "1"),
        _pod("l1", "leader", "1"),
        _pod("w0", "worker", "0", "0"),
        _pod("l0", "leader", "0"),
        _pod("download", None, "0"),
        _pod("odd", "worker", "x1"),
        _pod("hostile", "admin", "0"),
    ]
    sources = sorted(s for p in pods if (s := logs.source_of(p)) is not None)
    assert [(s.name, s.prefix) for s in sources] == [
        ("l0", "[r0/leader]"),
        ("w0", "[r0/worker-1]"),
        ("l1", "[r1/leader]"),
        ("w1b", "[r1/worker-2]"),
    ]


def test_the_engine_container_id() -> None:
    pod = _pod("l0", "leader", "0", status={"containerStatuses": [{"name": "wait-leader"}, {"name": "vllm"}]})
    assert logs.container_id(pod) is None
    pod["status"]["containerStatuses"][1]["containerID"] = "process://abc"
    assert logs.container_id(pod) == "process://abc"


def test_the_selector() -> None:
    assert logs.selector("chat", replica=None, role=None) == "sparkrun.dev/workload=chat,sparkrun.dev/role"
    assert logs.selector("chat", replica=2, role="worker") == (
        "sparkrun.dev/workload=chat,sparkrun.dev/role=worker,sparkrun.dev/replica=2"
    )


@pytest.mark.parametrize(
    ("text", "seconds"), [("30s", 30), ("10m", 600), ("2h", 7200), ("1d", 86400), ("45", 45)]
)
def test_since(text: str, seconds: int) -> None:
    assert logs.since_seconds(text) == seconds


@pytest.mark.parametrize("text", ["10 minutes", "-5m", "1w", "", "9" * 30 + "s"])
def test_since_refuses_what_is_not_a_duration(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        logs.since_seconds(text)


def test_the_log_query() -> None:
    args = argparse.Namespace(since=600, tail=5, previous=True)
    assert logs.log_query(args, follow=True) == {
        "container": "vllm",
        "follow": "true",
        "sinceSeconds": 600,
        "tailLines": 5,
        "previous": "true",
    }
    plain = logs.log_query(argparse.Namespace(since=None, tail=None, previous=False), follow=False)
    assert plain == {"container": "vllm", "limitBytes": logs.LOG_BYTES_MAX}


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_colour_only_on_a_terminal_without_no_color() -> None:
    assert logs.colour_wanted(_Tty(), {"TERM": "xterm"})
    assert not logs.colour_wanted(_Tty(), {"TERM": "xterm", "NO_COLOR": "1"})
    assert not logs.colour_wanted(_Tty(), {"TERM": "dumb"})
    assert not logs.colour_wanted(io.StringIO(), {"TERM": "xterm"})
    source = logs.Source(0, 1, "w0", "u", "worker")
    assert logs.painter(True)(source, 0) == "\x1b[36m[r0/worker-1]\x1b[0m"
    assert logs.painter(False)(source, 0) == "[r0/worker-1]"


def test_lines_are_printable_text_or_escaped_json() -> None:
    source = logs.Source(0, 0, "l0", "u", "leader")
    raw = b"INFO ready \x1b[31mred\x1b[0m \xff\r\n"
    text = logs.formatter("text", logs.painter(False))(source, 0, raw)
    assert text == "[r0/leader] INFO ready ?[31mred?[0m \ufffd\n"
    record = json.loads(logs.formatter("json", logs.painter(True))(source, 0, raw))
    assert record == {
        "pod": "l0",
        "replica": 0,
        "role": "leader",
        "rank": 0,
        "line": "INFO ready \x1b[31mred\x1b[0m \ufffd",
    }
    assert logs.formatter("yaml", logs.painter(False))(source, 0, b"x\n").startswith("---\n")


def test_completion_of_names_without_a_cluster_offers_nothing_quickly(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    started = time.monotonic()
    assert complete("sparkrun-k8s logs ch", tmp_path, KUBECONFIG=str(kubeconfig)) == []
    assert complete("sparkrun-k8s logs ch", tmp_path, KUBECONFIG=str(tmp_path / "absent")) == []
    assert time.monotonic() - started < 30
    assert "--previous" in complete("sparkrun-k8s logs w --prev", tmp_path, KUBECONFIG=str(kubeconfig))
