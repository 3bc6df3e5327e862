"""Stage 2, identity: sparkrun's ids and the served names in the status, and the serving
revision to run.

``status.intentId`` / ``recipeRevision`` / ``workloadId`` follow the effective spec; the serving
revision (a hash of everything that changes the pods) is only settled when no gate blocks.
``status.model`` (the model and the names it answers to, by the one naming rule of
``plan/served.py``) follows the revision that serves: see :func:`served_model`.
"""

from __future__ import annotations

from sparkrun_operator.api.workload import InferenceWorkloadStatus, ServedModel, StartupEvent
from sparkrun_operator.plan import served
from sparkrun_operator.plan.workload.gates import Gates
from sparkrun_operator.plan.workload.model import Observation, Plan
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.render.workload import ServingInputs


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
        spec=effective, scheduling=obs.spec.scheduling, placement=gates.placement, cache=gates.cache
    )
    out.revision = inputs.revision()
    out.effective = effective
    status.revision = out.revision
    return inputs


def served_model(obs: Observation, gates: Gates) -> ServedModel | None:
    """``status.model``: what the workload's engines are started with and answer to.

    Unblocked, it is the resolution of the desired revision. While a gate blocks, the JobSets
    that exist keep running the revision the last ``status.model`` was resolved for (a Recipe
    edited to something invalid, deleted, or past a pinned revision stops nothing), so that
    value is kept while any of them runs: the gateway keeps routing the name those engines
    really answer to (with none recorded, as after an upgrade, the resolution is the best
    guess). With nothing running, it is the resolution when there is one (the name
    the engine will be started with, shown while it waits for its cache or cluster), else
    ``None``: a name nothing serves or will serve must not hold a claim against other tenants.
    """
    resolved = None
    if gates.effective is not None:
        raw = {"routing": {"capabilities": list(obs.spec.routing.capabilities)}}
        resolved = ServedModel.model_validate(served.to_status(served.served(raw, gates.effective)))
    if gates.blocked is None:
        return resolved
    running = any(not js.deleting for js in obs.jobsets)
    if running and obs.status.model is not None:
        return obs.status.model
    return resolved
