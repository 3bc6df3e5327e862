"""``sparkrun-k8s cache``: the text a person reads, from ModelCache objects (no cluster).

Tested: the table's columns (model, revision with its resolved commit, phase, size, progress,
pinned, the workloads using it, ``-A``'s namespace column); the rate and ETA (the project's one
meter, ``rate.RateMeter``, fed what the client saw) appear only after 2 s of watching and 256 KiB
moved (the demo's ``0.0 MB/s, ETA 15686s`` for a 1.5 MiB file done a second later cannot recur),
then match the bytes seen over time, and a trickle shows no ETA; a restarted download starts the
sample again; the progress bar fills with the bytes; ``inspect`` shows conditions, events and
files with digests; a prune report lists what it removes and what it keeps and why; control
characters from the cluster never reach the terminal. Against a cluster: tests/cli/test_cache.py.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from sparkrun_operator.cli import cacheview
from sparkrun_operator.cli.cacheview import bar, cache_row, progress_line, watch_lines
from sparkrun_operator.rate import RateMeter
from tests.completion import complete

MIB = 1024 * 1024
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def _cache(name: str = "tiny-cache", phase: str = "Downloading", **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "source": {"huggingFace": {"repo": "org/tiny", "revision": "v1.0"}},
            "storage": {"create": {"size": "1Gi"}},
            "pinned": False,
        },
        "status": {"phase": phase, **status},
    }


def test_no_rate_before_two_seconds_and_256_kib() -> None:
    meter = RateMeter()
    meter.update(0, 100.0)
    meter.update(int(1.5 * MIB), 101.0)  # the whole file a second later: too short to mean a rate
    assert meter.rate() is None
    row = cache_row(_cache(progress={"bytesDone": int(1.5 * MIB), "bytesTotal": 2 * MIB}))
    line = progress_line(row, meter)
    assert "/s" not in line
    assert "ETA" not in line
    assert "1.5 MiB/2.0 MiB" in line
    # three seconds but only a few bytes: still nothing
    other = RateMeter()
    other.update(0, 100.0)
    other.update(1000, 103.0)
    assert other.rate() is None
    assert "/s" not in progress_line(row, other)


def test_rate_and_eta_once_sampled() -> None:
    meter = RateMeter()
    for second in range(5):
        meter.update(second * 256 * 1024, 100.0 + second)
    rate = meter.rate()
    assert rate is not None
    assert abs(rate - 256 * 1024) < 1
    row = cache_row(
        _cache(progress={"bytesDone": 1 * MIB, "bytesTotal": 2 * MIB, "filesDone": 3, "filesTotal": 6})
    )
    line = progress_line(row, meter)
    assert "256 KiB/s" in line
    assert "ETA 4s" in line
    assert "3/6 files" in line
    assert "1.0 MiB/2.0 MiB" in line
    assert " 50%" in line
    # the watch screen finds each cache's meter by namespace/name; one it has none for shows none
    lines = watch_lines([row, {**row, "name": "other"}], {"team-a/tiny-cache": meter}, wide=True)
    assert lines[0].startswith("team-a/tiny-cache  Downloading")
    assert "ETA 4s" in lines[0]
    assert lines[1].startswith("team-a/other")
    assert "/s" not in lines[1]


def test_a_trickle_shows_its_rate_but_no_eta() -> None:
    meter = RateMeter()
    meter.update(0, 100.0)
    meter.update(300 * 1024, 500.0)  # 768 B/s: below rate.MIN_RATE, an ETA would say nothing
    line = progress_line(cache_row(_cache(progress={"bytesDone": 300 * 1024, "bytesTotal": MIB})), meter)
    assert "768 B/s" in line
    assert "ETA" not in line


def test_a_restarted_download_starts_the_sample_again() -> None:
    meter = RateMeter()
    for second in range(4):
        meter.update(second * MIB, 100.0 + second)
    assert meter.rate() is not None
    meter.update(0, 104.0)  # a new Job: bytes went back
    assert meter.rate() is None


def test_the_rate_is_over_the_recent_window() -> None:
    meter = RateMeter()
    now, done = 100.0, 0
    meter.update(done, now)
    for _ in range(30):  # 30 s at 1 MiB/s, then 12 s at 100 KiB/s
        now, done = now + 1.0, done + MIB
        meter.update(done, now)
    for _ in range(12):
        now, done = now + 1.0, done + 100 * 1024
        meter.update(done, now)
    rate = meter.rate()
    assert rate is not None
    assert rate < 200 * 1024


def test_bar_fills_with_the_fraction() -> None:
    assert bar(0.0, 10) == "░" * 10
    assert bar(0.5, 10) == "█" * 5 + "░" * 5
    assert bar(1.7, 10) == "█" * 10


def test_ls_table_shows_every_column() -> None:
    ready = _cache(
        "ready-cache",
        "Ready",
        resolvedRevision=COMMIT,
        manifest={"files": 6, "totalBytes": int(1.5 * MIB)},
        claims=["w1", "w2", "w3", "w4"],
    )
    ready["spec"]["pinned"] = True
    rows = [cache_row(ready), cache_row(_cache(progress={"bytesDone": MIB, "bytesTotal": 4 * MIB}))]
    text = cacheview.ls_text({"namespace": "team-a", "all_namespaces": False, "caches": rows})
    header, first, second = text.splitlines()
    assert header.split() == [
        "NAME",
        "MODEL",
        "REVISION",
        "PHASE",
        "SIZE",
        "PROGRESS",
        "PINNED",
        "USED",
        "BY",
    ]
    assert "ready-cache" in first
    assert "v1.0 (0123456789ab)" in first
    assert "1.5 MiB" in first
    assert "100%" in first
    assert "yes" in first
    assert "w1, w2, w3, +1 more" in first
    assert "Downloading" in second
    assert "25%" in second
    assert "4.0 MiB" in second
    assert second.split()[-1] == "-"
    wide = cacheview.ls_text({"namespace": "x", "all_namespaces": True, "caches": rows})
    assert wide.splitlines()[0].startswith("NAMESPACE")
    assert "team-a" in wide.splitlines()[1]
    assert cacheview.ls_text({"namespace": "x", "all_namespaces": False, "caches": []}) == (
        "no ModelCaches in namespace x\n"
    )


def test_control_characters_never_reach_the_terminal() -> None:
    cache = _cache("c", "Failed", message="bad\x1b[2Jthing\rhere")
    cache["spec"]["source"]["huggingFace"]["repo"] = "org/\x1b]0;owned\x07"
    row = cache_row(cache)
    out = cacheview.ls_text({"namespace": "n", "caches": [row]}) + cacheview.inspect_text(
        cacheview.inspect_data(cache, [{"type": "Warning", "reason": "X", "message": "a\x1bb"}], None)
    )
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "\r" not in out
    assert "bad?[2Jthing?here" in out


def test_inspect_shows_conditions_events_and_files() -> None:
    cache = _cache(
        "tiny-cache",
        "Ready",
        resolvedRevision=COMMIT,
        manifest={"files": 2, "totalBytes": 2048},
        claims=["tiny-w"],
        claimName="tiny-cache",
        conditions=[{"type": "Ready", "status": "True", "reason": "Downloaded", "message": "6 files"}],
        modelShape={"numHiddenLayers": 2, "dtype": "bfloat16"},
    )
    files: dict[str, Any] = {
        "files": [
            {"path": "config.json", "size": 1024, "checksum_algorithm": "git-sha1", "checksum": "ab" * 20}
        ]
    }
    files["verify"] = {
        "detail": "1 of 2 files missing, invalid or unreadable",
        "failures": [{"path": "model.safetensors", "reason": "invalid"}],
    }
    events = [{"type": "Normal", "reason": "Ready", "message": "downloaded", "count": 2}]
    text = cacheview.inspect_text(cacheview.inspect_data(cache, events, files))
    assert "ModelCache team-a/tiny-cache" in text
    assert "org/tiny @ v1.0 (0123456789ab)" in text
    assert "Used by:       tiny-w" in text
    assert "Files:         2, 2.0 KiB" in text
    assert "numHiddenLayers=2" in text
    assert f"config.json  1.0 KiB  git-sha1:{'ab' * 20}" in text
    assert "Ready  True    Downloaded  6 files" in text
    assert "Normal  Ready   2      downloaded" in text
    assert (
        "Verified on the volume: 1 of 2 files missing, invalid or unreadable\n  invalid: model.safetensors"
        in text
    )


def test_prune_report_says_what_goes_and_what_stays() -> None:
    report = {
        "dry_run": True,
        "location": {"source": "PersistentVolumeClaim team-a/models"},
        "entries": [
            {
                "repo": "org/old",
                "revision": COMMIT,
                "reclaimable_bytes": 3 * MIB,
                "action": "would_remove",
                "usage": {"model_caches": ["old-cache"]},
            },
            {
                "repo": "org/tiny",
                "revision": COMMIT,
                "reason": "pinned (ModelCache tiny-cache)",
                "action": None,
            },
        ],
        "planned_bytes": 3 * MIB,
        "free_bytes": MIB,
        "free_bytes_after": 4 * MIB,
        "target_met": True,
    }
    text = cacheview.prune_text(report)
    assert text.splitlines()[0] == "would remove 1 revision(s) at PersistentVolumeClaim team-a/models"
    assert "org/old@0123456789ab  3.0 MiB  (ModelCache old-cache)" in text
    assert "kept org/tiny@0123456789ab: pinned (ModelCache tiny-cache)" in text
    assert "would free 3.0 MiB; free 1.0 MiB -> 4.0 MiB" in text


def test_human_units() -> None:
    assert cacheview.human_bytes(512) == "512 B"
    assert cacheview.human_bytes(1536) == "1.5 KiB"
    assert cacheview.human_bytes(None) == "-"


def test_completion_of_verbs_and_of_names_without_a_cluster(tmp_path: Path) -> None:
    assert complete("sparkrun-k8s cache p", tmp_path) == ["pin", "prune"]
    assert "--watch" in complete("sparkrun-k8s cache ls --w", tmp_path)
    # no cluster (the kubeconfig names an address nothing listens on): no names, and at once
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:9'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\n"
    )
    started = time.monotonic()
    assert complete("sparkrun-k8s cache inspect x", tmp_path, KUBECONFIG=str(kubeconfig)) == []
    assert complete("sparkrun-k8s bench show c", tmp_path, KUBECONFIG=str(kubeconfig)) == []
    assert time.monotonic() - started < 30  # two starts of the CLI on a busy machine
