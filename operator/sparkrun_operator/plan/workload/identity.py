"""Stage 2, identity: sparkrun's ids in the status, and the serving revision to run.

``status.intentId`` / ``recipeRevision`` / ``workloadId`` follow the effective spec; the serving
revision (a hash of everything that changes the pods) is only settled when no gate blocks.
"""

from __future__ import annotations

from sparkrun_operator.api.workload import InferenceWorkloadStatus, StartupEvent
from sparkrun_operator.plan.workload.gates import Gates
from sparkrun_operator.plan.workload.model import Observation, Plan
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.render.workload import ServingInputs


def settle(
    obs: Observation, gates: Gates, status: InferenceWorkloadStatus, out: Plan
) -> ServingInputs | None:
    """Ids and the ``accepted`` stage into ``status``; the serving inputs (``None``: blocked)."""
    effective = gates.effective
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
