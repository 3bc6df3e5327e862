"""An engine's load from its ``/metrics`` text (``plan/enginemetrics.py``), honest and hostile.

The honest sample is vLLM's own layout (``prometheus_client``'s text format 0.0.4: ``# HELP`` and
``# TYPE`` comments, label sets sorted by name, histograms with a line per bucket, a ``_created``
gauge beside each counter). The hostile ones are what a tenant's engine could answer instead;
the parser's work on them is measured by counting the Python lines it runs when the input doubles
(deterministic: the count must at most double) and by the memory it takes (it must not grow with
the input), never against a wall-clock limit.
"""

from __future__ import annotations

import sys
import tracemalloc
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from sparkrun_operator.plan import enginemetrics
from sparkrun_operator.plan.enginemetrics import MAX_LINE_BYTES, MAX_SAMPLES, MAX_SERIES, EngineLoad, parse

MODEL = 'model_name="Qwen/Qwen3-0.6B"'


def histogram(name: str, labels: str, buckets: list[float]) -> str:
    """A vLLM histogram: a line per bucket, ``+Inf``, then ``_count``, ``_sum`` and ``_created``."""
    lines = [f"# HELP {name} Histogram of {name}.", f"# TYPE {name} histogram"]
    lines += [f'{name}_bucket{{{labels},le="{b}"}} {i}.0' for i, b in enumerate(buckets)]
    lines += [
        f'{name}_bucket{{{labels},le="+Inf"}} {len(buckets)}.0',
        f"{name}_count{{{labels}}} {len(buckets)}.0",
        f"{name}_sum{{{labels}}} 12.5",
        f"# HELP {name}_created Histogram of {name}.",
        f"# TYPE {name}_created gauge",
        f"{name}_created{{{labels}}} 1.7650e+09",
    ]
    return "\n".join(lines)


def vllm_sample(*, waiting: int = 7, running: int = 3, kv: str = "0.42", engines: int = 1) -> bytes:
    """A ``/metrics`` answer laid out as vLLM 0.11 writes it (``engines`` data-parallel ranks)."""
    parts = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        'python_gc_objects_collected_total{generation="0"} 20413.0',
        'python_info{implementation="CPython",major="3",minor="12",patchlevel="11",version="3.12.11"} 1.0',
        "process_resident_memory_bytes 3.216809984e+09",
    ]
    for engine in range(engines):
        labels = f'engine="{engine}",{MODEL}'
        parts += [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{labels}}} {running}.0",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{labels}}} {waiting}.0",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{labels}}} {kv}",
            histogram("vllm:time_to_first_token_seconds", labels, [0.001, 0.005, 0.01, 0.02, 0.04]),
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{engine="{engine}",finished_reason="stop",{MODEL}}} 120.0',
            f'vllm:request_success_total{{engine="{engine}",finished_reason="length",{MODEL}}} 5.0',
            f'vllm:request_success_total{{engine="{engine}",finished_reason="abort",{MODEL}}} 1.0',
            "# HELP vllm:request_success_created Count of successfully processed requests.",
            "# TYPE vllm:request_success_created gauge",
            f'vllm:request_success_created{{engine="{engine}",finished_reason="stop",{MODEL}}} 1.765e+09',
            histogram("vllm:e2e_request_latency_seconds", labels, [0.3, 0.5, 0.8, 1.0, 1.5, 2.0]),
        ]
    return ("\n".join(parts) + "\n").encode()


GOOD = EngineLoad(waiting=7.0, running=3.0, kv_cache_usage=0.42, requests_total=126.0)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (vllm_sample(), GOOD),
        # two data-parallel ranks: the queue and the counter add up, the KV-cache use is a mean
        (
            vllm_sample(engines=2, kv="0.5"),
            EngineLoad(waiting=14.0, running=6.0, kv_cache_usage=0.5, requests_total=252.0),
        ),
        # vLLM before 0.10 named the KV-cache gauge gpu_cache_usage_perc
        (vllm_sample().replace(b"kv_cache_usage_perc", b"gpu_cache_usage_perc"), GOOD),
        # both names (a version that kept the old one): the current one counts, once
        (
            vllm_sample(kv="0.25") + b'vllm:gpu_cache_usage_perc{engine="0",' + MODEL.encode() + b"} 0.9\n",
            EngineLoad(waiting=7.0, running=3.0, kv_cache_usage=0.25, requests_total=126.0),
        ),
        # CRLF line ends, a timestamp, no labels, a tab
        (
            b"vllm:num_requests_waiting 2 1765000000000\r\nvllm:num_requests_running\t1\r\n",
            EngineLoad(waiting=2.0, running=1.0, kv_cache_usage=None, requests_total=None),
        ),
        # a label value with spaces, braces, an escaped quote and a backslash
        (
            b'vllm:num_requests_waiting{model_name="a } {b\\" c\\\\",engine="0"} 4\n'
            b'vllm:num_requests_running{model_name="}}} 99"} 1\n',
            EngineLoad(waiting=4.0, running=1.0, kv_cache_usage=None, requests_total=None),
        ),
        # names that only begin like vLLM's are other metrics
        (
            b"vllm:num_requests_waiting_total 9\nvllm:num_requests_waiting 1\nvllm:num_requests_running 0\n",
            EngineLoad(waiting=1.0, running=0.0, kv_cache_usage=None, requests_total=None),
        ),
    ],
    ids=["vllm", "two-ranks", "before-0.10", "both-kv-names", "plain-lines", "odd-labels", "prefix-names"],
)
def test_an_engines_load_is_read(text: bytes, expected: EngineLoad) -> None:
    assert parse(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"not metrics at all\n",
        b'# vllm:num_requests_waiting{a="b"} 1\n# vllm:num_requests_running 1\n',  # comments only
        b"vllm:num_requests_waiting 3\n",  # no running gauge: cannot be judged idle or busy
        b"vllm:num_requests_running 3\n",
        b"vllm:kv_cache_usage_perc 0.5\nvllm:request_success_total 4\n",
        b"{" * 4096 + b"\n" + b"}" * 4096 + b"\n",
    ],
    ids=["empty", "prose", "comments", "waiting-only", "running-only", "no-queue", "braces"],
)
def test_what_is_not_an_engine_reads_as_none(text: bytes) -> None:
    assert parse(text) is None


@pytest.mark.parametrize(
    "bad",
    [b"NaN", b"+Inf", b"-Inf", b"-1", b"1e999", b"0x10", b"", b"1 2 3", b"1" * 41, b"one"],
    ids=["nan", "inf", "-inf", "negative", "overflow", "hex", "none", "three-fields", "long", "word"],
)
def test_a_series_with_an_impossible_value_is_ignored(bad: bytes) -> None:
    text = (
        b'vllm:num_requests_waiting{engine="0"} 2\n'
        b'vllm:num_requests_waiting{engine="1"} ' + bad + b"\n"
        b"vllm:num_requests_running 1\n"
        b'vllm:request_success_total{finished_reason="stop"} ' + bad + b"\n"
    )
    assert parse(text) == EngineLoad(waiting=2.0, running=1.0, kv_cache_usage=None, requests_total=None)


def test_a_repeated_series_counts_once_and_series_are_capped() -> None:
    repeated = b'vllm:num_requests_waiting{engine="0"} 5\n' * 1000
    many = b"".join(b'vllm:num_requests_running{engine="%d"} 1\n' % i for i in range(MAX_SERIES + 500))
    load = parse(repeated + many)
    assert load == EngineLoad(
        waiting=5.0, running=float(MAX_SERIES), kv_cache_usage=None, requests_total=None
    )


def test_sums_that_overflow_and_kv_use_over_one_are_not_believed() -> None:
    huge = b"".join(b'vllm:num_requests_waiting{e="%d"} 1e308\n' % i for i in range(4))
    assert parse(huge + b"vllm:num_requests_running 1\n") is None
    over = parse(b"vllm:num_requests_waiting 0\nvllm:num_requests_running 0\nvllm:kv_cache_usage_perc 7\n")
    assert over is not None
    assert over.kv_cache_usage == 1.0


def test_lines_past_the_cap_are_not_read() -> None:
    unreadable = b'vllm:num_requests_waiting{engine="0"} NaN\n' * (MAX_SAMPLES - 1)
    rest = b"vllm:num_requests_running 1\nvllm:num_requests_waiting 3\n"
    within = parse(unreadable + rest)
    assert within is not None
    assert within.waiting == 3.0
    assert parse(unreadable + b"vllm:num_requests_waiting -1\n" + rest) is None


def python_lines(text: bytes) -> int:
    """How many lines of ``plan/enginemetrics.py`` run while parsing ``text`` (a count of work
    that does not depend on the machine's speed or load)."""
    count = 0
    target = enginemetrics.__file__

    def tracer(frame: FrameType, event: str, arg: Any) -> Callable[..., Any] | None:
        nonlocal count
        if frame.f_code.co_filename != target:
            return None
        if event == "line":
            count += 1
        return tracer

    sys.settrace(tracer)
    try:
        parse(text)
    finally:
        sys.settrace(None)
    return count


KIB = 1024
MIB = 1024 * KIB

#: Hostile answers, each a function of a size: the work must grow no faster than the size.
HOSTILE: dict[str, Callable[[int], bytes]] = {
    "long-label": lambda n: b'vllm:num_requests_waiting{model_name="' + b"x" * n + b'"} 1\n',
    "quotes-and-braces": lambda n: b"vllm:num_requests_waiting{" + b'"}\\"{' * (n // 5) + b"} 1\n",
    "only-braces": lambda n: b"{" * n + b"\n",
    "many-lines": lambda n: b'vllm:num_requests_waiting{engine="0"} 1\n' * (n // 40),
    "many-series": lambda n: b"".join(b'vllm:num_requests_running{e="%d"} 1\n' % i for i in range(n // 32)),
    "buckets": lambda n: b'vllm:e2e_request_latency_seconds_bucket{le="1.0",model_name="m"} 1\n' * (n // 64),
    "names-only": lambda n: b"\nvllm:num_requests_waiting" * (n // 26),
    "empty-lines": lambda n: b"\n" * n,
    "long-value": lambda n: b"vllm:num_requests_waiting " + b"9" * n + b"\n",
}


@pytest.mark.parametrize("make", HOSTILE.values(), ids=HOSTILE.keys())
def test_hostile_answers_cost_work_linear_in_their_size(make: Callable[[int], bytes]) -> None:
    lines_small, lines_large = python_lines(make(64 * KIB)), python_lines(make(128 * KIB))
    assert lines_large <= 2 * lines_small + 50, (lines_small, lines_large)
    # the byte operations (find, rpartition) pass over the text once per name and copy at most a
    # line: the memory a parse takes does not grow with the answer
    text = make(4 * MIB)
    tracemalloc.start()
    try:
        parse(text)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MAX_LINE_BYTES + 64 * KIB, f"a parse of 4 MiB took {peak / KIB:.0f} KiB"


def test_a_line_over_the_cap_is_skipped_and_the_next_one_read() -> None:
    long_label = b'vllm:num_requests_waiting{model_name="' + b"} " * (MIB // 2) + b'"} 6\n'
    assert len(long_label) > MAX_LINE_BYTES
    rest = b'vllm:num_requests_waiting{model_name="m"} 2\nvllm:num_requests_running 0\n'
    assert parse(long_label + rest) == EngineLoad(
        waiting=2.0, running=0.0, kv_cache_usage=None, requests_total=None
    )
    longest = b"vllm:num_requests_waiting " + b" " * (MAX_LINE_BYTES - 28) + b"3"
    assert len(longest) == MAX_LINE_BYTES - 1
    assert parse(longest + b"\n" + rest.split(b"\n")[1]) == EngineLoad(
        waiting=3.0, running=0.0, kv_cache_usage=None, requests_total=None
    )


def test_a_body_that_starts_with_a_newline_is_read_from_its_first_line() -> None:
    """The first metric line right after a leading newline counts like any other."""
    load = parse(b"\nvllm:num_requests_waiting 3\nvllm:num_requests_running 1\n")
    assert load is not None
    assert (load.waiting, load.running) == (3.0, 1.0)
