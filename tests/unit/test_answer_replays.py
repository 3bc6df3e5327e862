"""A replayed secret answer is no oracle (``ops/jobstore.py``, review of issue 29).

A replay of an approval compares the value (it is in the job for anyone who may see the job); a
replay of a secret answer would compare a guess with the secret while its answer Secret exists.
Only the principal who gave the secret may replay it (it knows the value); anyone else gets the
same 409 ``already_answered`` whatever it sends, and the Secret is not even read for it.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import pytest

from sparkrun_operator.api.daemonjob import DaemonJobStatus
from sparkrun_operator.ops import answers
from sparkrun_operator.ops.errors import Conflict
from sparkrun_operator.ops.jobstore import JobService

NS = "ns"
NOW = dt.datetime(2026, 12, 6, 12, 0, tzinfo=dt.UTC)
SECRET = "hunter2-correct"


def _job() -> dict[str, Any]:
    job = {
        "apiVersion": "sparkrun.dev/v1alpha1",
        "kind": "DaemonJob",
        "metadata": {"name": "job-1", "namespace": NS, "uid": "job-uid", "resourceVersion": "9"},
        "spec": {
            "answers": [
                {
                    "promptId": "p1",
                    "secretRef": {"name": answers.secret_name("job-1", "p1"), "key": answers.SECRET_KEY},
                    "answeredBy": "alice",
                    "answeredAt": "2026-12-06T11:59:00Z",
                }
            ]
        },
        "status": {"state": "waiting_input"},
    }
    return job


@dataclass
class _Kube:
    secret: dict[str, Any]
    reads: int = 0

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        self.reads += 1
        return self.secret if name == self.secret["metadata"]["name"] else None


@dataclass
class _DaemonJobs:
    kube: _Kube
    namespace: str = NS
    written: list[DaemonJobStatus] = field(default_factory=list)

    async def update_status(self, obj: dict[str, Any], mutate: Any, **_: Any) -> dict[str, Any]:
        status = DaemonJobStatus.model_validate(obj.get("status") or {})
        mutate(status, obj)
        self.written.append(status)
        return {**obj, "status": status.to_wire()}


class _Cache:
    async def observe(self, obj: Any) -> None:
        return None


def _service() -> tuple[JobService, _DaemonJobs]:
    secret = answers.secret_body(_job(), "p1", SECRET, namespace=NS)
    secret.setdefault("data", {})[answers.SECRET_KEY] = base64.b64encode(SECRET.encode()).decode()
    secret.pop("stringData", None)
    daemonjobs = _DaemonJobs(kube=_Kube(secret=secret))
    service = JobService(daemonjobs, _Cache(), clock=lambda: NOW)  # type: ignore[arg-type]
    return service, daemonjobs


@pytest.mark.parametrize("guess", [SECRET, "wrong-guess"])
def test_another_principal_cannot_test_a_guess_of_a_secret_answer(guess: str) -> None:
    service, daemonjobs = _service()
    with pytest.raises(Conflict) as refused:
        asyncio.run(service.answer(_job(), "p1", guess, by="bob"))
    assert refused.value.attrs["reason"] == "already_answered"
    assert daemonjobs.kube.reads == 0  # the value was never compared
    assert daemonjobs.written == []


def test_who_gave_a_secret_answer_may_replay_it() -> None:
    service, daemonjobs = _service()
    assert asyncio.run(service.answer(_job(), "p1", SECRET, by="alice")) is True
    [status] = daemonjobs.written
    assert [r.by for r in status.answers[0].replays] == ["alice"]
    with pytest.raises(Conflict):
        asyncio.run(service.answer(_job(), "p1", "something-else", by="alice"))
