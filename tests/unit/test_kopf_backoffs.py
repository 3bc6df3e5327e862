"""The operator's kopf settings retry failed requests with jitter (bench.outage, ADR 0026)."""

from __future__ import annotations

from collections.abc import Iterable

from sparkrun_operator.controllers.operator import RunOptions, build_settings


def test_kopf_retries_every_request_on_its_own_jittered_steps() -> None:
    """kopf's fixed (1, 1, 2, 3, 5, 8, 13, 21) made every watch broken by one outage retry at
    the same instants (bench.outage); each request now draws its own delays."""
    settings = build_settings(RunOptions(standalone=True))
    for backoffs in (
        settings.networking.error_backoffs,
        settings.posting.default_backoffs,
        settings.posting.logging_backoffs,
    ):
        assert isinstance(backoffs, Iterable)
        draws = {tuple(backoffs) for _ in range(20)}
        assert len(draws) == 20
    # about kopf's own total patience (54 s over 8 retries) for requests
    totals = [sum(list(settings.networking.error_backoffs)) for _ in range(50)]
    assert min(totals) > 30
    assert max(totals) < 70
