"""The pure parts of the ``model_cache.*`` operations: where ``cache_dir`` points, protection and
prune selection, claim release timing, and the tool Job they render."""

from __future__ import annotations

import datetime as dt

import pytest

from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors.modelcache import inventory
from sparkrun_operator.ops.executors.modelcache.location import Location, parse_cache_dir, stored_at
from sparkrun_operator.ops.executors.modelcache.retention import adopted_name, claim_releasable
from sparkrun_operator.render.cachetool import ToolOptions, ToolRun, job_name, render_tool_job

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)


def test_cache_dir_names_a_claim_and_a_directory() -> None:
    assert parse_cache_dir("models") == ("models", "/")
    assert parse_cache_dir("models:/hf/") == ("models", "/hf")
    assert parse_cache_dir("models:/a//b") == ("models", "/a/b")
    for bad in ("/models/hf", "Models", "models:hf", "models:/../etc", "", "a_b"):
        with pytest.raises(Invalid, match="cache_dir"):
            parse_cache_dir(bad)


def test_a_modelcache_is_stored_at_its_claim_and_path() -> None:
    spec = {"source": {"huggingFace": {"repo": "o/m"}}, "storage": {"claimName": "shared", "path": "/hf/"}}
    cache = {"metadata": {"name": "x"}, "spec": spec}
    assert stored_at(cache, "shared", "/hf")
    assert not stored_at(cache, "shared", "/")
    created = {"metadata": {"name": "own"}, "spec": {**spec, "storage": {"create": {"size": "1Gi"}}}}
    assert stored_at(created, "own", "/")  # storage.create: the claim is named after the cache
    assert not stored_at({"metadata": {"name": "bad"}, "spec": {}}, "bad", "/")


def _tracker(commit: str, **kw: object) -> inventory.Tracker:
    base: dict[str, object] = {
        "name": f"mc-{commit[:1]}",
        "repo": "o/m",
        "commit": commit,
        "revision": commit,
        "pinned": False,
        "claims": (),
        "phase": "Ready",
        "last_used": NOW - dt.timedelta(days=30),
    }
    return inventory.Tracker(**(base | kw))  # type: ignore[arg-type]


def _row(commit: str, size: int, repo: str = "o/m") -> dict[str, object]:
    return {
        "repo": repo,
        "commit": commit,
        "snapshot": f"/s/{commit}",
        "logical_bytes": size,
        "private_bytes": size,
    }


def test_protection_order_and_reasons() -> None:
    trackers = [
        _tracker(A, pinned=True, claims=("w",)),
        _tracker(B, claims=("w",)),
        _tracker(C, last_used=NOW - dt.timedelta(days=1)),
        _tracker(D),
        _tracker("e" * 40),
    ]
    rows = [_row(x, 10) for x in (A, B, C, D)] + [_row("f" * 40, 10)]
    entries = inventory.join(rows, trackers)
    inventory.protect(entries, now=NOW, min_age_days=7)
    codes = {e.commit[:1]: e.reason_code for e in entries}
    assert codes == {
        "a": "pinned",
        "b": "workload_claim",
        "c": "retention_age",
        "d": "eligible",
        "e": "absent",
        "f": "untracked",
    }
    inventory.protect(entries, now=NOW, min_age_days=7, busy=frozenset({"o/m"}))
    assert {e.commit[:1]: e.reason_code for e in entries}["d"] == "download_in_progress"
    wire = next(e for e in entries if e.commit == B).to_wire("ns")
    assert wire["claims"] == {"w": {"kind": "InferenceWorkload", "namespace": "ns", "name": "w"}}
    assert wire["tracked"] is True
    assert wire["eligible"] is False
    assert wire["last_used"] == trackers[1].last_used.timestamp()


def test_prune_selects_least_recently_used_until_the_targets_are_met() -> None:
    trackers = [_tracker(x, last_used=NOW - dt.timedelta(days=d)) for x, d in ((A, 30), (B, 20), (C, 10))]
    entries = inventory.join([_row(A, 100), _row(B, 200), _row(C, 300)], trackers)
    inventory.protect(entries, now=NOW, min_age_days=7)
    chosen, met = inventory.select_for_prune(entries, free_bytes=0, max_bytes=None, min_free_bytes=None)
    assert [e.commit for e in chosen] == [A, B, C]
    assert met
    chosen, met = inventory.select_for_prune(entries, free_bytes=0, max_bytes=350, min_free_bytes=None)
    assert [e.commit for e in chosen] == [A, B]
    assert met
    chosen, met = inventory.select_for_prune(entries, free_bytes=50, max_bytes=None, min_free_bytes=160)
    assert [e.commit for e in chosen] == [A, B]
    assert met
    chosen, met = inventory.select_for_prune(entries, free_bytes=0, max_bytes=None, min_free_bytes=10_000)
    assert [e.commit for e in chosen] == [A, B, C]
    assert not met
    entries[0].trackers = [_tracker(A, pinned=True)]
    inventory.protect(entries, now=NOW, min_age_days=7)
    chosen, met = inventory.select_for_prune(entries, free_bytes=0, max_bytes=0, min_free_bytes=None)
    assert [e.commit for e in chosen] == [B, C]
    assert not met


def test_a_claim_is_released_only_after_its_minimum_age_and_skew() -> None:
    seen = _tracker(A, claims=("w",), last_used=NOW - dt.timedelta(seconds=500))
    assert "released only 720 s" in str(claim_releasable(seen, now=NOW, min_age=600, skew=120))
    old = _tracker(A, claims=("w",), last_used=NOW - dt.timedelta(seconds=721))
    assert claim_releasable(old, now=NOW, min_age=600, skew=120) is None


def test_adopted_names_are_dns_labels() -> None:
    assert adopted_name("Org/Tiny_Model.v2", A) == "tiny-model-v2-aaaaaaaa"
    assert len(adopted_name("o/" + "x" * 200, A)) <= 63


def test_tool_job_mounts_the_claim_read_only_and_belongs_to_the_daemon_job() -> None:
    run = ToolRun(
        job_id="j1",
        job_uid="u1",
        namespace="ns",
        verb="scan",
        module="m",
        args=["scan", "--repo", "o/m"],
        claim="shared",
        sub_path="/hf",
        node_selector={"kubernetes.io/hostname": "n1"},
    )
    job = render_tool_job(
        run, ToolOptions(image="tools:1", mount_path="/cache", scheduling={"tolerations": [{"key": "t"}]})
    )
    pod = job["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["args"] == ["-m", "m", "scan", "--root", "/cache", "--repo", "o/m"]
    assert container["volumeMounts"] == [
        {"name": "model-cache", "mountPath": "/cache", "readOnly": True, "subPath": "hf"}
    ]
    assert pod["volumes"][0]["persistentVolumeClaim"] == {"claimName": "shared"}
    assert pod["nodeSelector"] == {"kubernetes.io/hostname": "n1"}
    assert pod["tolerations"] == [{"key": "t"}]
    assert pod["automountServiceAccountToken"] is False
    assert job["spec"]["backoffLimit"] == 0
    assert job["metadata"]["ownerReferences"][0] | {} == {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "DaemonJob",
        "name": "j1",
        "uid": "u1",
        "blockOwnerDeletion": False,
    }
    assert job["metadata"]["name"] == job_name(run)
    assert len(job_name(run)) <= 63
    writer = render_tool_job(
        ToolRun(
            job_id="j1",
            job_uid="u1",
            namespace="ns",
            verb="remove",
            module="m",
            args=["remove"],
            claim="c",
            read_only=False,
            token_secret=("hf", "token"),
        ),
        ToolOptions(),
    )
    spec = writer["spec"]["template"]["spec"]
    assert "readOnly" not in spec["containers"][0]["volumeMounts"][0]
    assert spec["volumes"][1]["secret"]["secretName"] == "hf"
    assert "--token-file" in spec["containers"][0]["args"]


def test_location_scheduling_prefers_the_requested_host() -> None:
    cache = {"spec": {"download": {"nodeSelector": {"pool": "io"}, "tolerations": [{"key": "gpu"}]}}}
    loc = Location("ns", "c", "/", ("ReadWriteOnce",), ("node-2",), (cache,), node="node-1")
    assert loc.scheduling() == ({"pool": "io", "kubernetes.io/hostname": "node-2"}, [{"key": "gpu"}])
    local = Location("ns", "c", "/hf", ("ReadWriteOnce",), (), (), node="node-1")
    assert local.scheduling() == ({"kubernetes.io/hostname": "node-1"}, [])
    assert local.describe("node-1") == {
        "key": "pvc/ns/c/hf",
        "kind": "local",
        "source": "PersistentVolumeClaim ns/c",
        "hosts": ["node-1"],
        "paths": {"node-1": "/hf"},
        "verified": True,
    }
