"""SSE framing, linear however the bytes are split across reads, with any mix of LF, CRLF and CR:

- the translated streams' parser (``gateway/sse.py``): the same events at every split, and a slow
  4 MiB event costs little CPU;
- the OpenAI relays' cut at event ends (``gateway/splice.py`` ``cut``): the same bytes out, cut
  only at event ends, and slow events just under the hold limit cost little CPU.
"""

from __future__ import annotations

import random
import time
from typing import Any

import pytest

from sparkrun_operator.gateway.splice import HOLD_BYTES, cut, event_end
from sparkrun_operator.gateway.sse import DONE, MAX_EVENT_BYTES, SSEParser

LARGE = 4 * 1024 * 1024
"""A cap the gateway can be given (``--max-event-bytes``): the parser's cost is measured there."""

# Every kind of line end, a CR and its LF in different reads, comments, fields other than data,
# multi-line data, multibyte UTF-8, an event of comments only, the [DONE] sentinel.
STREAM = (
    b": a comment\n\n"
    b'data: {"a": 1}\n\n'
    b'event: x\r\nid: 7\r\ndata: {"b":\r\ndata:  "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80"}\r\n\r\n'
    b'data: {"c": [1,\rdata: 2]}\r\r'
    b'data: {"d": "x"}\r\n\n'
    b'data: {"e": 1}\n\r\n'
    b'data: {"f": 1}\r\r\n'
    b": another comment\r"
    b'retry: 10\ndata:{"g":\r\n'
    b'data: "\xe6\x97\xa5\xe6\x9c\xac"}\n\r'
    b"data: [DONE]\r\n\r\n"
    b'data: {"unfinished": '
)
EXPECTED: list[Any] = [
    {"a": 1},
    {"b": "\u00e9\u20ac\U0001f600"},
    {"c": [1, 2]},
    {"d": "x"},
    {"e": 1},
    {"f": 1},
    {"g": "\u65e5\u672c"},
    DONE,
]


def parse(parts: list[bytes]) -> list[Any]:
    parser = SSEParser()
    events: list[Any] = []
    for part in parts:
        events += parser.feed(part)
    assert parser.pending  # the unfinished last event stays buffered
    return events


def test_the_stream_parses_whole() -> None:
    assert parse([STREAM]) == EXPECTED


@pytest.mark.parametrize("offset", range(1, len(STREAM)))
def test_split_at_every_offset(offset: int) -> None:
    assert parse([STREAM[:offset], STREAM[offset:]]) == EXPECTED


def test_random_partitions_and_single_bytes() -> None:
    rng = random.Random(23)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(2, 40)))
        parts = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        assert parse(parts) == EXPECTED, cuts
    assert parse([bytes([b]) for b in STREAM]) == EXPECTED


def test_an_event_over_the_cap_is_refused_however_it_arrives() -> None:
    for line_end in (b"\n", b"\r\n", b"\r"):
        parser = SSEParser(max_event=1024)
        line = b'data: "' + b"x" * 100 + b'"' + line_end
        for _ in range(9):
            assert parser.feed(line) == []
        with pytest.raises(ValueError, match="larger than 1024 bytes"):
            parser.feed(line)
    parser = SSEParser(max_event=1024)
    with pytest.raises(ValueError, match="larger than 1024 bytes"):
        parser.feed(b"data: " + b"y" * 2000)  # one line that never ends
    parser = SSEParser(max_event=1024)
    for _ in range(100):  # many events, each under the cap: no error
        assert parser.feed(b'data: "' + b"z" * 900 + b'"\r\n\r\n') == ["z" * 900]


def test_the_default_cap_is_256_kib() -> None:
    """Real chat events are a few KiB; the gateway's default (``--max-event-bytes``) is 256 KiB."""
    parser = SSEParser()
    text = "x" * (MAX_EVENT_BYTES - 16)
    assert parser.feed(b'data: "' + text.encode() + b'"\n\n') == [text]
    with pytest.raises(ValueError, match="larger than 262144 bytes"):
        parser.feed(b'data: "' + b"x" * MAX_EVENT_BYTES + b'"\n\n')


def test_dribbling_a_4_mib_event_costs_linear_cpu() -> None:
    """One event just under a 4 MiB cap in 2-64 byte reads, lines ended by CRLF and CR: the
    parser's CPU time stays under 0.5 s (before: every read holding a CR copied the buffered
    event, hours of CPU at this size; the loop gives up past the bound)."""
    line = b'data: "' + b"x" * 1000 + b'",\r\n'
    lines = [b'data: {"pad": [\r']
    size = len(lines[0])
    while size + len(line) < LARGE - 64:
        lines.append(line if len(lines) % 2 else line[:-2] + b"\r")
        size += len(lines[-1])
    lines.append(b'data: "end"]}\r\n\r\n')
    event = b"".join(lines)
    assert LARGE - 2048 < len(event) <= LARGE
    rng = random.Random(4)
    cuts, at = [], 0
    while at < len(event):
        cuts.append(event[at : at + rng.randint(2, 64)])
        at += len(cuts[-1])
    parser = SSEParser(LARGE)
    bound = 0.5
    events: list[Any] = []
    started = time.process_time()
    for i, part in enumerate(cuts):
        events += parser.feed(part)
        if i % 4096 == 0 and time.process_time() - started > bound:
            pytest.fail(f"{i} of {len(cuts)} reads took over {bound} s of CPU")
    spent = time.process_time() - started
    assert spent < bound, f"{len(cuts)} reads took {spent:.3f} s of CPU"
    assert len(events) == 1
    assert events[0]["pad"][-1] == "end"
    assert len(events[0]["pad"]) == len(lines) - 1


def relay(parts: list[bytes]) -> list[bytes]:
    """What a relay sends for ``parts``: each write, then what it still holds."""
    tail, passing, writes = b"", False, []
    for part in parts:
        out, tail, passing = cut(tail, part, passing)
        assert not passing  # no event here is over HOLD_BYTES
        if out:
            writes.append(out)
    return [*writes, tail]


@pytest.mark.parametrize("offset", range(1, len(STREAM)))
def test_the_relay_cuts_at_event_ends_at_every_split(offset: int) -> None:
    writes = relay([STREAM[:offset], STREAM[offset:]])
    assert b"".join(writes) == STREAM
    assert writes[-1] == b'data: {"unfinished": '  # held: the unfinished event
    for out in writes[:-1]:
        assert event_end(out) == len(out)  # every write ends an event


def test_the_relay_cuts_single_bytes_and_random_partitions_the_same() -> None:
    whole = relay([STREAM])
    assert relay([bytes([b]) for b in STREAM])[-1] == whole[-1]
    rng = random.Random(28)
    for _ in range(300):
        cuts = sorted(rng.sample(range(1, len(STREAM)), rng.randint(2, 40)))
        parts = [STREAM[a:b] for a, b in zip([0, *cuts], [*cuts, len(STREAM)], strict=True)]
        writes = relay(parts)
        assert b"".join(writes) == STREAM
        assert all(event_end(out) == len(out) for out in writes[:-1])


def test_dribbling_events_just_under_the_hold_limit_costs_linear_cpu() -> None:
    """Eight events of nearly 64 KiB in 2-64 byte reads, CRLF lines: under 0.2 s of CPU (before:
    every read searched the whole held event again, 0.4 s here)."""
    line = b'data: "' + b"x" * 200 + b'",\r\n'
    event = b"data: {\r\n" + line * ((HOLD_BYTES - 2048) // len(line)) + b'data: "end"}\r\n\r\n'
    rng = random.Random(1)
    parts = []
    for _ in range(8):
        at = 0
        while at < len(event):
            parts.append(event[at : at + rng.randint(2, 64)])
            at += len(parts[-1])
    started = time.process_time()
    writes = relay(parts)
    spent = time.process_time() - started
    assert writes[-1] == b""
    assert b"".join(writes) == event * 8
    assert spent < 0.2, f"{len(parts)} reads took {spent:.3f} s of CPU"
