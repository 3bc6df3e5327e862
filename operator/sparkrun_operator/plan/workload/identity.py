"""Stage 2, identity: sparkrun's ids and the served names in the status, and the serving
revision to run.

``status.intentId`` / ``recipeRevision`` / ``workloadId`` follow the effective spec; the serving
revision (a hash of everything that changes the pods) is only settled when no gate blocks.
``status.model`` (the model and the names it answers to, by the one naming rule of
``plan/served.py``) follows the revision that serves: see :func:`served_model`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable

from sparkrun_operator.api.workload import InferenceWorkloadStatus, ServedModel, StartupEvent
from sparkrun_operator.plan import served
from sparkrun_operator.plan.workload.gates import Gates
from sparkrun_operator.plan.workload.model import Observation, ObservedJobSet, Plan
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.render.workload import ServingInputs

_EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)


def settle(
    obs: Observation, gates: Gates, status: InferenceWorkloadStatus, out: Plan
) -> ServingInputs | None:
    """Ids and the ``accepted`` stage into ``status``; the serving inputs (``None``: blocked)."""
    effective = gates.effective
    status.model = served_model(obs, gates)
    if effective is not None:
        status.intent_id = effective.intent_id
        status.recipe_revision = effective.recipe_revision
        status.workload_id = recipe_identity.workload_id(
            effective.intent_id, recipe_identity.placement_token_for(obs.namespace, obs.name, obs.uid)
        )
    if not any(e.stage == "accepted" for e in status.startup):
        status.startup.insert(0, StartupEvent(stage="accepted", time=obs.created or obs.now))
    if gates.blocked is not None or effective is None:
        return None
    inputs = ServingInputs(
        spec=effective,
        scheduling=obs.spec.scheduling,
        placement=gates.placement,
        cache=gates.cache,
        pod=obs.spec.pod,
    )
    out.revision = inputs.revision()
    out.effective = effective
    status.revision = out.revision
    return inputs


def served_model(obs: Observation, gates: Gates) -> ServedModel | None:
    """``status.model``: what the workload's engines are started with and answer to.

    Unblocked, it is the resolution of the desired revision. While a gate blocks, the JobSets
    that exist keep running the revision they were started with (a Recipe edited to something
    invalid, deleted, or past a pinned revision stops nothing), so the names are theirs while any
    of them runs: the last ``status.model`` when one was recorded, else (as right after an
    upgrade to the version that records it) what the running engines were started with
    (:func:`started`), so the gateway routes the names those engines really answer to; the
    resolution only when no JobSet says. With nothing running, it is the resolution when there
    is one (the name the engine will be started with, shown while it waits for its cache or
    cluster), else ``None``: a name nothing serves or will serve must not hold a claim against
    other tenants.
    """
    resolved = None
    if gates.effective is not None:
        raw = {"routing": {"capabilities": list(obs.spec.routing.capabilities)}}
        resolved = ServedModel.model_validate(served.to_status(served.served(raw, gates.effective)))
    if gates.blocked is None:
        return resolved
    live = [js for js in obs.jobsets if not js.deleting]
    if live and obs.status.model is not None:
        return obs.status.model
    return started(obs, live) or resolved


def started(obs: Observation, live: Iterable[ObservedJobSet]) -> ServedModel | None:
    """The names the engines of the running JobSet were started with (the current revision's,
    else the newest; a terminal one last): its leader's model and ``--served-model-name``,
    ``spec.model.aliases``, and the capabilities ``spec.routing`` declares, else those its
    engine arguments mean. ``None`` when no live JobSet says what it was started with (or
    says something ``status.model`` cannot carry)."""
    readable = [js for js in live if js.engine is not None]
    if not readable:
        return None
    js = max(
        readable,
        key=lambda j: (j.terminal is None, j.revision == obs.status.revision, j.created or _EPOCH, j.name),
    )
    engine = js.engine
    assert engine is not None
    aliases = obs.spec.model.aliases if obs.spec.model is not None else []
    declared = obs.spec.routing.capabilities
    found = served.Served(
        model=engine.model,
        served_name=engine.served_name,
        aliases=served.distinct_aliases(engine.served_name, aliases),
        capabilities=served.capabilities_of(declared, ()) if declared else engine.capabilities,
    )
    try:
        return ServedModel.model_validate(served.to_status(found))
    except ValueError:  # a JobSet not rendered by us: names no status can carry
        return None
