"""Recipe controller: writes ``status.revision``, ``intentId``, ``issues`` and ``Valid``.

A Recipe's status depends on its spec alone, so kopf's change-detecting handlers fit: one
handler (``rcp-status``) for create, update and resume computes the status with
``recipe/status.py`` and writes it when it changed. Workloads that serve the recipe are poked by
the workload controller's own watch of Recipes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kopf

from sparkrun_operator.api.meta import utcnow
from sparkrun_operator.api.recipe import RecipeSpec, RecipeStatus
from sparkrun_operator.api.resources import RECIPE
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.reconciler import (
    Event,
    Outcome,
    nothing_to_execute,
    post,
    run_pass,
    writes_status,
)
from sparkrun_operator.controllers.status import current_status
from sparkrun_operator.k8s.resources import resource_of
from sparkrun_operator.recipe.status import plan_status

RECIPES = resource_of(RECIPE)
RECIPE_ID = (RECIPE.group, RECIPE.version, RECIPE.plural)


@dataclass(frozen=True)
class Observed:
    """What :func:`plan` looks at: the Recipe's spec alone (and the status it had)."""

    spec: RecipeSpec
    generation: int
    previous: RecipeStatus


def observe(body: kopf.Body) -> Observed:
    """The Recipe as its planner sees it (no reads: its status depends on the spec alone)."""
    meta = body.get("metadata") or {}
    spec = RecipeSpec.model_validate(body.get("spec") or {})
    return Observed(
        spec=spec, generation=int(meta.get("generation") or 0), previous=current_status(body, RecipeStatus)
    )


def plan(observed: Observed) -> RecipeStatus:
    """The Recipe's status (``recipe/status.py``): the whole plan of a kind without children."""
    return plan_status(
        spec=observed.spec, generation=observed.generation, previous=observed.previous, now=utcnow()
    )


async def reconcile(ctx: Memo, *, body: kopf.Body) -> None:
    """Compute and write the Recipe's status (:func:`.reconciler.run_pass`, nothing to execute);
    warn with an event when it is not servable."""
    meta = body.get("metadata") or {}

    async def observed() -> Observed:
        return observe(body)

    def emit(outcome: Outcome[RecipeStatus], wrote: bool) -> None:
        status = outcome.status
        valid = status.conditions[0] if status.conditions else None
        ctx.metrics.observe_ready(
            "Recipe", (meta.get("namespace"), meta.get("name")), valid.status if valid else None
        )
        # NB: warned once per change of the status, not on every resume.
        if wrote and valid is not None and valid.status == "False":
            post(body, [Event(type="Warning", reason="InvalidRecipe", message=valid.message[:1024])])

    await run_pass(
        observe=observed,
        plan=plan,
        execute=nothing_to_execute,
        write_status=writes_status(ctx, RECIPES, body),
        emit_events=emit,
    )


def register(registry: kopf.OperatorRegistry) -> None:
    """Register the Recipe controller's handlers on ``registry``."""

    @kopf.on.resume(*RECIPE_ID, id="rcp-status", registry=registry)
    @kopf.on.create(*RECIPE_ID, id="rcp-status", registry=registry)
    @kopf.on.update(*RECIPE_ID, id="rcp-status", field="spec", registry=registry)
    async def rcp_status(*, body: kopf.Body, memo: Any, **_: Any) -> None:
        await reconcile(memo.ctx, body=body)
