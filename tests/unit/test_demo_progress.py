"""Download rates and ETAs appear only after a real sample (the one meter, rate.py), in the
demo's ModelCache lines too. Time is a fake clock: the samples say when they were taken."""

from __future__ import annotations

import pytest

from sparkrun_operator.cli.demo_cache import _describe
from sparkrun_operator.rate import RateMeter, format_eta, format_rate, real_rate

MIB = 1 << 20


def test_the_issues_case_shows_no_rate_and_no_eta_until_sampled() -> None:
    """The demo printed ``0.0 MB/s, ETA 15686s`` for a 1.5 MiB file a second from done."""
    meter = RateMeter()
    total = int(1.5 * MIB)
    meter.update(0, 100.0)
    meter.update(100, 100.4)  # 100 bytes in 0.4 s: 250 B/s, an ETA of 6291 s if believed
    assert (meter.rate(), meter.eta(total), meter.describe(total)) == (None, None, "")
    meter.update(600_000, 101.4)  # 1.4 s: still too short a sample
    assert meter.describe(total) == ""
    meter.update(1_200_000, 102.4)  # 2.4 s, 1.2 MB: now a rate
    assert meter.rate() == pytest.approx(500_000)
    assert meter.eta(total) == pytest.approx((total - 1_200_000) / 500_000)
    assert meter.describe(total) == "488 KiB/s, ETA 1s"
    meter.update(total, 103.0)
    assert meter.eta(total) == 0.0


def test_a_slow_trickle_never_gives_an_eta() -> None:
    meter = RateMeter(min_bytes=10)
    meter.update(0, 0.0)
    meter.update(500, 10.0)  # 50 B/s: below min_rate
    assert meter.rate() == pytest.approx(50)
    assert meter.eta(10 * MIB) is None
    assert meter.describe(10 * MIB) == "50 B/s"


def test_the_rate_is_measured_over_a_sliding_window_and_restarts_reset_it() -> None:
    meter = RateMeter(window_seconds=10.0)
    for second in range(0, 31):
        # 1 MiB/s for 20 s, then 4 MiB/s
        done = second * MIB if second <= 20 else 20 * MIB + (second - 20) * 4 * MIB
        meter.update(done, float(second))
    assert meter.rate() == pytest.approx(4 * MIB)
    meter.update(0, 31.0)  # the download restarted
    assert meter.rate() is None
    meter.update(MIB, 31.5)  # too short since the restart
    assert meter.rate() is None


def test_formats() -> None:
    assert [format_rate(r) for r in (0, 999, 1536, 12.5 * MIB, 300 * MIB)] == [
        "0 B/s", "999 B/s", "1.50 KiB/s", "12.5 MiB/s", "300 MiB/s",
    ]  # fmt: skip
    assert [format_eta(s) for s in (0.4, 59, 125, 3720)] == ["0s", "59s", "2m05s", "1h02m"]
    assert format_eta(float("inf")) == format_eta(float("nan")) == "?"


def test_the_eta_of_what_remains() -> None:
    """The downloader's ETA counts the bytes not yet done, not those the meter samples."""
    meter = RateMeter()
    assert meter.eta_for(0) == 0.0  # nothing left: done, with or without a rate
    assert meter.eta(MIB) is None  # no sample at all
    meter.update(0, 0.0)
    meter.update(2 * MIB, 2.0)
    assert meter.eta_for(3 * MIB) == pytest.approx(3.0)
    assert meter.eta_for(-5) == 0.0


@pytest.mark.parametrize(
    ("value", "rate"),
    [(12.5, 12.5), (3, 3.0), (0, None), (0.0, None), (-1, None), (True, None), ("fast", None),
     (None, None), (float("inf"), None), (float("nan"), None), (1e400, None)],
)  # fmt: skip
def test_a_reported_rate_is_a_finite_positive_number(value: object, rate: float | None) -> None:
    assert real_rate(value) == rate


def test_the_demo_line_uses_the_meter_not_the_operators_early_rate() -> None:
    status = {
        "phase": "Downloading",
        "resolvedRevision": "0123456789abcdef",
        "progress": {"bytesDone": 100, "bytesTotal": int(1.5 * MIB)},
        "message": "Downloading: 100 of 1572864 bytes (0%), 0.0 MB/s, ETA 15686s",
    }
    meter = RateMeter()
    meter.update(100, 0.0)
    line = _describe(status, meter)
    assert line == "Downloading  revision 0123456789ab  100/1572864 bytes done"
    status["progress"] = {"bytesDone": 1_048_676, "bytesTotal": int(1.5 * MIB)}
    meter.update(1_048_676, 2.0)
    assert _describe(status, meter).endswith("1048676/1572864 bytes done, 512 KiB/s, ETA 1s")
    # without progress, the operator's message says what is going on
    assert _describe({"phase": "Pending", "message": "waiting for the claim to be bound"}) == (
        "Pending      waiting for the claim to be bound"
    )
