"""What the gateway decodes of an engine's JSON is counted first (``gateway/enginejson.py``).

- the count is exact for any JSON (generated values, escapes and all, ASCII or not);
- 4 MiB of the most expensive shapes is refused, or decoded, in linear time.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkrun_operator.gateway import enginejson

MB = 1024 * 1024
TEXT = st.text(alphabet=st.sampled_from(['"', "\\", "/", ",", "[", "{", "a", "\u00e9", "\U0001f600", "\n"]))
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(TEXT, inner, max_size=5),
    max_leaves=40,
)


def expected(value: Any) -> tuple[int, int]:
    """Strings (keys included), and containers and commas, of ``value`` as JSON."""
    if isinstance(value, str):
        return 1, 0
    if isinstance(value, dict):
        strings, children = len(value), list(value.values())
    elif isinstance(value, list):
        strings, children = 0, value
    else:
        return 0, 0
    others = 1 + max(len(children) - 1, 0)
    for child in children:
        s, o = expected(child)
        strings, others = strings + s, others + o
    return strings, others


@settings(max_examples=300, deadline=None)
@given(VALUES, st.booleans())
def test_the_count_is_exact(value: Any, ascii_only: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only)
    assert enginejson.measure(text) == expected(value)
    assert enginejson.loads(text) == value
    assert enginejson.loads(text.encode()) == value


PAD = 4 * MB
SHAPES = {  # the most the decoder can be made to build or copy from 4 MiB, and plain text
    "arrays": b'{"pad": [' + b"[]," * (PAD // 3) + b"[]]}",
    "nested": b'{"pad": [' + b"[[]]," * (PAD // 5) + b"[]]}",
    "numbers": b"[" + b"1," * (PAD // 2) + b"1]",
    "strings": b"[" + b'"",' * (PAD // 3) + b'""]',
    "escaped-quotes": b'["' + b'\\"' * (PAD // 2) + b'"]',
    "escaped-backslashes": b'["' + b"\\\\" * (PAD // 2) + b'"]',
    "text": b'{"content": "' + "h\u00e9llo w\u00f6rld \u65e5\u672c ".encode() * (PAD // 20) + b'"}',
}


@pytest.mark.parametrize("shape", list(SHAPES))
def test_4_mib_of_any_shape_is_decided_in_linear_time(shape: str) -> None:
    """Before: ``json.loads`` of the arrays took 0.25-0.3 s (most of it the garbage collector);
    in a worker thread it stalled the event loop just as long (the decoder holds the GIL)."""
    raw = SHAPES[shape]
    started = time.process_time()
    try:
        enginejson.loads(raw)
        outcome = "decoded"
    except enginejson.Refused as exc:
        outcome = str(exc)
    spent = time.process_time() - started
    print(f"{shape}: {outcome} in {spent * 1000:.1f} ms")
    refused = shape in ("arrays", "nested", "numbers", "strings")
    assert (outcome != "decoded") == refused, outcome
    assert spent < 0.1, f"4 MiB of {shape} took {spent:.3f} CPU s"


def test_at_the_bounds_a_document_decodes() -> None:
    items = enginejson.MAX_ITEMS - 2  # the outer array and the object inside it
    raw = "[" + "1," * items + '{"k": "' + "x" * MB + '"}]'
    assert enginejson.measure(raw) == (2, enginejson.MAX_ITEMS)
    assert len(enginejson.loads(raw)) == items + 1
    with pytest.raises(enginejson.Refused, match="more than 65536 values"):
        enginejson.loads("[1," + raw[1:])
    raw = "[" + '"",' * (enginejson.MAX_STRINGS - 1) + '""]'
    assert len(enginejson.loads(raw)) == enginejson.MAX_STRINGS
    with pytest.raises(enginejson.Refused, match="more than 65536 strings"):
        enginejson.loads('["",' + raw[1:])


def test_bytes_must_be_utf_8() -> None:
    """UTF-16 would hide quotes in the bytes of other characters; JSON between systems is UTF-8."""
    with pytest.raises(ValueError, match="utf-8"):
        enginejson.loads('["\u2200"]'.encode("utf-16"))
