"""The ModelCache planner (``plan/modelcache.py``): phases, conditions, reasons, claims, deletion."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sparkrun_operator.api.modelcache import ModelCacheSpec, ModelCacheStatus
from sparkrun_operator.plan import cacheobserve
from sparkrun_operator.plan.modelcache import (
    CacheObservation,
    ObservedClaim,
    ObservedDownloadPod,
    ObservedJob,
    claims_of,
    job_name,
    parse_log_tail,
    plan,
)

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
SHA = "a" * 40
SPEC = ModelCacheSpec.model_validate(
    {
        "source": {"huggingFace": {"repo": "org/m", "revision": "v1"}},
        "storage": {"create": {"size": "1Gi", "accessModes": ["ReadWriteOnce"]}},
    }
)
BOUND = ObservedClaim(name="m", phase="Bound", access_modes=("ReadWriteOnce",), created=NOW)


def _obs(**over: Any) -> CacheObservation:
    base: dict[str, Any] = {
        "name": "m",
        "namespace": "ns",
        "uid": "u",
        "generation": 2,
        "spec": SPEC,
        "status": ModelCacheStatus(),
        "now": NOW,
        "has_finalizer": True,
        "claim": BOUND,
    }
    base.update(over)
    return CacheObservation(**base)


def _job(**over: Any) -> ObservedJob:
    return ObservedJob(name=job_name(_obs()), uid="j", **over)


def _cond(status: ModelCacheStatus, type_: str) -> Any:
    return next(c for c in status.conditions if c.type == type_)


def test_a_new_cache_gets_its_claim_job_and_finalizer() -> None:
    p = plan(_obs(claim=None, has_finalizer=False))
    kinds = [d["kind"] for d in p.apply]
    assert kinds == ["PersistentVolumeClaim", "Job"]
    assert p.finalizer == "add"
    assert p.status.phase == "Pending"
    assert _cond(p.status, "StorageReady").reason == "Creating"
    assert _cond(p.status, "Ready").observed_generation == 2
    assert p.status.claim_name == "m"


def test_one_job_at_a_time_and_stale_ones_go() -> None:
    stale = ObservedJob(name="m-download-00000000", uid="old")
    p = plan(_obs(jobs=(_job(), stale)))
    assert [d["kind"] for d in p.apply] == []
    assert p.delete_jobs == [stale]


@pytest.mark.parametrize(
    ("event", "phase"),
    [
        (None, "Resolving"),
        ({"event": "progress", "phase": "Resolving", "commit": None}, "Resolving"),
        (
            {"event": "progress", "phase": "Downloading", "commit": SHA, "bytes_done": 5, "bytes_total": 10},
            "Downloading",
        ),
        (
            {"event": "progress", "phase": "Verifying", "commit": SHA, "bytes_done": 10, "bytes_total": 10},
            "Verifying",
        ),
    ],
)
def test_live_phases_come_from_the_pod_log(event: dict[str, Any] | None, phase: str) -> None:
    _check_live_phase(event, phase, "Running")


def test_progress_in_status_has_files_rate_and_eta() -> None:
    event = {
        "event": "progress",
        "phase": "Downloading",
        "commit": SHA,
        "bytes_done": 40 * 2**20,
        "bytes_total": 100 * 2**20,
        "files_done": 2,
        "files_total": 5,
        "rate_bytes_per_s": 12.7 * 2**20,
        "eta_s": 4.7,
    }
    pod = ObservedDownloadPod(name="p", phase="Running", node="n1", last_event=event)
    planned = plan(_obs(jobs=(_job(),), pods=(pod,))).status
    progress = planned.progress
    assert progress is not None
    assert progress.to_wire() == {
        "bytesDone": 40 * 2**20,
        "bytesTotal": 100 * 2**20,
        "filesDone": 2,
        "filesTotal": 5,
        "bytesPerSecond": int(12.7 * 2**20),
        "etaSeconds": 4,
    }
    assert planned.message == (
        "Downloading: 41943040 of 104857600 bytes (40%), 2 of 5 files, 12.7 MiB/s, ETA 4s"
    )
    odd = {**event, "eta_s": None, "rate_bytes_per_s": "fast", "files_done": -1}
    pod = ObservedDownloadPod(name="p", phase="Running", node="n1", last_event=odd)
    wire = plan(_obs(jobs=(_job(),), pods=(pod,))).status.progress.to_wire()  # type: ignore[union-attr]
    assert "etaSeconds" not in wire
    assert "bytesPerSecond" not in wire
    assert "filesDone" not in wire


@pytest.mark.parametrize(
    ("rate", "eta", "shown", "wire"),
    [
        # the issue's line from a downloader that believed its first sample: below 1 B/s, nothing
        (0.04, 15686.0, "", {}),
        (250.0, 6291.0, ", 250 B/s", {"bytesPerSecond": 250}),
        # no rate yet (the one meter: 2 s and 256 KiB): neither, whatever the ETA says
        (None, 12.0, "", {}),
        (2.0e6, 1e999, ", 1.91 MiB/s", {"bytesPerSecond": 2_000_000}),  # JSON's 1e999 is inf
        (float("nan"), 3.0, "", {}),
        (2.0e6, 3.0, ", 1.91 MiB/s, ETA 3s", {"bytesPerSecond": 2_000_000, "etaSeconds": 3}),
    ],
)
def test_an_eta_only_beside_a_real_rate(
    rate: float | None, eta: float, shown: str, wire: dict[str, int]
) -> None:
    """``0.0 MB/s, ETA 15686s`` never reaches ``status.message`` (which ``kubectl describe``,
    ``status``, ``cache`` and the demo show) nor ``status.progress``: an ETA only beside a rate
    of at least 1 KiB/s (``rate.MIN_RATE``); a rate shown in binary units."""
    event = {"event": "progress", "phase": "Downloading", "bytes_done": 100, "bytes_total": 1572864,
             "rate_bytes_per_s": rate, "eta_s": eta}  # fmt: skip
    pod = ObservedDownloadPod(name="p", phase="Running", node="n1", last_event=event)
    status = plan(_obs(jobs=(_job(),), pods=(pod,))).status
    assert status.message == f"Downloading: 100 of 1572864 bytes (0%){shown}"
    assert status.progress is not None
    assert status.progress.to_wire() == {"bytesDone": 100, "bytesTotal": 1572864, **wire}


@pytest.mark.parametrize(
    ("rate", "eta"),
    [(0.5, 15686), (250.0, 6291), (2.0e6, 3), (2.0e6, float("inf")), (None, 12), (float("nan"), 3)],
)
def test_the_status_and_the_cli_believe_a_rate_by_one_rule(rate: float | None, eta: float) -> None:
    """The status message the operator writes and the line ``sparkrun-k8s run`` draws from the
    status it reads back show the same rate and ETA (``rate.reported``)."""
    from sparkrun_operator.cli import progress

    event = {"event": "progress", "phase": "Downloading", "bytes_done": 100, "bytes_total": 1572864,
             "rate_bytes_per_s": rate, "eta_s": eta}  # fmt: skip
    pod = ObservedDownloadPod(name="p", phase="Running", node="n1", last_event=event)
    status = plan(_obs(jobs=(_job(),), pods=(pod,))).status
    assert status.message is not None
    assert status.progress is not None
    written = status.message.split("(0%)", 1)[1]
    cache = {
        "metadata": {"name": "c"},
        "status": {"phase": "Downloading", "progress": status.progress.to_wire()},
    }
    drawn = progress.cache_line(cache)
    assert drawn is not None
    assert drawn.split("of 1.5 MiB)", 1)[1] == written


@pytest.mark.parametrize(
    ("event", "pod_phase"),
    [
        (
            {"event": "progress", "phase": "Ready", "commit": SHA, "bytes_done": 10, "bytes_total": 10},
            "Running",
        ),
        ({"event": "result", "commit": SHA, "files": 2, "total_bytes": 10}, "Running"),
        ({"event": "result", "commit": SHA, "files": 2, "total_bytes": 10}, "Succeeded"),
    ],
)
def test_done_but_the_job_not_yet_complete_stays_verifying(event: dict[str, Any], pod_phase: str) -> None:
    """Between the downloader's last line and the Job's completion the phase never falls back to
    Pending ("waiting for the download pod") with every byte done."""
    p = _check_live_phase(event, "Verifying", pod_phase)
    assert "waiting for the download Job" in (p.status.message or "")


def _check_live_phase(event: dict[str, Any] | None, phase: str, pod_phase: str) -> Any:
    pod = ObservedDownloadPod(name="p", phase=pod_phase, node="n1", last_event=event)
    p = plan(_obs(jobs=(_job(),), pods=(pod,)))
    assert p.status.phase == phase
    assert _cond(p.status, "Progressing").status == "True"
    assert _cond(p.status, "Ready").status == "False"
    if event and event.get("bytes_total") and event.get("phase") in ("Downloading", "Verifying"):
        assert p.status.progress is not None
        assert p.status.progress.bytes_total == 10
        assert "bytes" in (p.status.message or "")
    return p


def test_success_is_ready_with_the_commit_and_manifest_and_the_node_of_a_rwo_claim() -> None:
    result = {"event": "result", "commit": SHA, "files": 6, "total_bytes": 1234}
    pod = ObservedDownloadPod(name="p", phase="Succeeded", node="n1", exit_code=0, last_event=result)
    p = plan(_obs(jobs=(_job(succeeded=True),), pods=(pod,), claims=("w1",)))
    s = p.status
    assert s.phase == "Ready"
    assert s.resolved_revision == SHA
    assert s.manifest is not None
    assert (s.manifest.files, s.manifest.total_bytes) == (6, 1234)
    assert s.node_name == "n1"  # ReadWriteOnce: workloads follow the files
    assert s.claims == ["w1"]
    assert s.last_used == NOW
    assert s.last_verified == NOW
    assert _cond(s, "Ready").status == "True"
    assert _cond(s, "Progressing").status == "False"


def test_ready_stays_ready_without_new_writes() -> None:
    ready = plan(
        _obs(
            jobs=(_job(succeeded=True),),
            pods=(
                ObservedDownloadPod(
                    name="p",
                    phase="Succeeded",
                    exit_code=0,
                    last_event={"event": "result", "commit": SHA, "files": 1, "total_bytes": 1},
                ),
            ),
        )
    ).status
    again = plan(_obs(status=ready, jobs=(_job(succeeded=True),)))
    assert again.status == ready
    assert again.apply == []


@pytest.mark.parametrize(
    ("code", "reason", "hint"),
    [
        (3, "AuthenticationRequired", "tokenSecretRef"),
        (4, "RepositoryNotFound", "source.huggingFace.repo"),
        (5, "RevisionNotFound", "source.huggingFace.revision"),
        (9, "StorageError", "volume"),
    ],
)
def test_failures_name_the_reason_and_what_to_do(code: int, reason: str, hint: str) -> None:
    pod = ObservedDownloadPod(
        name="p", phase="Failed", exit_code=code, last_event={"event": "error", "message": "boom"}
    )
    p = plan(_obs(jobs=(_job(failed=True, reason="PodFailurePolicy"),), pods=(pod,)))
    ready = _cond(p.status, "Ready")
    assert p.status.phase == "Failed"
    assert ready.reason == reason
    assert hint in ready.message
    assert "boom" in ready.message
    assert "to retry" in ready.message
    assert p.apply == []


def test_the_downloaders_own_reason_wins() -> None:
    event = {"event": "error", "reason": "HubUnavailable", "message": "503 after retries"}
    pod = ObservedDownloadPod(name="p", phase="Failed", exit_code=8, last_event=event)
    p = plan(_obs(jobs=(_job(failed=True, reason="BackoffLimitExceeded"),), pods=(pod,)))
    assert _cond(p.status, "Ready").reason == "HubUnavailable"


def test_an_unbound_claim_says_so_with_the_schedulers_words() -> None:
    claim = ObservedClaim(name="m", phase="Pending", created=NOW - dt.timedelta(minutes=5))
    pod = ObservedDownloadPod(
        name="p",
        waiting_reason="Unschedulable",
        waiting_message="pod has unbound immediate PersistentVolumeClaims",
    )
    p = plan(_obs(claim=claim, jobs=(_job(),), pods=(pod,)))
    storage = _cond(p.status, "StorageReady")
    assert storage.status == "False"
    assert storage.reason == "ClaimUnbound"
    assert "unbound immediate" in storage.message
    assert "StorageClass" in storage.message
    assert p.status.phase == "Pending"
    assert "claim" in (p.status.message or "")


def test_a_missing_existing_claim() -> None:
    spec = SPEC.model_copy(
        update={"storage": SPEC.storage.model_copy(update={"claim_name": "shared", "create": None})}
    )
    p = plan(_obs(spec=spec, claim=None))
    assert _cond(p.status, "StorageReady").reason == "ClaimNotFound"
    assert all(d["kind"] != "PersistentVolumeClaim" for d in p.apply)


def test_deletion_waits_for_claims_unless_forced() -> None:
    blocked = plan(_obs(deleting=True, claims=("w1",)))
    assert blocked.finalizer is None
    cond = _cond(blocked.status, "DeletionBlocked")
    assert "w1" in cond.message
    assert "sparkrun.dev/force-delete" in cond.message
    assert plan(_obs(deleting=True, claims=("w1",), force_delete=True)).finalizer == "remove"
    assert plan(_obs(deleting=True)).finalizer == "remove"
    assert plan(_obs(deleting=True)).apply == []


def test_claims_and_log_parsing() -> None:
    workloads = [
        {"metadata": {"name": "b"}, "spec": {"model": {"cacheRef": {"name": "m"}}}},
        {"metadata": {"name": "a"}, "spec": {"model": {"cacheRef": {"name": "m"}}}},
        {"metadata": {"name": "c"}, "spec": {"model": {"name": "x"}}},
    ]
    assert claims_of(workloads, "m") == ("a", "b")
    tail = 'noise\n{"event": "progress", "phase": "Downloading"}\n{"event": "result", "commit": "x"}\nbye\n'
    assert parse_log_tail(tail) == {"event": "result", "commit": "x"}
    assert parse_log_tail("nothing here") is None


def test_observed_records_from_raw_objects() -> None:
    pv = {
        "spec": {
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n7"]}
                            ]
                        }
                    ]
                }
            }
        }
    }
    claim = cacheobserve.claim_from(
        {"metadata": {"name": "m"}, "status": {"phase": "Bound", "accessModes": ["ReadWriteOnce"]}}, pv
    )
    assert (claim.phase, claim.node, claim.access_modes) == ("Bound", "n7", ("ReadWriteOnce",))
    job = cacheobserve.job_from(
        {
            "metadata": {"name": "j", "uid": "u"},
            "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "DeadlineExceeded"}]},
        }
    )
    assert (job.failed, job.reason) == (True, "DeadlineExceeded")
    pod = cacheobserve.pod_from(
        {
            "metadata": {"name": "p"},
            "spec": {"nodeName": "n1"},
            "status": {
                "phase": "Failed",
                "containerStatuses": [{"name": "download", "state": {"terminated": {"exitCode": 3}}}],
            },
        },
        '{"event": "error", "reason": "AuthenticationRequired"}\n',
    )
    assert (pod.exit_code, pod.node, pod.last_event) == (
        3,
        "n1",
        {"event": "error", "reason": "AuthenticationRequired"},
    )
    # without a readable log, the termination message (FallbackToLogsOnError) has the last line
    gone = cacheobserve.pod_from(
        {
            "metadata": {"name": "p"},
            "status": {
                "containerStatuses": [
                    {
                        "name": "download",
                        "state": {
                            "terminated": {
                                "exitCode": 4,
                                "message": '{"event": "error", "reason": "RepositoryNotFound"}',
                            }
                        },
                    }
                ]
            },
        }
    )
    assert gone.last_event == {"event": "error", "reason": "RepositoryNotFound"}
