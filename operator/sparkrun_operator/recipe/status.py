"""The Recipe planner: a Recipe spec -> its status (revision, intent id, issues, Valid).

Pure. ``revision`` and ``intentId`` are sparkrun's own fingerprint and intent id of the recipe
as written (no launch overrides), so they read the same as ``sparkrun`` prints; ``issues`` are
what would stop (error) or change (warning) serving it with this operator.
"""

from __future__ import annotations

import datetime as dt

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.meta import Condition, set_condition
from sparkrun_operator.api.recipe import RecipeIssue, RecipeSpec, RecipeStatus
from sparkrun_operator.recipe import identity
from sparkrun_operator.recipe.resolve import validate_recipe


def plan_status(
    *, spec: RecipeSpec, generation: int, previous: RecipeStatus, now: dt.datetime
) -> RecipeStatus:
    """The complete status of a Recipe."""
    issues = validate_recipe(spec)
    revision: str | None = None
    intent: str | None = None
    try:
        revision = identity.recipe_revision(spec.to_v2())
        intent = identity.intent_id(spec.to_v2())
    except ValueError as error:
        if not any(i.message == str(error) for i in issues):
            issues.append(RecipeIssue(severity="error", message=str(error)))
    errors = [i for i in issues if i.severity == "error"]
    conditions: list[Condition] = [cond.model_copy() for cond in previous.conditions]
    if errors:
        message = "; ".join(f"{i.field}: {i.message}" if i.field else i.message for i in errors)
        set_condition(
            conditions,
            type=c.VALID,
            status="False",
            reason=c.REASON_INVALID,
            message=message,
            observed_generation=generation,
            now=now,
        )
    else:
        warnings = len(issues)
        set_condition(
            conditions,
            type=c.VALID,
            status="True",
            reason=c.REASON_VALID,
            message=f"revision {revision}"
            + (f"; {warnings} warning(s), see status.issues" if warnings else ""),
            observed_generation=generation,
            now=now,
        )
    return RecipeStatus(
        observed_generation=generation,
        conditions=[cond for cond in conditions if cond.type == c.VALID],
        revision=revision,
        intent_id=intent,
        issues=issues,
    )
