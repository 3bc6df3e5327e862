"""What ``sparkrun-k8s cache`` prints, as pure functions of ModelCache objects (no cluster).

A row per cache (:func:`cache_row`), the text table (:func:`ls_text`), one cache in full
(:func:`inspect_text`), a prune report (:func:`prune_text`) and the download progress line
(:func:`progress_line`). Rates and ETAs come from the project's one meter
(:class:`sparkrun_operator.rate.RateMeter`, one per cache, fed what this client saw change): none
until it has a real sample (2 s and 256 KiB), so a 1.5 MiB file that finishes a second after the
first sample never reads ``0.0 MB/s, ETA 15686s``.
Every value from the cluster goes through ``common.printable`` before it is printed.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sparkrun_operator.cli import common, view
from sparkrun_operator.rate import RateMeter, format_eta, format_rate

#: Width of a progress bar, in cells.
BAR_WIDTH: Final = 24
#: Phases in which a cache is moving bytes.
ACTIVE: Final = frozenset({"Pending", "Resolving", "Downloading", "Verifying"})
#: Names of workloads shown per cache in the table (the rest are counted).
SHOWN_USERS: Final = 3


def _p(value: Any) -> str:
    return str(common.printable("" if value is None else value))


def human_bytes(count: int | float | None) -> str:
    """``1.5 MiB`` (``view.size``), ``-`` for no number."""
    return view.size(count) or "-"


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def name_of(cache: Mapping[str, Any]) -> tuple[str, str]:
    meta = cache.get("metadata") or {}
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def cache_row(cache: Mapping[str, Any]) -> dict[str, Any]:
    """One cache as scripts read it (``-o json``) and the table shows it."""
    namespace, name = name_of(cache)
    spec, status = cache.get("spec") or {}, cache.get("status") or {}
    source = (spec.get("source") or {}).get("huggingFace") or {}
    progress = status.get("progress") or {}
    manifest = status.get("manifest") or {}
    done, total = _int(progress.get("bytesDone")), _int(progress.get("bytesTotal"))
    size = _int(manifest.get("totalBytes")) or total
    phase = status.get("phase") or "Pending"
    percent = 100.0 if phase == "Ready" else (100.0 * done / total if total else None)
    return {
        "namespace": namespace,
        "name": name,
        "model": source.get("repo"),
        "revision": source.get("revision", "main"),
        "resolved_revision": status.get("resolvedRevision"),
        "phase": phase,
        "size_bytes": size or None,
        "bytes_done": done,
        "bytes_total": total,
        "files_done": progress.get("filesDone"),
        "files_total": progress.get("filesTotal") or manifest.get("files"),
        "percent": None if percent is None else round(percent, 1),
        "pinned": bool(spec.get("pinned")),
        "used_by": list(status.get("claims") or []),
        "message": status.get("message"),
    }


def _revision(row: Mapping[str, Any]) -> str:
    resolved = row.get("resolved_revision")
    wanted = _p(row.get("revision"))
    if not resolved:
        return wanted
    short = _p(resolved)[:12]
    return short if wanted == resolved else f"{wanted} ({short})"


def _users(users: Sequence[str]) -> str:
    shown = ", ".join(_p(u) for u in users[:SHOWN_USERS])
    more = len(users) - SHOWN_USERS
    return (shown + (f", +{more} more" if more > 0 else "")) or "-"


def _progress_cell(row: Mapping[str, Any]) -> str:
    if row["phase"] == "Ready":
        return "100%"
    if row["percent"] is None:
        return "-"
    return f"{row['percent']:.0f}%"


def ls_text(data: Mapping[str, Any]) -> str:
    """The table of ``cache ls``: one line per cache."""
    rows: list[Mapping[str, Any]] = data.get("caches") or []
    if not rows:
        where = "any namespace" if data.get("all_namespaces") else f"namespace {_p(data.get('namespace'))}"
        return f"no ModelCaches in {where}\n"
    wide = bool(data.get("all_namespaces"))
    header = ["NAMESPACE"] if wide else []
    header += ["NAME", "MODEL", "REVISION", "PHASE", "SIZE", "PROGRESS", "PINNED", "USED BY"]
    table = [header]
    for row in rows:
        line = [_p(row["namespace"])] if wide else []
        line += [
            _p(row["name"]),
            _p(row["model"]),
            _revision(row),
            _p(row["phase"]),
            human_bytes(row["size_bytes"]) if row["size_bytes"] else "-",
            _progress_cell(row),
            "yes" if row["pinned"] else "no",
            _users(row["used_by"]),
        ]
        table.append(line)
    return columns(table)


def columns(table: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns two spaces apart (kubectl's look)."""
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in table
    )


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """``████████░░░░``: ``fraction`` (clamped to 0..1) of ``width`` cells filled."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def progress_line(row: Mapping[str, Any], meter: RateMeter | None) -> str:
    """One cache's progress: phase, bar, bytes, files, and the rate and ETA once ``meter`` (fed
    the cache's ``bytes_done``) has a real sample."""
    phase = _p(row["phase"])
    total, done = row["bytes_total"], row["bytes_done"]
    if row["phase"] == "Ready":
        size = row["size_bytes"] or total
        return f"{phase:<11} {bar(1.0)} 100%  {human_bytes(size)}"
    if not total:
        return f"{phase:<11} {bar(0.0)}   -   {_p(row.get('message') or 'waiting for the download to start')}"
    fraction = done / total if total else 0.0
    parts = [
        f"{phase:<11} {bar(fraction)} {fraction * 100:3.0f}%",
        f"{human_bytes(done)}/{human_bytes(total)}",
    ]
    rate = meter.rate() if meter is not None else None
    if meter is not None and rate is not None and rate > 0 and row["phase"] in ACTIVE:
        parts.append(format_rate(rate))
        eta = meter.eta_for(total - done)
        if eta is not None and total > done:
            parts.append(f"ETA {format_eta(eta)}")
    if row.get("files_total"):  # NB: last: a narrow terminal cuts it first
        parts.append(f"{_int(row.get('files_done'))}/{_int(row['files_total'])} files")
    return "  ".join(parts)


def key_of(row: Mapping[str, Any]) -> str:
    """``namespace/name`` of a row (the key of its meter)."""
    return f"{row['namespace']}/{row['name']}"


def watch_lines(
    rows: Iterable[Mapping[str, Any]], meters: Mapping[str, RateMeter], *, wide: bool
) -> list[str]:
    """The watch screen: a line per cache, name first, then :func:`progress_line` (``meters``:
    a meter per :func:`key_of`)."""
    rows = list(rows)
    if not rows:
        return ["no ModelCaches (yet)"]
    names = [(f"{_p(r['namespace'])}/" if wide else "") + _p(r["name"]) for r in rows]
    width = max(len(n) for n in names)
    return [
        f"{n.ljust(width)}  {progress_line(r, meters.get(key_of(r)))}"
        for n, r in zip(names, rows, strict=True)
    ]


def _when(value: Any, now: dt.datetime | None = None) -> str:
    if not value:
        return "-"
    stamp = view.parse_time(value)
    if stamp is None:
        return _p(value)
    ago = ((now or dt.datetime.now(dt.UTC)) - stamp).total_seconds()
    return f"{_p(value)} ({format_eta(ago)} ago)"


def inspect_data(
    cache: Mapping[str, Any], events: Sequence[Mapping[str, Any]], files: Mapping[str, Any] | None
) -> dict[str, Any]:
    """What ``cache inspect`` shows: the row, storage, shape, conditions, events, and the files
    (when the daemon resolved them)."""
    spec, status = cache.get("spec") or {}, cache.get("status") or {}
    storage = spec.get("storage") or {}
    source = (spec.get("source") or {}).get("huggingFace") or {}
    data = {
        **cache_row(cache),
        "endpoint": source.get("endpoint"),
        "verify": spec.get("verify", "size"),
        "claim": status.get("claimName") or storage.get("claimName") or "",
        "path": storage.get("path", "/"),
        "node": status.get("nodeName"),
        "manifest": status.get("manifest"),
        "model_shape": status.get("modelShape"),
        "missing": list(status.get("missing") or []),
        "invalid": list(status.get("invalid") or []),
        "last_used": status.get("lastUsed"),
        "last_verified": status.get("lastVerified"),
        "conditions": [
            {k: c.get(k) for k in ("type", "status", "reason", "message", "lastTransitionTime")}
            for c in status.get("conditions") or []
        ],
        "events": [
            {
                "type": e.get("type"),
                "reason": e.get("reason"),
                "message": e.get("message"),
                "count": e.get("count") or 1,
                "last": e.get("lastTimestamp")
                or e.get("eventTime")
                or (e.get("metadata") or {}).get("creationTimestamp"),
            }
            for e in events
        ],
    }
    if files is not None:
        data["files"] = files
    return data


def inspect_text(data: Mapping[str, Any]) -> str:
    """``cache inspect`` for a person: the facts, the files, conditions and events."""
    lines = [f"ModelCache {_p(data['namespace'])}/{_p(data['name'])}"]

    def fact(label: str, value: Any) -> None:
        lines.append(f"  {label + ':':<15}{value}")

    fact("Model", f"{_p(data['model'])} @ {_revision(data)}")
    if data.get("endpoint"):
        fact("Endpoint", _p(data["endpoint"]))
    fact("Phase", _p(data["phase"]) + (f": {_p(data['message'])}" if data.get("message") else ""))
    if data["phase"] in ACTIVE and data["bytes_total"]:
        fact("Progress", progress_line(data, None))
    manifest = data.get("manifest") or {}
    if manifest:
        fact("Files", f"{_int(manifest.get('files'))}, {human_bytes(_int(manifest.get('totalBytes')))}")
    fact(
        "Storage",
        f"claim {_p(data['claim']) or '-'}, path {_p(data['path'])}"
        + (f", node {_p(data['node'])}" if data.get("node") else ""),
    )
    fact(
        "Verify",
        _p(data["verify"]) + (f", last {_when(data['last_verified'])}" if data.get("last_verified") else ""),
    )
    fact("Pinned", "yes" if data["pinned"] else "no")
    fact("Used by", _users(data["used_by"]) if data["used_by"] else "no workload")
    fact("Last used", _when(data.get("last_used")))
    shape = data.get("model_shape") or {}
    if shape:
        fact("Shape", ", ".join(f"{_p(k)}={_p(v)}" for k, v in sorted(shape.items())))
    for label in ("missing", "invalid"):
        if data.get(label):
            fact(
                label.capitalize(),
                ", ".join(_p(f) for f in data[label][:10])
                + (f", +{len(data[label]) - 10} more" if len(data[label]) > 10 else ""),
            )
    files = data.get("files")
    if isinstance(files, Mapping):
        lines.append("Files:")
        table = [["PATH", "SIZE", "DIGEST"]]
        for f in files.get("files") or []:
            algorithm, checksum = _p(f.get("checksum_algorithm")), _p(f.get("checksum"))
            table.append([_p(f.get("path")), human_bytes(_int(f.get("size"))), f"{algorithm}:{checksum}"])
        lines.extend("  " + line for line in columns(table).splitlines())
    report = files.get("verify") if isinstance(files, Mapping) else None
    if isinstance(report, Mapping):
        lines.append(f"Verified on the volume: {_p(report.get('detail'))}")
        for f in (report.get("failures") or [])[:20]:
            lines.append(f"  {_p(f.get('reason'))}: {_p(f.get('path'))}")
    lines.append("Conditions:")
    if data["conditions"]:
        table = [["TYPE", "STATUS", "REASON", "MESSAGE"]]
        table += [
            [_p(c.get("type")), _p(c.get("status")), _p(c.get("reason")), _p(c.get("message"))[:120]]
            for c in data["conditions"]
        ]
        lines.extend("  " + line for line in columns(table).splitlines())
    else:
        lines.append("  none yet")
    lines.append("Events:")
    if data["events"]:
        table = [["TYPE", "REASON", "COUNT", "MESSAGE"]]
        table += [
            [_p(e.get("type")), _p(e.get("reason")), str(e.get("count")), _p(e.get("message"))[:120]]
            for e in data["events"]
        ]
        lines.extend("  " + line for line in columns(table).splitlines())
    else:
        lines.append("  none")
    return "\n".join(lines) + "\n"


def pin_text(data: Mapping[str, Any]) -> str:
    what = f"ModelCache {_p(data['namespace'])}/{_p(data['name'])}"
    if not data["changed"]:
        return f"{what}: already {'pinned' if data['pinned'] else 'not pinned'}\n"
    if data["pinned"]:
        return f"{what}: pinned (never evicted; sparkrun-k8s cache pin {_p(data['name'])} --unpin)\n"
    return f"{what}: unpinned (may be evicted once unused for its retention.minAgeDays)\n"


def prune_text(data: Mapping[str, Any]) -> str:
    """A ``model_cache.prune`` report: what it removed (or would), what it kept and why."""
    dry = bool(data.get("dry_run"))
    done: list[Mapping[str, Any]] = []
    kept: list[Mapping[str, Any]] = []
    for e in data.get("entries") or []:
        (done if e.get("action") in ("would_remove", "removed") else kept).append(e)
    where = _p((data.get("location") or {}).get("source") or data.get("cache_root"))
    lines = [f"{'would remove' if dry else 'removed'} {len(done)} revision(s) at {where}"]
    for e in done:
        names = ", ".join(_p(n) for n in ((e.get("usage") or {}).get("model_caches") or [])) or "untracked"
        size = human_bytes(_int(e.get("reclaimable_bytes")))
        lines.append(f"  {_p(e.get('repo'))}@{_p(e.get('revision'))[:12]}  {size}  (ModelCache {names})")
    for e in kept:
        lines.append(f"  kept {_p(e.get('repo'))}@{_p(e.get('revision'))[:12]}: {_p(e.get('reason'))}")
    planned = _int(data.get("planned_bytes")) if dry else _int(data.get("reclaimed_bytes"))
    after = data.get("free_bytes_after")
    after_text = human_bytes(_int(after)) if after is not None else "?"
    lines.append(
        f"{'would free' if dry else 'freed'} {human_bytes(planned)}; free "
        f"{human_bytes(_int(data.get('free_bytes')))} -> {after_text}"
        + ("" if data.get("target_met", True) else " (target not met)")
    )
    if dry and done:
        lines.append("apply it: sparkrun-k8s cache prune ... without --dry-run")
    return "\n".join(lines) + "\n"
