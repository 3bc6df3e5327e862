"""Text helpers the CLI's verbs share: ages, a condition a person reads at a glance, the startup
timeline, byte sizes, and rich tables rendered to a string.

Pure functions over the objects as the apiserver returns them (dicts): nothing here talks to a
cluster. Every string that comes from a tenant goes through :func:`common.printable` before it
reaches a terminal; these helpers return text that already did.
"""

from __future__ import annotations

import datetime as dt
import io
import shutil
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from sparkrun_operator.api import meta
from sparkrun_operator.cli.common import printable

#: Characters of a condition's message shown in a one-line summary (the rest is ``...``).
SUMMARY_CHARS: Final = 100

#: Conditions whose ``True`` is bad news, and whose ``False`` is: a summary shows these first.
_BAD_WHEN_TRUE: Final = ("Failed", "Degraded")
_BAD_WHEN_FALSE: Final = (
    "Scheduled",
    "CacheReady",
    "RecipeResolved",
    "Valid",
    "SourcesAvailable",
    "Routable",
    "QueueReady",
    "Admitted",
    "Synced",
    "StorageReady",
    "Owned",
)

#: One stage of a startup timeline: (stage, time, replica, outcome, message).
Stage = tuple[str, str, int | None, str | None, str | None]


def parse_time(value: Any) -> dt.datetime | None:
    """An RFC 3339 timestamp (``2026-01-02T03:04:05Z``, fractions allowed) as an aware datetime;
    ``None`` when absent or unreadable."""
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    return meta.parse_time(value)


def duration(seconds: float) -> str:
    """``45s``, ``5m``, ``3h12m``, ``2d``: the largest unit or two, as kubectl shows ages."""
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    minutes = seconds // 60
    if minutes < 60:
        return f"{minutes}m"
    hours = minutes // 60
    if hours < 10:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    return f"{hours // 24}d"


def age(timestamp: Any, now: dt.datetime | None = None) -> str:
    """How long ago ``timestamp`` was (``5m``); ``""`` when there is none."""
    when = parse_time(timestamp)
    if when is None:
        return ""
    now = now or dt.datetime.now(dt.UTC)
    return duration((now - when).total_seconds())


def clip(text: Any, limit: int = SUMMARY_CHARS) -> str:
    """The first line of ``text``, control characters replaced, at most ``limit`` characters."""
    line = str(text or "").strip().split("\n", 1)[0]
    line = str(printable(line[: limit + 1]))
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _said(condition: Mapping[str, Any]) -> str:
    reason = clip(condition.get("reason"), 64)
    message = clip(condition.get("message"))
    if reason and message:
        return f"{reason}: {message}"
    return reason or message


def condition_summary(conditions: Any) -> str:
    """The condition a person needs, in one line: ``Ready``, or what stands in the way
    (``Degraded: GroupRestarting: ...``, ``CacheReady: WaitingForCache``), or what is happening
    (``Progressing: Creating: ...``), or ``Not ready: ...``, or a benchmark's progress (``Running:
    scenario short running``); ``""`` when there are none."""
    found: dict[str, Mapping[str, Any]] = {}
    for condition in conditions if isinstance(conditions, list) else ():
        if isinstance(condition, Mapping) and isinstance(condition.get("type"), str):
            found.setdefault(condition["type"], condition)
    status = {name: str(c.get("status")) for name, c in found.items()}
    for name in _BAD_WHEN_TRUE:
        if status.get(name) == "True":
            return f"{name}: {_said(found[name])}".rstrip(": ")
    ready = status.get("Ready")
    if ready == "True":
        return "Ready"
    if status.get("Complete") == "True":
        return "Complete"
    for name in _BAD_WHEN_FALSE:
        if status.get(name) == "False":
            return f"{name}: {_said(found[name])}".rstrip(": ")
    if status.get("Progressing") == "True":
        return f"Progressing: {_said(found['Progressing'])}".rstrip(": ")
    if ready == "False":
        return f"Not ready: {_said(found['Ready'])}".rstrip(": ")
    if "Complete" in found:  # a benchmark on its way: its reason is the phase (Running: scenario x)
        return _said(found["Complete"]) or "Not complete"
    return ""


def startup_timeline(status: Any) -> list[Stage]:
    """``status.startup`` as ``(stage, time, replica, outcome, message)``, oldest first (entries
    without a readable time last); strings made printable, messages clipped."""
    entries = (status or {}).get("startup") if isinstance(status, Mapping) else None
    rows: list[tuple[dt.datetime, int, Stage]] = []
    far = dt.datetime.max.replace(tzinfo=dt.UTC)
    for index, entry in enumerate(entries if isinstance(entries, list) else ()):
        if not isinstance(entry, Mapping):
            continue
        replica = entry.get("replica")
        stage: Stage = (
            clip(entry.get("stage"), 32),
            clip(entry.get("time"), 40),
            replica if isinstance(replica, int) and not isinstance(replica, bool) else None,
            clip(entry.get("outcome"), 16) or None,
            clip(entry.get("message"), 512) or None,
        )
        rows.append((parse_time(entry.get("time")) or far, index, stage))
    return [stage for _when, _index, stage in sorted(rows, key=lambda row: (row[0], row[1]))]


def since(start: Any, then: Any) -> str:
    """``+12s``: ``then`` after ``start`` (both RFC 3339), ``""`` when either is unreadable."""
    first, second = parse_time(start), parse_time(then)
    if first is None or second is None:
        return ""
    return f"+{max(0, int((second - first).total_seconds()))}s"


def size(count: Any) -> str:
    """Bytes for people: ``1.5 GiB``, ``512 B``; ``""`` when not a number."""
    if not isinstance(count, int | float) or isinstance(count, bool) or count < 0:
        return ""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{int(value)} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return ""


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    fit: int | None = None,
) -> Any:
    """A rich table without borders (kubectl's look), cells as given (already printable). With
    ``fit`` (a width), the last column is cut with ``...`` so each row stays one line (a glance
    at many objects: the other columns keep their width); else long cells wrap."""
    from rich.table import Table

    cells = [["" if cell is None else str(cell) for cell in row] for row in rows]
    if fit and headers:
        widths = [len(header) for header in headers[:-1]]
        for row in cells:
            widths = [max(width, len(cell)) for width, cell in zip(widths, row, strict=False)]
        room = max(12, fit - sum(widths) - 2 * (len(headers) - 1))
        for row in cells:
            if row and len(row[-1]) > room:
                row[-1] = row[-1][: room - 3] + "..."
    out = Table(box=None, pad_edge=False, show_edge=False, title=title, title_justify="left")
    for header in headers:
        out.add_column(header, overflow="fold")
    for row in cells:
        out.add_row(*row)
    return out


def terminal_width() -> int:
    """A terminal's own width; at least 100 columns into a pipe or file (``$COLUMNS`` wins)."""
    columns = shutil.get_terminal_size((100, 24)).columns
    return columns if sys.stdout.isatty() else max(100, columns)


def render(*items: Any, width: int | None = None) -> str:
    """``items`` (strings and rich renderables) as the text a terminal shows, one after another."""
    from rich.console import Console

    buffer = io.StringIO()
    console = Console(
        file=buffer,
        width=width or terminal_width(),
        force_terminal=sys.stdout.isatty(),
        markup=False,  # NB: cells hold tenants' text, never markup
        highlight=False,
        emoji=False,
    )
    for item in items:
        # NB: plain lines as they are (the terminal wraps a long one); tables fit the width
        console.print(item, soft_wrap=isinstance(item, str))
    # NB: rich pads every table line to the table's width
    return "\n".join(line.rstrip() for line in buffer.getvalue().split("\n"))
