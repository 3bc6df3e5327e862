"""Carrying out a plan's serving revisions (``controllers/workload_act.py``): what the apiserver
says when it refuses one never reaches the status, an Event or the log, since it quotes the
revision's ``data`` (the frozen env values); a name another object holds is said, not retried
in silence."""

from __future__ import annotations

import logging
from typing import Any

import httpx
import pytest

from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.controllers.workload_act import execute
from sparkrun_operator.k8s import errors
from sparkrun_operator.plan.workload import Plan
from sparkrun_operator.plan.workload.model import Annotate

TOKEN = "hf_SECRETSECRETSECRET"
#: What kube-apiserver answers to a changed ``data`` (its message quotes the whole value).
IMMUTABLE = {
    "kind": "Status",
    "status": "Failure",
    "reason": "Invalid",
    "message": 'ControllerRevision.apps "qwen-2" is invalid: data: Invalid value: '
    f'{{"inputs":{{"spec":{{"env":[{{"name":"HF_TOKEN","value":"{TOKEN}"}}]}}}}}}: field is immutable',
    "details": {"causes": [{"reason": "FieldValueInvalid", "field": "data", "message": TOKEN}]},
    "code": 422,
}


def _invalid() -> errors.KubeInvalid:
    return errors.KubeInvalid(IMMUTABLE["message"], status=422, reason="Invalid", body=IMMUTABLE)


class FakeKube:
    """``apply``, ``get``, ``merge_patch`` of ControllerRevisions, refusing as told."""

    def __init__(self, *, existing: dict[str, Any] | None = None) -> None:
        self.existing = existing
        self.applied: list[str] = []

    async def apply(self, resource: Any, doc: dict[str, Any], *_: Any, **__: Any) -> Any:
        if doc["kind"] != "ControllerRevision":
            self.applied.append(doc["metadata"]["name"])
            return doc
        raise _invalid()

    async def get(self, resource: Any, name: str, namespace: str | None = None) -> Any:
        return self.existing

    async def merge_patch(self, *_: Any, **__: Any) -> Any:
        raise _invalid()


def _memo(kube: FakeKube) -> Memo:
    return Memo(config=OperatorConfig(), kube=kube, http=httpx.AsyncClient(), metrics=Metrics())  # type: ignore[arg-type]


def _revision(uid: str = "uid-w") -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": "qwen-2",
            "namespace": "ns",
            "ownerReferences": [{"kind": "InferenceWorkload", "uid": uid, "controller": True}],
            "labels": {"sparkrun.dev/workload": "qwen", "sparkrun.dev/revision": "aaaaaaaaaa"},
        },
        "data": {"inputs": {"spec": {"env": [{"name": "HF_TOKEN", "value": TOKEN}]}}},
        "revision": 2,
    }


async def test_a_refused_revision_is_reported_without_the_apiservers_message() -> None:
    """The object is not there (the refusal was about it, not a race): refused, by reason and
    field only."""
    p = Plan()
    p.revisions.append(_revision())
    p.apply.append(JOBSET)
    kube = FakeKube(existing=None)
    refused = (await execute(_memo(kube), p, namespace="ns")).refused
    assert kube.applied == []  # NB: not from a revision that was not made
    assert len(refused) == 1
    assert TOKEN not in refused[0]
    assert "HF_TOKEN" not in refused[0]
    assert refused[0] == "ControllerRevision qwen-2: 422 Invalid (fields: data)"


JOBSET = {"kind": "JobSet", "metadata": {"name": "qwen-0"}}


async def test_a_revision_another_pass_made_is_not_a_refusal() -> None:
    """The same number with the same settings: the JobSets rendered from them are applied."""
    p = Plan()
    p.revisions.append(_revision())
    p.apply.append(JOBSET)
    kube = FakeKube(existing=_revision())
    assert (await execute(_memo(kube), p, namespace="ns")).refused == []
    assert kube.applied == ["qwen-0"]


async def test_jobsets_of_a_revision_another_pass_made_otherwise_wait() -> None:
    """The number was taken meanwhile with other settings (its hash label differs): the JobSets
    of this plan would run settings no revision keeps; they wait for the next pass."""
    p = Plan()
    p.revisions.append(_revision())
    p.apply.append(JOBSET)
    other = _revision()
    other["metadata"]["labels"] = {**other["metadata"]["labels"], "sparkrun.dev/revision": "bbbbbbbbbb"}
    kube = FakeKube(existing=other)
    assert (await execute(_memo(kube), p, namespace="ns")).refused == []
    assert kube.applied == []


async def test_a_name_held_by_an_object_the_workload_does_not_own_is_said() -> None:
    p = Plan()
    p.revisions.append(_revision())
    stranger = {
        "metadata": {"name": "qwen-2", "ownerReferences": _revision("other")["metadata"]["ownerReferences"]}
    }
    refused = (await execute(_memo(FakeKube(existing=stranger)), p, namespace="ns")).refused
    assert len(refused) == 1
    assert "does not own" in refused[0]
    assert TOKEN not in refused[0]


async def test_an_annotation_refused_is_logged_without_the_data(caplog: pytest.LogCaptureFixture) -> None:
    p = Plan()
    p.annotate.append(Annotate(name="qwen-1", annotations={"sparkrun.dev/served-until": "x"}))
    with caplog.at_level(logging.WARNING, logger="sparkrun.operator.workload"):
        refused = (await execute(_memo(FakeKube()), p, namespace="ns")).refused
    assert refused == []
    assert "qwen-1" in caplog.text
    assert TOKEN not in caplog.text
    assert "HF_TOKEN" not in caplog.text
