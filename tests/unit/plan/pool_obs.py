"""A settled workload for the pool-stage tests (``test_pool_plan``, ``test_pool_plan_policy``,
``tests/unit/controllers/test_workload_act_pool``).

Serving first (``plan/workload/pool.py``): a pass that makes a serving revision or JobSets
applies no pool or picker object; they come in the next pass. A test of what the pool stage
applies therefore plans a workload whose first plan's ControllerRevision and JobSets are
observed, as the watch shows them; :func:`first_plan_seen` gives that observation.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.observe import jobset_from
from sparkrun_operator.plan.workload import Observation, Plan, plan
from sparkrun_operator.plan.workload.model import ObservedJobSet, ObservedRevision
from sparkrun_operator.plan.workload.revisions import revision_from
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PoolSettings

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
NAME, NS, UID = "qwen", "ns", "uid-w"


def workload_spec(pool: dict[str, Any] | None = None) -> InferenceWorkloadSpec:
    """A workload's spec with ``spec.inferencePool`` = ``pool`` (unset: the defaults)."""
    doc: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}}
    if pool is not None:
        doc["inferencePool"] = pool
    return InferenceWorkloadSpec.model_validate(doc)


def new_observation(spec: InferenceWorkloadSpec | None = None, **kwargs: Any) -> Observation:
    """Workload ``NAME`` in ``NS``, brand new (nothing of it observed), with pools managed
    (``--inference-pools=auto``, the CRD served); ``kwargs`` replace fields."""
    values: dict[str, Any] = {
        "name": NAME,
        "namespace": NS,
        "uid": UID,
        "generation": 2,
        "spec": spec or workload_spec(),
        "status": InferenceWorkloadStatus(),
        "now": NOW,
        "created": NOW - dt.timedelta(minutes=1),
        "pool_settings": PoolSettings(mode="auto", served=True),
    }
    values.update(kwargs)
    return Observation(**values)


def pool_hash(doc: dict[str, Any]) -> str:
    """A rendered pool or picker object's hash annotation."""
    value: str = doc["metadata"]["annotations"][keys.ANNOTATION_POOL_HASH]
    return value


def _seen(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc`` as the apiserver returns it: with a UID."""
    name = doc["metadata"]["name"]
    return {**doc, "metadata": {**doc["metadata"], "uid": f"uid-{doc['kind']}-{name}"}}


def observed_revisions(p: Plan) -> tuple[ObservedRevision, ...]:
    """The ControllerRevisions ``p`` makes, as the planner observes them."""
    found = tuple(revision_from(_seen(doc)) for doc in p.revisions)
    assert None not in found
    return tuple(r for r in found if r is not None)


def observed_jobsets(p: Plan, *, ready: bool = True) -> tuple[ObservedJobSet, ...]:
    """The JobSets ``p`` applies, as the planner observes them (leaders Ready by ``ready``)."""
    found = [jobset_from(_seen(doc)) for doc in p.apply if doc["kind"] == "JobSet"]
    assert found
    return tuple(dataclasses.replace(js, leader_ready=ready) for js in found if js is not None)


def first_plan_seen(obs: Observation, *, ready: bool = True) -> Observation:
    """``obs`` (a brand-new workload: no JobSets, no revisions) once its first plan's
    ControllerRevision and JobSets are observed at the serving revision: the pass that follows
    makes neither, so the pool stage applies what it plans."""
    assert not obs.jobsets
    first = plan(dataclasses.replace(obs, revisions=()))
    assert first.revision is not None
    revisions = observed_revisions(first)
    assert [r.hash for r in revisions] == [first.revision]
    jobsets = observed_jobsets(first, ready=ready)
    assert {js.revision for js in jobsets} == {first.revision}
    return dataclasses.replace(obs, revisions=revisions, jobsets=jobsets)
