"""The last JSON event line of a container's log tail (the tools print one per line). Pure."""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any


def last_event(text: str, events: Collection[str] | None = None) -> dict[str, Any] | None:
    """The last line of ``text`` that is a JSON object with an ``event`` key (one of ``events``
    when given), or ``None``."""
    for line in reversed(text.splitlines()):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict) and "event" in doc and (events is None or doc["event"] in events):
            return doc
    return None
