"""``sparkrun-k8s lease hold`` survives a transient apiserver failure (review of issue 29).

``hold`` renews every ttl/3 for as long as a script runs; with ``deleteOnExit`` its exit lets the
operator delete the workload a TTL later. One 503 or connection reset between two renews must
therefore not end it (two more renews fit before the lease could lapse): it retries, saying so
on stderr. A refusal (the workload gone: exit 4; another holder: exit 5) still ends it.
"""

from __future__ import annotations

import argparse
from typing import Any

import pytest

from sparkrun_operator.cli import common
from sparkrun_operator.cli import lease as cli
from sparkrun_operator.k8s import errors
from sparkrun_operator.ops.errors import NotFound


class _Rest:
    async def close(self) -> None:
        return None


class _Result:
    ttl_seconds = 30

    def model_dump(self, **_: Any) -> dict[str, Any]:
        return {"workload": "wl", "owner": "alice", "renewed": "now"}


def test_hold_retries_a_transient_failure_and_ends_on_a_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    outcomes: list[Any] = [
        _Result(),
        errors.KubeUnavailable("connection reset", status=503),
        errors.KubeError("transport: connection refused"),
        _Result(),
        NotFound("InferenceWorkload wl not found"),
    ]
    calls: list[str] = []
    sleeps: list[float] = []

    async def claim_once(rest: Any, namespace: str, name: str, session: str | None, who: str) -> Any:
        assert who == "alice"
        calls.append(name)
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    async def connect(args: Any) -> Any:
        return _Rest()

    async def sleep(seconds: float) -> None:
        sleeps.append(seconds)

    reviews: list[str] = []

    async def principal(rest: Any) -> str:
        reviews.append("review")
        return "alice"

    monkeypatch.setattr(cli, "_claim_once", claim_once)
    monkeypatch.setattr(cli, "principal", principal)
    monkeypatch.setattr(common, "connect", connect)
    monkeypatch.setattr(cli.asyncio, "sleep", sleep)
    monkeypatch.setattr(common, "namespace_of", lambda args: "ns")
    args = argparse.Namespace(name="wl", session=None, output="text")
    assert cli._hold(args) == common.EXIT_NOT_FOUND
    assert len(calls) == 5  # both failures were retried; the refusal ended it
    assert reviews == ["review"]  # who holds is asked once, not on every renew
    assert sleeps[0] == 10.0  # ttl / 3 after a renew
    assert all(s < 10.0 for s in sleeps[1:3])  # a retry comes sooner than the next renew
    err = capsys.readouterr().err
    assert err.count("renew failed") == 2
