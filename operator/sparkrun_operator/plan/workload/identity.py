"""Stage 2a, identity: sparkrun's ids and the served names in the status, and the desired
serving inputs.

``status.intentId`` / ``recipeRevision`` / ``workloadId`` follow the effective spec; the desired
serving inputs (:func:`desired`, whose hash is the revision that would serve) exist only when no
gate blocks, and the history stage (``plan/workload/history.py``) decides what serves.
``status.model`` (the model and the names it answers to, by the one naming rule of
``plan/served.py``) follows the revision that serves: see :func:`served_model`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterable

from sparkrun_operator.api.workload import InferenceWorkloadStatus, ServedModel, StartupEvent
from sparkrun_operator.plan import served
from sparkrun_operator.plan.workload.gates import Gates
from sparkrun_operator.plan.workload.history import Serving
from sparkrun_operator.plan.workload.model import Observation, ObservedJobSet
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.render.hooks import HookPlan
from sparkrun_operator.render.workload import ServingInputs

_EPOCH = dt.datetime.fromtimestamp(0, dt.UTC)


def desired(obs: Observation, gates: Gates, hooks: HookPlan | None = None) -> ServingInputs | None:
    """The desired serving inputs (spec, Recipe, cluster and cache resolved now); ``None`` while a
    gate blocks (the history stage then decides what serves)."""
    effective = gates.effective
    if gates.blocked is not None or effective is None:
        return None
    return ServingInputs(
        spec=effective,
        scheduling=obs.spec.scheduling,
        placement=gates.placement,
        cache=gates.cache,
        pod=obs.spec.pod,
        hooks=hooks,
    )


def settle(obs: Observation, gates: Gates, serving: Serving, status: InferenceWorkloadStatus) -> None:
    """Ids, ``status.model`` (from ``serving``, what the pods are rendered from) and the
    ``accepted`` stage into ``status``."""
    effective = gates.effective
    status.model = served_model(obs, gates, serving.inputs, blocked=serving.blocked is not None)
    if effective is not None:
        status.intent_id = effective.intent_id
        status.recipe_revision = effective.recipe_revision
        status.workload_id = recipe_identity.workload_id(
            effective.intent_id, recipe_identity.placement_token_for(obs.namespace, obs.name, obs.uid)
        )
    if not any(e.stage == "accepted" for e in status.startup):
        status.startup.insert(0, StartupEvent(stage="accepted", time=obs.created or obs.now))


def served_model(
    obs: Observation, gates: Gates, serving: ServingInputs | None = None, *, blocked: bool | None = None
) -> ServedModel | None:
    """``status.model``: what the workload's engines are started with and answer to.

    With a serving revision (``serving``), it is that revision's resolution (the aliases, which
    change no pod, from the desired settings when they resolve): under a rollback or a pending
    drift the engines answer to the names they were started with. While a gate blocks
    (``blocked``; default: whether ``gates`` block), the JobSets
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
    raw = {"routing": {"capabilities": list(obs.spec.routing.capabilities)}}
    if serving is not None:
        spec = serving.spec
        if gates.effective is not None:
            spec = dataclasses.replace(spec, aliases=gates.effective.aliases)
        return ServedModel.model_validate(served.to_status(served.served(raw, spec)))
    resolved = None
    if gates.effective is not None:
        resolved = ServedModel.model_validate(served.to_status(served.served(raw, gates.effective)))
    if not (gates.blocked is not None if blocked is None else blocked):
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
