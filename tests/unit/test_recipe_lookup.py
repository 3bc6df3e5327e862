"""The choice a recipe argument makes among the catalog's registry recipes (``recipe_lookup.choose``)."""

from __future__ import annotations

import pytest

from sparkrun_operator.ops.errors import Conflict, NotFound
from sparkrun_operator.ops.executors.recipe_lookup import Candidate, choose, split_reference

A = Candidate("reg-a", "team-a/qwen", "team-a-qwen-1a2b3c4d")
B = Candidate("reg-b", "team-a/qwen", "team-a-qwen-5e6f7a8b")
ONLY = Candidate("reg-a", "Qwen_Small", "qwen-small-0badcafe")


def test_split_reference() -> None:
    assert split_reference("@reg-a/team-a/qwen") == ("reg-a", "team-a/qwen")
    assert split_reference("team-a/qwen") == (None, "team-a/qwen")
    assert split_reference("@reg-a") == (None, "@reg-a")
    assert split_reference("@/x") == (None, "@/x")


def test_a_catalog_name_of_one_registry_names_its_object() -> None:
    assert choose("Qwen_Small", [A, B, ONLY]) == ONLY.name
    assert choose("@reg-a/Qwen_Small", [A, B, ONLY]) == ONLY.name
    assert choose("@reg-b/team-a/qwen", [A, B, ONLY]) == B.name


def test_a_name_two_registries_have_is_a_conflict_listing_both() -> None:
    with pytest.raises(Conflict) as raised:
        choose("team-a/qwen", [B, A, ONLY])
    choices = ["@reg-a/team-a/qwen", "@reg-b/team-a/qwen"]
    assert raised.value.attrs == {"reason": "ambiguous_recipe", "choices": choices}
    assert "@reg-a/team-a/qwen, @reg-b/team-a/qwen" in raised.value.detail


@pytest.mark.parametrize(
    "reference", ["team-z/qwen", "@reg-c/team-a/qwen", "@reg-b/Qwen_Small", "qwen_small"]
)
def test_no_match_is_unknown_recipe(reference: str) -> None:
    with pytest.raises(NotFound, match=r"^Unknown recipe: "):
        choose(reference, [A, B, ONLY])
