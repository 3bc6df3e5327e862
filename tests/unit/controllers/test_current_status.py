"""``current_status``: the status every controller plans from."""

from __future__ import annotations

from sparkrun_operator.api.recipe import RecipeStatus
from sparkrun_operator.controllers.status import current_status


def test_a_status_parses_and_a_broken_one_starts_over() -> None:
    parsed = current_status({"status": {"observedGeneration": 3}}, RecipeStatus)
    assert parsed.observed_generation == 3
    assert current_status({}, RecipeStatus) == RecipeStatus()
    broken = {"status": {"observedGeneration": "not a number"}}
    assert current_status(broken, RecipeStatus) == RecipeStatus()
