"""An engine's load from its Prometheus ``/metrics`` text: queue, running, KV-cache use, requests. Pure.

The autoscaler and the idle policy read what vLLM itself reports (``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc`` or, before vLLM 0.10,
``vllm:gpu_cache_usage_perc``, and the counter ``vllm:request_success_total``). The text comes
from a tenant's engine, so it is hostile: the caller caps its size (``controllers/engine.py``),
and this parser's work is linear in it, with no copy larger than a line, and most of it in C:
for each of the five names, ``bytes.find`` looks for the lines that begin with it (at most
:data:`MAX_SAMPLES` lines, each at most :data:`MAX_LINE_BYTES`; the rest of the answer, most of
it histogram buckets, is never split into lines). A line's sample value is what follows its
*last* ``}`` (text format 0.0.4 puts nothing but the value and a timestamp after the label set,
and neither contains ``}``; a ``}`` quoted in a label value comes before it). No regular
expression runs over the text and no label value is parsed, so a label value of any content
(spaces, braces, escaped quotes) costs one ``rpartition``. Comments (``# HELP``, ``# TYPE``) do
not begin with a metric name, so they are never read.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Final

#: The most lines read per metric name (a vLLM engine has one per data-parallel rank, one per
#: ``finished_reason`` for the request counter); later lines of that name are ignored.
MAX_SAMPLES: Final = 1024

#: The most distinct series summed per metric; further series, and repeated ones, are ignored.
MAX_SERIES: Final = 256

#: The longest line read (vLLM's are under 300 bytes; a label value is a model name): a longer
#: one is skipped without being copied.
MAX_LINE_BYTES: Final = 16 * 1024

#: The longest sample value read (a float's text; a longer token is not a number).
MAX_VALUE_BYTES: Final = 40

#: The largest queue or running count believed of one engine (none holds a billion requests): a
#: larger figure reads as this, so that sums over a workload's replicas, the replicas they ask
#: for and the figures recorded in the status stay finite (JSON has no infinity).
MAX_GAUGE: Final = 1e9

WAITING: Final = b"vllm:num_requests_waiting"
RUNNING: Final = b"vllm:num_requests_running"
KV_CACHE: Final = b"vllm:kv_cache_usage_perc"
KV_CACHE_BEFORE_0_10: Final = b"vllm:gpu_cache_usage_perc"
REQUESTS: Final = b"vllm:request_success_total"

_NAMES: Final = (WAITING, RUNNING, KV_CACHE, KV_CACHE_BEFORE_0_10, REQUESTS)
_AFTER_NAME: Final = frozenset(b"{ \t")


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One scrape of an engine: each gauge and the counter summed over its series (the label
    sets ``model_name``, ``engine``, ``finished_reason``...), except the KV-cache use, which is
    a fraction (0-1) and so the mean over the engine's data-parallel ranks (at most 1).
    ``kv_cache_usage`` and ``requests_total`` are ``None`` when the engine does not report them."""

    waiting: float
    running: float
    kv_cache_usage: float | None
    requests_total: float | None


def _lines(text: bytes, name: bytes) -> Iterator[bytes]:
    """The lines of ``text`` (cut at ``\\n``) that begin with the metric ``name`` followed by
    ``{``, a blank or a tab: the first :data:`MAX_SAMPLES`, less those over :data:`MAX_LINE_BYTES`."""
    needle = b"\n" + name
    start = 0 if text.startswith(name) else text.find(needle)
    if start >= 0 and not text.startswith(name):
        start += 1  # NB: past the newline, also when the body starts with one
    for _ in range(MAX_SAMPLES):
        if start < 0:
            return
        after = start + len(name)
        end = text.find(b"\n", after, start + MAX_LINE_BYTES + 1)
        if end < 0 and len(text) - start <= MAX_LINE_BYTES:
            end = len(text)
        if end >= 0 and after < end and text[after] in _AFTER_NAME:
            yield text[after:end]
        start = text.find(needle, after)
        if start >= 0:
            start += 1


def _value(rest: bytes) -> tuple[bytes, float] | None:
    """``(label set, value)`` of what follows a metric name on its line; ``None`` when malformed
    or the value is not a finite number >= 0."""
    if rest[0] == 0x7B:  # "{": the value follows the label set's closing brace, the last "}"
        labels, brace, rest = rest.rpartition(b"}")
        if not brace:
            return None
    else:
        labels = b""
    fields = rest.split(None, 2)  # the value and an optional timestamp
    if not fields or len(fields) > 2 or len(fields[0]) > MAX_VALUE_BYTES:
        return None
    try:
        value = float(fields[0])
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return labels, value


def _sum(text: bytes, name: bytes) -> tuple[float, int] | None:
    """The sum of the distinct series of ``name`` (at most :data:`MAX_SERIES`) and how many;
    ``None`` when it has none."""
    series: set[bytes] = set()
    total = 0.0
    for rest in _lines(text, name):
        sample = _value(rest)
        if sample is None or sample[0] in series:
            continue
        series.add(sample[0])
        total += sample[1]
        if len(series) >= MAX_SERIES:
            break
    return (total, len(series)) if series else None


def parse(text: bytes) -> EngineLoad | None:
    """The load an engine's ``/metrics`` answer reports; ``None`` unless it has both queue gauges
    (``vllm:num_requests_waiting`` and ``vllm:num_requests_running``): without them it is not a
    vLLM engine, or not one whose load or idleness can be judged."""
    sums = {name: found for name in _NAMES if (found := _sum(text, name)) is not None}
    if WAITING not in sums or RUNNING not in sums:
        return None
    if not all(math.isfinite(total) for total, _ in sums.values()):
        return None  # NB: finite values can still sum to infinity
    kv = sums.get(KV_CACHE, sums.get(KV_CACHE_BEFORE_0_10))
    return EngineLoad(
        waiting=min(sums[WAITING][0], MAX_GAUGE),
        running=min(sums[RUNNING][0], MAX_GAUGE),
        kv_cache_usage=None if kv is None else min(kv[0] / kv[1], 1.0),
        requests_total=sums[REQUESTS][0] if REQUESTS in sums else None,
    )
