"""The inventory of a cache location: what is on the volume (a scan) joined with what tracks it.

Pure. A snapshot on the volume is *tracked* when a ModelCache stored at the location resolved to
its commit. Protection, in order: ``untracked``, ``pinned`` (``spec.pinned``), ``workload_claim``
(``status.claims``), ``download_in_progress`` (the ModelCache is Pending/Resolving/Downloading/
Verifying), ``retention_age`` (last use — ``status.lastUsed``, else the adoption's recorded last
use, else the ModelCache's creation — younger than ``min_age_days``), else ``eligible``.
:func:`select_for_prune` picks eligible revisions oldest first until the byte targets are met.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sparkrun_operator.ops import kube
from sparkrun_operator.render import keys

LIVE_PHASES = frozenset({"Pending", "Resolving", "Downloading", "Verifying"})


@dataclass(frozen=True)
class Tracker:
    """A ModelCache at the location, as far as retention cares."""

    name: str
    repo: str
    commit: str | None
    revision: str
    pinned: bool
    claims: tuple[str, ...]
    phase: str | None
    last_used: dt.datetime | None
    deleting: bool = False
    #: The ModelCache's UID: what retention deletes is this object, never a same-named successor.
    uid: str | None = None

    @classmethod
    def of(cls, cache: Mapping[str, Any]) -> Tracker:
        meta, spec, status = cache.get("metadata") or {}, cache.get("spec") or {}, cache.get("status") or {}
        source = (spec.get("source") or {}).get("huggingFace") or {}
        annotations = meta.get("annotations") or {}
        last = (
            kube.parse_time(status.get("lastUsed"))
            or kube.parse_time(annotations.get(keys.ANNOTATION_ADOPTED_LAST_USED))
            or kube.parse_time(meta.get("creationTimestamp"))
        )
        return cls(
            name=str(meta.get("name") or ""),
            repo=str(source.get("repo") or ""),
            commit=status.get("resolvedRevision"),
            revision=str(source.get("revision") or "main"),
            pinned=bool(spec.get("pinned")),
            claims=tuple(sorted(str(c) for c in status.get("claims") or ())),
            phase=status.get("phase"),
            last_used=last,
            deleting=bool(meta.get("deletionTimestamp")),
            uid=meta.get("uid") or None,
        )


@dataclass
class Entry:
    """One row of a report (``entries[]``) and what the verb decided for it."""

    repo: str
    commit: str
    snapshot: str
    present: bool
    logical_bytes: int = 0
    reclaimable_bytes: int = 0
    refs: list[str] = field(default_factory=list)
    trackers: list[Tracker] = field(default_factory=list)
    mtime: float | None = None
    eligible: bool = False
    reason_code: str = "untracked"
    reason: str = ""
    action: str | None = None

    @property
    def tracked(self) -> bool:
        return bool(self.trackers)

    @property
    def pinned(self) -> bool:
        return any(t.pinned for t in self.trackers)

    @property
    def claims(self) -> list[str]:
        return sorted({c for t in self.trackers for c in t.claims})

    @property
    def last_used(self) -> dt.datetime | None:
        times = [t.last_used for t in self.trackers if t.last_used is not None]
        return max(times) if times else None

    def to_wire(self, namespace: str) -> dict[str, Any]:
        last = self.last_used
        return {
            "repo": self.repo,
            "revision": self.commit,
            "snapshot": self.snapshot,
            "tracked": self.tracked,
            "present": self.present,
            "last_used": last.timestamp() if last is not None else None,
            "logical_bytes": self.logical_bytes,
            "reclaimable_bytes": self.reclaimable_bytes,
            "pinned": self.pinned,
            "claims": {
                c: {"kind": "InferenceWorkload", "namespace": namespace, "name": c} for c in self.claims
            },
            "usage": (
                {
                    "model_caches": [t.name for t in self.trackers],
                    "refs": list(self.refs),
                    "phase": self.trackers[0].phase,
                }
                if self.trackers
                else None
            ),
            "eligible": self.eligible,
            "reason": self.reason,
            "reason_code": self.reason_code,
            "action": self.action,
        }


def join(rows: Iterable[Mapping[str, Any]], trackers: Sequence[Tracker]) -> list[Entry]:
    """Entries for every scanned snapshot, and ``present: false`` ones for trackers with none."""
    out: list[Entry] = []
    seen: set[tuple[str, str]] = set()
    for row in rows:
        repo, commit = str(row["repo"]), str(row["commit"])
        seen.add((repo, commit))
        out.append(
            Entry(
                repo=repo,
                commit=commit,
                snapshot=str(row["snapshot"]),
                present=True,
                logical_bytes=int(row.get("logical_bytes") or 0),
                reclaimable_bytes=int(row.get("private_bytes") or 0),
                refs=list(row.get("refs") or []),
                trackers=[t for t in trackers if t.repo == repo and t.commit == commit],
                mtime=row.get("mtime"),
            )
        )
    for t in trackers:
        if t.commit and (t.repo, t.commit) not in seen:
            seen.add((t.repo, t.commit))
            out.append(Entry(repo=t.repo, commit=t.commit, snapshot="", present=False, trackers=[t]))
    return sorted(out, key=lambda e: (e.repo, e.commit))


def busy_repos(trackers: Iterable[Tracker]) -> frozenset[str]:
    """Repositories a ModelCache at the location is downloading or verifying (whatever commit:
    an unresolved download may write any snapshot and reuse any blob of its repository)."""
    return frozenset(t.repo for t in trackers if t.phase in LIVE_PHASES and not t.deleting)


def protect(
    entries: Iterable[Entry], *, now: dt.datetime, min_age_days: float, busy: frozenset[str] = frozenset()
) -> None:
    """Set each entry's eligibility and protection reason (see the module docstring)."""
    age_limit = dt.timedelta(days=min_age_days)
    for e in entries:
        e.eligible = False
        if not e.present:
            e.reason_code, e.reason = "absent", "tracked by a ModelCache but not on the volume"
        elif not e.tracked:
            e.reason_code = "untracked"
            e.reason = "no ModelCache tracks this revision; enrol it with model_cache.adopt"
        elif e.pinned:
            e.reason_code, e.reason = (
                "pinned",
                f"pinned (ModelCache {', '.join(t.name for t in e.trackers if t.pinned)})",
            )
        elif e.claims:
            e.reason_code, e.reason = "workload_claim", f"used by InferenceWorkloads {', '.join(e.claims)}"
        elif e.repo in busy:
            e.reason_code, e.reason = (
                "download_in_progress",
                "a ModelCache is downloading or verifying this model",
            )
        elif e.last_used is not None and now - e.last_used < age_limit:
            days = (now - e.last_used).total_seconds() / 86400
            e.reason_code = "retention_age"
            e.reason = f"last used {days:.1f} days ago, younger than min_age_days {min_age_days:g}"
        else:
            e.eligible, e.reason_code, e.reason = (
                True,
                "eligible",
                "unprotected and older than the minimum age",
            )


def select_for_prune(
    entries: Sequence[Entry], *, free_bytes: int, max_bytes: int | None, min_free_bytes: int | None
) -> tuple[list[Entry], bool]:
    """Eligible entries to remove, least recently used first, and whether the targets are met."""
    candidates = sorted(
        (e for e in entries if e.eligible),
        key=lambda e: (e.last_used.timestamp() if e.last_used else 0.0, e.repo, e.commit),
    )
    if max_bytes is None and min_free_bytes is None:
        return candidates, True
    tracked = sum(e.reclaimable_bytes for e in entries if e.tracked and e.present)

    def met(freed: int) -> bool:
        budget_ok = max_bytes is None or tracked - freed <= max_bytes
        free_ok = min_free_bytes is None or free_bytes + freed >= min_free_bytes
        return budget_ok and free_ok

    chosen: list[Entry] = []
    freed = 0
    for e in candidates:
        if met(freed):
            break
        chosen.append(e)
        freed += e.reclaimable_bytes
    return chosen, met(freed)


def report(
    entries: Sequence[Entry],
    *,
    namespace: str,
    host: str,
    cache_root: str,
    location: Mapping[str, Any],
    dry_run: bool,
    free_bytes: int,
    planned_bytes: int = 0,
    reclaimed_bytes: int = 0,
    free_bytes_after: int | None = None,
    measured: bool = False,
    target_met: bool = True,
) -> dict[str, Any]:
    """One cache report (the result of list, pin, prune, reconcile, adopt and delete)."""
    return {
        "host": host,
        "cache_root": cache_root,
        "dry_run": dry_run,
        "entries": [e.to_wire(namespace) for e in entries],
        "free_bytes": free_bytes,
        "free_bytes_after": free_bytes_after,
        "reclaimed_bytes": reclaimed_bytes,
        "planned_bytes": planned_bytes,
        "target_met": target_met,
        "budget_scope": "private_managed_snapshots",
        "reclaimed_bytes_kind": "allocated_bytes_estimate",
        "free_bytes_after_kind": "measured" if measured else "projected",
        "location": dict(location),
    }
