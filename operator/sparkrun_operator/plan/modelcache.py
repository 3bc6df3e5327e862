"""The ModelCache planner: claim, download Job, download pod -> children to make and the status.

Pure (time is passed in) and the only author of ``ModelCache.status``. Phases: ``Pending``
(waiting for the claim or the pod to be placed), ``Resolving`` / ``Downloading`` /
``Verifying`` (what the downloader last reported in its pod log), ``Ready`` (the Job succeeded:
every file verified, ``resolvedRevision``, the manifest summary and the model's shape
(``modelShape``, checked again here) from its result line) or
``Failed`` (the Job failed: the reason from the downloader's exit code, the message from its
error line, both actionable). One Job at a time per cache, named after a hash of what it
downloads, so a new one is made only when that changes (or when a failed one is deleted to
retry). A claim that stays unbound gets ``StorageReady=False`` with the scheduler's words; it
never hangs silently. Deletion is held (a finalizer) while workloads claim the cache, unless
the ``sparkrun.dev/force-delete`` annotation is set.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkrun_operator.api.clip import MESSAGE_MAX, clip
from sparkrun_operator.api.meta import Condition, set_condition
from sparkrun_operator.api.modelcache import (
    CacheManifest,
    CachePhase,
    CacheProgress,
    ModelCacheSpec,
    ModelCacheStatus,
)
from sparkrun_operator.api.modelshape import shape_from_event
from sparkrun_operator.plan.logtail import last_event
from sparkrun_operator.rate import format_eta, format_rate, reported
from sparkrun_operator.render import modelcache as render

READY: Final = "Ready"
#: A reason the downloader may report (CamelCase, as a condition's reason must be).
_REASON: Final = re.compile(r"^[A-Z][A-Za-z0-9]{0,63}$")
PROGRESSING: Final = "Progressing"
STORAGE_READY: Final = "StorageReady"
DELETION_BLOCKED: Final = "DeletionBlocked"

#: The downloader's exit codes (docs/model-cache.md) -> (reason, what to do).
EXIT_REASONS: Final[Mapping[int, tuple[str, str]]] = {
    1: ("Failed", "the downloader failed unexpectedly; see the download pod's log"),
    2: ("InvalidArguments", "the download command or the token file is invalid"),
    3: (
        "AuthenticationRequired",
        "the repository is gated or private: set source.huggingFace.tokenSecretRef to a Secret "
        "with a token that has access (and accept the repository's conditions on the Hub)",
    ),
    4: ("RepositoryNotFound", "no such repository on the Hub: check source.huggingFace.repo (and the token)"),
    5: ("RevisionNotFound", "no such branch, tag or commit: check source.huggingFace.revision"),
    6: ("EntryNotFound", "a listed file is not served, or no file matches allowPatterns/ignorePatterns"),
    7: ("VerificationFailed", "files still fail verification after a fresh download"),
    8: ("HubUnavailable", "the Hub was unreachable or overloaded after retries"),
    9: ("StorageError", "the volume is full, read-only or not writable"),
    10: ("NotCached", "no manifest for that revision"),
}
#: How long a claim may stay unbound before ``StorageReady`` says so as a failure.
UNBOUND_PATIENCE: Final = dt.timedelta(minutes=2)
#: ``lastUsed`` is refreshed at most this often while claimed (no status write per pass).
LAST_USED_GRANULARITY: Final = dt.timedelta(minutes=5)
_LIVE: Final = ("Resolving", "Downloading", "Verifying")


@dataclass(frozen=True, kw_only=True)
class ObservedClaim:
    name: str
    phase: str = "Pending"
    access_modes: tuple[str, ...] = ()
    #: The one node a bound PersistentVolume's node affinity allows (node-local volumes).
    node: str | None = None
    created: dt.datetime | None = None


@dataclass(frozen=True, kw_only=True)
class ObservedJob:
    name: str
    uid: str
    succeeded: bool = False
    failed: bool = False
    reason: str = ""
    message: str = ""


@dataclass(frozen=True, kw_only=True)
class ObservedDownloadPod:
    name: str
    node: str | None = None
    phase: str = "Pending"
    created: dt.datetime | None = None
    exit_code: int | None = None
    #: Why a container is waiting (ImagePullBackOff, CreateContainerConfigError, ...) or why the
    #: pod is not scheduled (PodScheduled=False), with the message.
    waiting_reason: str = ""
    waiting_message: str = ""
    #: The last JSON line the downloader printed (progress, result or error), if read.
    last_event: Mapping[str, Any] | None = None


@dataclass(frozen=True, kw_only=True)
class CacheObservation:
    name: str
    namespace: str
    uid: str
    generation: int
    spec: ModelCacheSpec
    status: ModelCacheStatus
    now: dt.datetime
    deleting: bool = False
    force_delete: bool = False
    has_finalizer: bool = False
    claim: ObservedClaim | None = None
    jobs: tuple[ObservedJob, ...] = ()
    #: Pods of the current Job, oldest first.
    pods: tuple[ObservedDownloadPod, ...] = ()
    #: ``InferenceWorkload`` names in the namespace whose ``spec.model.cacheRef`` names this cache.
    claims: tuple[str, ...] = ()
    options: render.DownloadOptions = field(default_factory=render.DownloadOptions)


@dataclass(kw_only=True)
class CachePlan:
    status: ModelCacheStatus
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete_jobs: list[ObservedJob] = field(default_factory=list)
    finalizer: Literal["add", "remove"] | None = None


def download_key(spec: ModelCacheSpec) -> str:
    """Hash (8 hex) of what a download Job fetches and checks; its Job is named after it."""
    doc = {"source": spec.source.to_wire(), "storage": spec.storage.to_wire(), "verify": spec.verify}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:8]


def job_name(obs: CacheObservation) -> str:
    return render.job_name(obs.name, download_key(obs.spec))


def parse_log_tail(text: str) -> dict[str, Any] | None:
    """The last downloader JSON line (``progress``/``result``/``error``) of a log tail."""
    return last_event(text, ("progress", "result", "error"))


def plan(obs: CacheObservation) -> CachePlan:
    """Children to apply, Jobs to delete, the finalizer, and the complete status."""
    status = _carry(obs)
    out = CachePlan(status=status)
    conds: list[Condition] = [c.model_copy() for c in obs.status.conditions]

    def put(type_: str, ok: bool, reason: str, message: str) -> None:
        set_condition(
            conds,
            type=type_,
            status="True" if ok else "False",
            reason=reason,
            message=message,
            observed_generation=obs.generation,
            now=obs.now,
        )

    _deletion(obs, out, put)
    storage_ok = _storage(obs, out, put)
    _download(obs, out, put, storage_ok=storage_ok)
    keep = {READY, PROGRESSING, STORAGE_READY} | ({DELETION_BLOCKED} if obs.deleting else set())
    status.conditions = [c for c in conds if c.type in keep]
    return out


def _carry(obs: CacheObservation) -> ModelCacheStatus:
    prev = obs.status
    last_used = prev.last_used
    if obs.claims and (last_used is None or obs.now - last_used >= LAST_USED_GRANULARITY):
        last_used = obs.now
    return ModelCacheStatus(
        observed_generation=obs.generation,
        phase=prev.phase,
        resolved_revision=prev.resolved_revision,
        manifest=prev.manifest,
        model_shape=prev.model_shape,
        progress=prev.progress,
        claims=sorted(obs.claims),
        claim_name=render.claim_name(obs.name, obs.spec),
        access_modes=list(obs.claim.access_modes) if obs.claim else list(prev.access_modes),
        node_name=prev.node_name,
        last_used=last_used,
        last_verified=prev.last_verified,
        message=prev.message,
    )


Put = Any  # the ``put`` closure of :func:`plan`


def _deletion(obs: CacheObservation, out: CachePlan, put: Put) -> None:
    if not obs.deleting:
        if not obs.has_finalizer:
            out.finalizer = "add"
        return
    if obs.claims and not obs.force_delete:
        shown = ", ".join(sorted(obs.claims)[:10])
        put(
            DELETION_BLOCKED,
            True,
            "ClaimedByWorkloads",
            f"deletion waits: InferenceWorkloads {shown} use this cache; delete them or set the "
            "annotation sparkrun.dev/force-delete",
        )
        return
    if obs.has_finalizer:
        out.finalizer = "remove"


def _storage(obs: CacheObservation, out: CachePlan, put: Put) -> bool:
    """``StorageReady``; the claim to create. Whether the claim is bound."""
    name = render.claim_name(obs.name, obs.spec)
    create = obs.spec.storage.create
    claim = obs.claim
    if claim is None:
        if create is not None and not obs.deleting:
            out.apply.append(render.render_claim(_owner(obs), create))
            put(STORAGE_READY, False, "Creating", f"creating PersistentVolumeClaim {name}")
        else:
            put(
                STORAGE_READY,
                False,
                "ClaimNotFound",
                f"PersistentVolumeClaim {name} not found in namespace {obs.namespace}; create it or "
                "use storage.create",
            )
        return False
    if claim.phase == "Bound":
        where = f" (node-local: {claim.node})" if claim.node else ""
        put(STORAGE_READY, True, "Bound", f"PersistentVolumeClaim {name} is bound{where}")
        if claim.node:
            out.status.node_name = claim.node
        return True
    if claim.phase == "Lost":
        put(STORAGE_READY, False, "ClaimLost", f"PersistentVolumeClaim {name} lost its volume")
        return False
    why = _scheduling_message(obs)
    waited = obs.now - claim.created if claim.created else dt.timedelta(0)
    reason = "ClaimUnbound" if waited >= UNBOUND_PATIENCE else "ClaimPending"
    msg = f"PersistentVolumeClaim {name} is not bound after {int(waited.total_seconds())}s"
    if why:
        msg += f": {why}"
    if reason == "ClaimUnbound":
        msg += "; check its StorageClass (kubectl describe pvc) or bind a PersistentVolume to it"
    put(STORAGE_READY, False, reason, msg)
    return False


def _scheduling_message(obs: CacheObservation) -> str:
    pods = [p for p in obs.pods if p.waiting_message]
    return pods[-1].waiting_message if pods else ""


def _owner(obs: CacheObservation) -> render.CacheOwner:
    return render.CacheOwner(name=obs.name, namespace=obs.namespace, uid=obs.uid)


def _download(obs: CacheObservation, out: CachePlan, put: Put, *, storage_ok: bool) -> None:
    status = out.status
    wanted = job_name(obs)
    current = next((j for j in obs.jobs if j.name == wanted), None)
    out.delete_jobs.extend(j for j in obs.jobs if j.name != wanted)
    pod = obs.pods[-1] if obs.pods else None
    event = pod.last_event if pod else None
    if event is not None and event.get("event") == "result" and current is not None and current.failed:
        event = None  # NB: a failed Job has no result: such a line is not the downloader's
    if event is not None:
        _apply_event(status, event)
    if obs.deleting:
        return
    if current is None:
        if status.phase == "Ready" and status.resolved_revision and _same_download(obs):
            put(READY, True, "Ready", f"{_what(obs)} is cached at {status.resolved_revision}")
            put(PROGRESSING, False, "Ready", "nothing to do")
            return
        out.apply.append(
            render.render_job(_owner(obs), key=download_key(obs.spec), spec=obs.spec, options=obs.options)
        )
        _set_phase(status, "Pending", f"starting download Job {wanted}")
        status.progress = None
        put(READY, False, "Pending", status.message or "")
        put(PROGRESSING, True, "Pending", status.message or "")
        return
    if current.succeeded:
        _ready(obs, status, put, event)
        return
    if current.failed:
        _failed(obs, status, put, current, pod, event)
        return
    _running(obs, status, put, pod, event, storage_ok=storage_ok)


def _same_download(obs: CacheObservation) -> bool:
    """Whether the Ready status was reached for what the spec asks now (no new key)."""
    return not obs.jobs  # the Job of a Ready cache is kept; gone only if someone deleted it


def _what(obs: CacheObservation) -> str:
    src = obs.spec.source.hugging_face
    return f"{src.repo}@{src.revision}"


def _set_phase(status: ModelCacheStatus, phase: CachePhase, message: str) -> None:
    status.phase = phase
    status.message = clip(message, MESSAGE_MAX)


def _apply_event(status: ModelCacheStatus, event: Mapping[str, Any]) -> None:
    commit = event.get("commit")
    if isinstance(commit, str) and len(commit) == 40:
        status.resolved_revision = commit
    done, total = event.get("bytes_done"), event.get("bytes_total")
    if isinstance(done, int) and isinstance(total, int):
        rate, eta = _rate_and_eta(event)
        status.progress = CacheProgress(
            bytes_done=done,
            bytes_total=total,
            files_done=_count(event.get("files_done")),
            files_total=_count(event.get("files_total")),
            bytes_per_second=_count(rate),
            eta_seconds=_count(eta),
        )
    if event.get("event") == "result":
        files, total_bytes = event.get("files"), event.get("total_bytes")
        if isinstance(files, int) and isinstance(total_bytes, int):
            status.manifest = CacheManifest(files=files, total_bytes=total_bytes)
            status.progress = CacheProgress(
                bytes_done=total_bytes,
                bytes_total=total_bytes,
                files_done=files,
                files_total=files,
                eta_seconds=0,
            )
        shape = shape_from_event(event.get("shape"))
        if shape is not None:
            status.model_shape = shape


def _count(value: Any) -> int | None:
    """A non-negative whole number from a downloader field (None when absent or not a number)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < 2**63:
        return None  # NB: also NaN and the infinity a JSON `1e999` reads as
    return int(value)


def _rate_and_eta(event: Mapping[str, Any]) -> tuple[float | None, int | None]:
    """The downloader's rate and ETA as ``rate.reported`` believes them: a downloader of an older
    image, or any other writer of the line, that reports an ETA from a first sample's ~0 rate is
    not believed."""
    rate, eta = reported(event.get("rate_bytes_per_s"), event.get("eta_s"))
    return rate, _count(eta)


def _ready(
    obs: CacheObservation, status: ModelCacheStatus, put: Put, event: Mapping[str, Any] | None
) -> None:
    if status.resolved_revision is None:
        _set_phase(status, "Failed", "the download Job succeeded but its result was not readable")
        put(READY, False, "ResultMissing", status.message or "")
        put(PROGRESSING, False, "ResultMissing", "delete the download Job to run it again")
        return
    if status.phase != "Ready":
        status.last_verified = obs.now
    rwo_only = bool(status.access_modes) and not {"ReadWriteMany", "ReadOnlyMany"} & set(status.access_modes)
    pod = obs.pods[-1] if obs.pods else None
    if status.node_name is None and rwo_only and pod is not None and pod.node:
        status.node_name = pod.node
    files = (
        f" ({status.manifest.files} files, {status.manifest.total_bytes} bytes)" if status.manifest else ""
    )
    _set_phase(status, "Ready", f"{_what(obs)} is cached at {status.resolved_revision}{files}, verified")
    put(READY, True, "Ready", status.message or "")
    put(PROGRESSING, False, "Ready", "download complete")


def _failed(
    obs: CacheObservation,
    status: ModelCacheStatus,
    put: Put,
    job: ObservedJob,
    pod: ObservedDownloadPod | None,
    event: Mapping[str, Any] | None,
) -> None:
    code = pod.exit_code if pod else None
    reason, advice = EXIT_REASONS.get(
        code or -1, (job.reason or "JobFailed", job.message or "the download Job failed")
    )
    detail = str(event.get("message") or "") if event and event.get("event") == "error" else ""
    detail = clip(detail, MESSAGE_MAX)  # the downloader's words may quote the endpoint's
    said = event.get("reason") if event and event.get("event") == "error" else None
    if isinstance(said, str) and _REASON.match(said):
        reason = said
    if job.reason == "DeadlineExceeded":
        reason, advice = "DeadlineExceeded", "the download took longer than its deadline"
    msg = f"{_what(obs)}: {reason}: {detail + '; ' if detail else ''}{advice}"
    msg += f" (delete Job {job.name} to retry)"
    _set_phase(status, "Failed", msg)
    put(READY, False, reason, msg)
    put(PROGRESSING, False, reason, msg)


def _running(
    obs: CacheObservation,
    status: ModelCacheStatus,
    put: Put,
    pod: ObservedDownloadPod | None,
    event: Mapping[str, Any] | None,
    *,
    storage_ok: bool,
) -> None:
    phase: CachePhase = "Pending"
    finished = event is not None and (event.get("event") == "result" or event.get("phase") == "Ready")
    if event is not None and event.get("phase") in _LIVE:
        phase = event["phase"]
    elif finished or (pod is not None and pod.phase == "Succeeded"):
        # NB: the downloader is done (all verified); the Job is not yet marked complete.
        phase = "Verifying"
    elif pod is not None and pod.phase == "Running":
        phase = "Resolving"
    if phase == "Verifying" and (finished or (pod is not None and pod.phase == "Succeeded")):
        msg = "Verifying: every file verified; waiting for the download Job to complete"
        _set_phase(status, phase, msg)
        put(READY, False, phase, msg)
        put(PROGRESSING, True, phase, msg)
        return
    if phase == "Pending":
        why = pod.waiting_message if pod and pod.waiting_message else ""
        reason = pod.waiting_reason if pod and pod.waiting_reason else "Pending"
        msg = "waiting for the download pod" + (f": {reason}: {why}" if why else "")
        if not storage_ok:
            msg = "waiting for the claim to be bound" + (f": {why}" if why else "")
    else:
        msg = _progress_message(phase, status, event)
    _set_phase(status, phase, msg)
    put(READY, False, phase, msg)
    put(PROGRESSING, True, phase, msg)


def _progress_message(phase: str, status: ModelCacheStatus, event: Mapping[str, Any] | None) -> str:
    p = status.progress
    text = phase
    if p is not None and p.bytes_total:
        text += f": {p.bytes_done} of {p.bytes_total} bytes ({100 * p.bytes_done // p.bytes_total}%)"
    if event is not None:
        files_done, files_total = event.get("files_done"), event.get("files_total")
        if isinstance(files_done, int) and isinstance(files_total, int) and files_total:
            text += f", {files_done} of {files_total} files"
        rate, eta = _rate_and_eta(event)
        if rate is not None:
            text += f", {format_rate(rate)}"
        if eta is not None:
            text += f", ETA {format_eta(eta)}"
    return text


def claims_of(workloads: Sequence[Mapping[str, Any]], cache: str) -> tuple[str, ...]:
    """Names of the workloads (raw objects) whose ``spec.model.cacheRef.name`` is ``cache``."""
    names = []
    for w in workloads:
        model = (w.get("spec") or {}).get("model") or {}
        ref = model.get("cacheRef") or {}
        if ref.get("name") == cache:
            names.append(str((w.get("metadata") or {}).get("name")))
    return tuple(sorted(names))
