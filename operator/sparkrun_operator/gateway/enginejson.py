"""What the gateway decodes and walks of an engine's JSON, bounded before it is decoded or walked.

An engine is a tenant's program: whatever it answers is hostile input to the shared gateway.

- **Decoding.** The C JSON decoder costs little per byte of text (about 1 ms per MiB) but much
  per container: 4 MiB of empty arrays took 0.25-0.3 s, three quarters of it the garbage
  collector running over the new lists again and again. It holds the GIL for its whole run, so a
  worker thread would stall the event loop just the same (measured: a 4 MiB decode in
  ``asyncio.to_thread`` delayed the loop by the whole decode). So :func:`loads` first counts what
  a document holds (a few C-speed passes over the bytes, about 1 ms per MiB) and refuses one of
  more than :data:`MAX_STRINGS` strings or :data:`MAX_ITEMS` other values before decoding it; a
  document within the bounds decodes in about 10 ms per 4 MiB however it is made up.
- **Walking.** The gateway asks the engine for one completion (it never sends ``n``), so an
  event of an OpenAI stream holds one choice, and the delta of a tool call a few pieces.
  The translators refuse a chunk of more than :data:`MAX_CHOICES` choices, or a choice of more
  than :data:`MAX_TOOL_CALL_DELTAS` tool-call pieces (:func:`too_many`), so their work per event
  is bounded.

Each refusal is a :class:`Refused` (a ``ValueError``) naming the bound; the translated routes end
the answer with it in the client's protocol.
"""

from __future__ import annotations

import json
from typing import Any

from sparkrun_operator.errors import SparkrunError

MAX_STRINGS = 64 * 1024
"""Strings one decoded document may hold (keys included)."""
MAX_ITEMS = 64 * 1024
"""Objects, arrays and separated values (commas) one decoded document may hold outside strings."""
MAX_CHOICES = 16
"""Choices one chunk of a stream may hold (the gateway asks for one)."""
MAX_TOOL_CALL_DELTAS = 128
"""Tool-call pieces one choice of one chunk may hold."""


class Refused(SparkrunError, ValueError):
    """A document or chunk over one of this module's bounds (the message names it).

    Also a ``ValueError``: its callers catch it together with the ``ValueError`` that JSON which
    does not decode raises (both are an engine answer the gateway cannot use)."""


def measure(text: str) -> tuple[int, int]:
    """``(strings, items)`` of JSON ``text``: its strings (keys included), and its objects, arrays
    and commas outside strings (not counted, 0, when the strings are over :data:`MAX_STRINGS`: the
    document is refused for them). Linear: a few C-speed passes over ``text``.

    Once the escaped backslashes and quotes are gone, every quote opens or closes a string, and
    what lies between a closing quote and the next opening one is structure: exactly as the
    decoder sees it, up to where a document that is not JSON stops it.
    """
    data = text.replace("\\\\", "").replace('\\"', "") if "\\" in text else text
    strings = data.count('"') // 2
    if strings > MAX_STRINGS:
        return strings, 0
    outside = "".join(data.split('"')[::2])
    return strings, outside.count(",") + outside.count("[") + outside.count("{")


def loads(raw: bytes | str) -> Any:
    """``json.loads(raw)``, after checking that ``raw`` holds at most :data:`MAX_STRINGS` strings
    and :data:`MAX_ITEMS` other values (:class:`Refused` beyond; ``ValueError`` for JSON that does
    not decode, and for bytes that are not UTF-8, the encoding JSON between systems must use)."""
    text = raw.decode("utf-8") if isinstance(raw, bytes) else raw
    strings, items = measure(text)
    if strings > MAX_STRINGS:
        raise Refused(f"Upstream sent JSON of more than {MAX_STRINGS} strings")
    if items > MAX_ITEMS:
        raise Refused(f"Upstream sent JSON of more than {MAX_ITEMS} values")
    return json.loads(text)


def too_many(what: str, bound: int) -> Refused:
    """The refusal of a chunk over :data:`MAX_CHOICES` or :data:`MAX_TOOL_CALL_DELTAS` (the
    translators check those inline: the check costs nothing per event then)."""
    return Refused(f"Upstream sent more than {bound} {what} in one event")
