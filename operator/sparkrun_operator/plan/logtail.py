"""The last JSON event line of a container's log tail (the tools print one per line). Pure.

A log merges the tool's own lines with whatever else its process wrote (stderr, a library's
warnings), and those may quote a hostile server. So only a line the tool wrote whole counts: it
starts at column 0 with ``{"event":`` (what ``json.dumps`` of an event writes) and lines end only
at ``\\n`` (the container log's separator; ``str.splitlines`` would also cut at ``\\v``, ``\\x1c``,
``\\u2028`` ... that JSON never writes raw but a quoted text could), and it is parsed within
``safeload.TOOL_EVENT`` (size and depth). Whether the event agrees with how the process ended is
the reader's check (``ops/executors/modelcache/tooljob.py`` ``report``).
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any, Final

from sparkrun_operator import safeload

#: How every event line of the tools begins (``json.dumps({"event": ...})``, any separators).
EVENT_PREFIX: Final = '{"event":'


def last_event(text: str, events: Collection[str] | None = None) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object beginning ``{"event":`` (its ``event`` one
    of ``events`` when given), or ``None``."""
    for line in reversed(text.split("\n")):
        line = line.removesuffix("\r")
        if not line.startswith(EVENT_PREFIX):
            continue
        try:
            doc = safeload.load_json(line, safeload.TOOL_EVENT)
        except safeload.DocumentError:
            continue
        if not isinstance(doc, dict) or not isinstance(doc.get("event"), str):
            continue
        if events is None or doc["event"] in events:
            return doc
    return None
