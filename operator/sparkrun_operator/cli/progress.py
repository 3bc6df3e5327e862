"""What ``sparkrun-k8s run`` shows while a workload starts: its startup timeline
(``status.startup``), phase, the condition that says what it waits for, and the download of the
ModelCache it waits on; once Ready, where it answers and a request that works. Pure functions of
the objects (unit-tested); ``cli/run.py`` reads the objects and draws the result (a live block on
a terminal, one line per change elsewhere).

Every string taken from the objects passes through :func:`common.printable` (the operator writes
them, but messages quote tenants' specs, recipes and engine logs).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator.cli import common
from sparkrun_operator.cli.view import parse_time, size
from sparkrun_operator.rate import format_eta, format_rate, reported

#: The stages of every cold start, in order; hooks (a recipe's) are shown only when they ran.
STAGES: Final = ("accepted", "cacheReady", "scheduled", "running", "ready")
HOOKS: Final = ("mods", "preExec", "postExec", "postCommands")
#: Longest message shown (a condition's or a failure's); the rest is cut with an ellipsis.
MESSAGE_MAX: Final = 240
#: Phases that end ``run`` with exit 1.
FAILED_PHASES: Final = frozenset({"Failed", "Degraded"})

DONE, CURRENT, PENDING, FAILED, SKIPPED = "✓", "▸", "·", "✗", "-"


@dataclass(frozen=True)
class StageRow:
    """One line of the timeline: a stage, whether it was reached, when (seconds after the
    workload was created), by how many replicas, and a hook's outcome."""

    stage: str
    mark: str
    offset: float | None = None
    replicas: int = 0
    note: str = ""


@dataclass(frozen=True)
class Snapshot:
    """What the display shows of a workload at one moment."""

    name: str
    namespace: str
    phase: str
    condition: str
    rows: tuple[StageRow, ...]
    cache: str | None
    ready: bool
    failed: bool
    want_replicas: int


def clip(text: Any, limit: int = MESSAGE_MAX) -> str:
    """``text`` made printable and cut to ``limit`` characters."""
    value = str(common.printable(str(text)))
    return value if len(value) <= limit else value[: limit - 1] + "…"


def duration(seconds: float) -> str:
    """``7s``, ``3m04s``, ``2h05m`` (whole seconds gone by, as ``rate.format_eta`` writes them)."""
    return format_eta(max(0, int(seconds)))


def conditions_of(obj: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    found = ((obj.get("status") or {}).get("conditions")) or []
    return {str(c.get("type")): c for c in found if isinstance(c, Mapping)}


def current_generation(obj: Mapping[str, Any]) -> bool:
    """Whether the status describes the spec as it is now (``observedGeneration``)."""
    status = obj.get("status") or {}
    return bool(status) and status.get("observedGeneration") == (obj.get("metadata") or {}).get("generation")


def is_ready(obj: Mapping[str, Any]) -> bool:
    ready = conditions_of(obj).get("Ready") or {}
    return current_generation(obj) and ready.get("status") == "True"


def condition_line(obj: Mapping[str, Any]) -> str:
    """The condition a person wants to read now: ``Ready``, else what is wrong (Degraded), else
    why it is not Ready, else what progresses; ``reason: message``."""
    conditions = conditions_of(obj)
    if is_ready(obj):
        return "Ready"
    degraded = conditions.get("Degraded") or {}
    ready = conditions.get("Ready") or {}
    progressing = conditions.get("Progressing") or {}
    for chosen, title in ((degraded, "Degraded"), (ready, "NotReady"), (progressing, "Progressing")):
        if chosen and (title != "Degraded" or chosen.get("status") == "True"):
            reason, message = clip(chosen.get("reason") or title, 64), clip(chosen.get("message") or "")
            return f"{reason}: {message}" if message else reason
    return "waiting for the operator"


def timeline(obj: Mapping[str, Any]) -> tuple[StageRow, ...]:
    """The stages of ``status.startup`` as rows: every cold-start stage (the one after the last
    reached marked current; one passed without being reached, cacheReady without a cache, marked
    skipped) and the hooks that ran."""
    status = obj.get("status") or {}
    created = parse_time((obj.get("metadata") or {}).get("creationTimestamp"))
    events = [e for e in (status.get("startup") or []) if isinstance(e, Mapping)]
    reached = {str(e.get("stage")) for e in events}
    last = max((i for i, stage in enumerate(STAGES) if stage in reached), default=-1)
    rows: list[StageRow] = []
    for index, stage in enumerate((*STAGES, *HOOKS)):
        mine = [e for e in events if e.get("stage") == stage]
        if not mine:
            if stage not in HOOKS:
                mark = SKIPPED if index < last else CURRENT if index == last + 1 else PENDING
                rows.append(StageRow(stage, mark))
            continue
        times = [t for t in (parse_time(e.get("time")) for e in mine) if t is not None]
        offset = (min(times) - created).total_seconds() if times and created else None
        replicas = len({e.get("replica") for e in mine if e.get("replica") is not None})
        outcomes = {str(e.get("outcome")) for e in mine if e.get("outcome")}
        mark = FAILED if "failed" in outcomes else SKIPPED if outcomes == {"skipped"} else DONE
        messages = [clip(e["message"], 120) for e in mine if e.get("message")]
        rows.append(StageRow(stage, mark, offset, replicas, messages[-1] if messages else ""))
    return tuple(rows)


def cache_line(cache: Mapping[str, Any] | None) -> str | None:
    """The ModelCache's download as one line. Its rate and ETA are the downloader's, measured by
    the project's one meter (``rate.RateMeter``: none before a real sample) and copied into the
    status by the operator; shown only while Downloading, and only as the one rule for a
    reported rate believes them (``rate.reported``: no ``0 B/s``, an ETA only beside a rate of
    at least ``rate.MIN_RATE``), the rule the operator wrote the status message by."""
    if not cache:
        return None
    name = clip((cache.get("metadata") or {}).get("name") or "?", 63)
    status = cache.get("status") or {}
    phase = clip(status.get("phase") or "Pending", 32)
    progress = status.get("progress") or {}
    done, total = _count(progress.get("bytesDone")), _count(progress.get("bytesTotal"))
    line = f"cache {name}: {phase}"
    if total:
        line += f" {min(100, done * 100 // total)}% ({size(done)} of {size(total)})"
    files_done, files_total = _count(progress.get("filesDone")), _count(progress.get("filesTotal"))
    if files_total:
        line += f", {files_done}/{files_total} files"
    rate, eta = reported(progress.get("bytesPerSecond"), progress.get("etaSeconds"))
    if rate is not None and phase == "Downloading":
        line += f", {format_rate(rate)}"
        if eta is not None:
            line += f", ETA {format_eta(eta)}"
    return line


def _count(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def cache_name(obj: Mapping[str, Any]) -> str | None:
    """The ModelCache the workload waits for: its ``spec.model.cacheRef`` while CacheReady is not
    True."""
    ref = (((obj.get("spec") or {}).get("model") or {}).get("cacheRef") or {}).get("name")
    if not isinstance(ref, str) or not ref or len(ref) > 253:
        return None
    if (conditions_of(obj).get("CacheReady") or {}).get("status") == "True":
        return None
    return ref


def snapshot(obj: Mapping[str, Any], cache: Mapping[str, Any] | None = None) -> Snapshot:
    metadata, status = obj.get("metadata") or {}, obj.get("status") or {}
    phase = clip(status.get("phase") or "Pending", 32)
    return Snapshot(
        name=clip(metadata.get("name") or "?", 63),
        namespace=clip(metadata.get("namespace") or "?", 63),
        phase=phase,
        condition=condition_line(obj),
        rows=timeline(obj),
        cache=cache_line(cache),
        ready=is_ready(obj),
        failed=current_generation(obj) and phase in FAILED_PHASES,
        want_replicas=_count((obj.get("spec") or {}).get("replicas", 1)),
    )


def row_text(row: StageRow, want_replicas: int) -> str:
    """``✓ scheduled     +2s  (2/2 replicas)``."""
    line = f"{row.mark} {row.stage:<13}"
    if row.offset is not None:
        line += f" +{duration(row.offset)}"
    if want_replicas > 1 and row.replicas:
        line += f"  ({row.replicas}/{want_replicas} replicas)"
    if row.note:
        line += f"  {row.note}"
    return line.rstrip()


def block(snap: Snapshot, elapsed: float, *, final: bool = False) -> str:
    """The live display: a heading, the timeline, phase and condition, the cache, elapsed time
    (``final``: the last frame, without the elapsed time)."""
    lines = [f"workload {snap.name} in {snap.namespace}"]
    lines += ["  " + row_text(row, snap.want_replicas) for row in snap.rows]
    lines.append(f"  phase {snap.phase}: {snap.condition}")
    if snap.cache:
        lines.append(f"  {snap.cache}")
    if not final:
        lines.append(f"  elapsed {duration(elapsed)} (Ctrl-C to stop waiting)")
    return "\n".join(lines)


def changes(before: Snapshot | None, now: Snapshot) -> list[str]:
    """Lines for a log of the start (standard output not a terminal): each stage reached, each new
    phase or condition, each new cache line."""
    out: list[str] = []
    seen = {row.stage: row for row in (before.rows if before else ())}
    for row in now.rows:
        reached = row.mark in (DONE, FAILED) or (row.mark == SKIPPED and row.offset is not None)
        if reached and seen.get(row.stage) != row:
            out.append(row_text(row, now.want_replicas))
    if before is None or (before.phase, before.condition) != (now.phase, now.condition):
        out.append(f"phase {now.phase}: {now.condition}")
    if now.cache and (before is None or before.cache != now.cache):
        out.append(now.cache)
    return out


def failure_text(obj: Mapping[str, Any]) -> str:
    """``status.lastFailure`` as a few lines (reason, where, message, the last log lines)."""
    failure = (obj.get("status") or {}).get("lastFailure") or {}
    if not failure:
        return condition_line(obj)
    where: list[str] = []
    if failure.get("replica") is not None:
        where.append(f"replica {failure['replica']}")
    if failure.get("role"):
        where.append(clip(failure["role"], 32) + (f" rank {failure['rank']}" if failure.get("rank") else ""))
    if failure.get("object"):
        where.append(clip(failure["object"], 253))
    if failure.get("exitCode") is not None:
        where.append(f"exit code {failure['exitCode']}")
    lines = [f"{clip(failure.get('reason') or 'Failed', 64)}" + (f" ({', '.join(where)})" if where else "")]
    if failure.get("message"):
        lines.append(clip(failure["message"]))
    log: Sequence[Any] = failure.get("log") or []
    lines += [f"  | {clip(line, 200)}" for line in list(log)[-10:]]
    return "\n".join(lines)


def request_body(served_name: str) -> str:
    return json.dumps(
        {"model": served_name, "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 32}
    )


def try_line(url: str, served_name: str, *, proxy_path: str | None = None) -> str:
    """A request that works: ``curl`` to ``url``, or (``proxy_path``: through the apiserver's
    Service proxy) ``kubectl create --raw``, which authenticates as your kubeconfig does."""
    body = shlex.quote(request_body(served_name))
    if proxy_path is not None:
        path = shlex.quote(f"{proxy_path}/v1/chat/completions")
        return f"echo {body} | kubectl create --raw {path} -f -"
    target = shlex.quote(f"{url}/v1/chat/completions")  # NB: a URL from the cluster goes to a shell
    # NB: -w '\n': the JSON answer ends without one, and would run into the next prompt
    return f"curl -sS -w '\\n' {target} -H 'Content-Type: application/json' -d {body}"


def reach_text(reach: dict[str, Any]) -> list[str]:
    clean = common.printable(reach)
    return [
        f"  model  {clean['servedName']}",
        f"  url    {clean['url']}",
        f"  via    {clean['via']}",
        "  try:",
        f"    {clean['try']}",
    ]
