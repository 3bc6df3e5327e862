"""The Recipe planner (``recipe/status.py``): revision, intent id, issues and the Valid condition."""

from __future__ import annotations

import datetime as dt

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.recipe import RecipeSpec, RecipeStatus
from sparkrun_operator.recipe import identity as recipe_identity
from sparkrun_operator.recipe.status import plan_status

NOW = dt.datetime(2026, 9, 1, tzinfo=dt.UTC)


def test_valid_recipe_carries_sparkrun_ids() -> None:
    spec = RecipeSpec.model_validate({"model": "Qwen/Qwen3-8B", "defaults": {"tensor_parallel": 2}})
    status = plan_status(spec=spec, generation=4, previous=RecipeStatus(), now=NOW)
    assert status.revision == recipe_identity.recipe_revision(spec.to_v2())
    assert status.intent_id == recipe_identity.intent_id(spec.to_v2())
    assert status.observed_generation == 4
    assert [(k.type, k.status, k.reason) for k in status.conditions] == [(c.VALID, "True", c.REASON_VALID)]
    again = plan_status(spec=spec, generation=4, previous=status, now=NOW + dt.timedelta(hours=1))
    assert again == status


def test_invalid_recipe_lists_issues() -> None:
    spec = RecipeSpec.model_validate({"model": "m/m", "runtime": "sglang", "postExec": ["x"]})
    status = plan_status(spec=spec, generation=1, previous=RecipeStatus(), now=NOW)
    assert [(i.severity, i.field) for i in status.issues] == [("error", "runtime"), ("warning", "post_exec")]
    assert status.conditions[0].status == "False"
    assert "sglang" in status.conditions[0].message
    assert status.revision is not None  # identity does not depend on being servable here


def test_unsupported_key_has_no_revision() -> None:
    spec = RecipeSpec.model_validate({"model": "m/m", "runtimeConfig": {"include": "base"}})
    status = plan_status(spec=spec, generation=1, previous=RecipeStatus(), now=NOW)
    assert status.revision is None
    assert any("include" in i.message for i in status.issues)
