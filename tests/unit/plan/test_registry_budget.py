"""A RecipeRegistry's status within its size budget (``plan/registry_budget.py``): what is cut and
in which order, that the digests of written objects (what trust reads) survive every cut but the
last, and that the ``Synced`` message of a sync says what was cut."""

from __future__ import annotations

import datetime as dt
import hashlib

from sparkrun_operator.api.registry import (
    MAX_LISTED,
    MAX_PROBLEMS,
    MAX_RECIPES,
    RecipeRegistryStatus,
    RegisteredConfigMap,
    RegistryProblem,
    RegistryRecipeEntry,
)
from sparkrun_operator.plan import registry_status
from sparkrun_operator.plan.registry import SyncPlan
from sparkrun_operator.plan.registry_budget import STATUS_BUDGET, fit, wire_size
from sparkrun_operator.plan.registry_status import Moment

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def _digest(i: int, kind: str = "r") -> str:
    return hashlib.sha256(f"{kind}{i}".encode()).hexdigest()


def _entries(n: int, *, name_len: int, path_len: int, catalog_len: int) -> list[RegistryRecipeEntry]:
    out = []
    for i in range(n):
        name = f"r{i:05d}-" + "n" * max(0, name_len - 7)
        written = i % 10 != 9  # every tenth: invalid from the start, never written
        out.append(
            RegistryRecipeEntry(
                name=name[:name_len],
                catalog_name=f"c{i:05d}" + "c" * max(0, catalog_len - 6),
                path=f"recipes/{i:05d}/" + "p" * max(0, path_len - 15) + ".yaml",
                digest=_digest(i) if written else None,
                valid=written,
            )
        )
    return out


def _config_maps(n: int, *, name_len: int, item_len: int) -> list[RegisteredConfigMap]:
    return [
        RegisteredConfigMap(
            name=(f"reg-mod-{i:05d}-" + "m" * name_len)[:name_len],
            kind="mod",
            item=f"mods/{i:05d}" + "i" * max(0, item_len - 10),
            digest=_digest(i, "c"),
        )
        for i in range(n)
    ]


def _problems(n: int, size: int) -> list[RegistryProblem]:
    return [
        RegistryProblem(path=f"recipes/{i}.yaml", message=f"invalid {i}: " + "x" * size) for i in range(n)
    ]


def _status(**lists: object) -> RecipeRegistryStatus:
    return RecipeRegistryStatus.model_validate({"commit": "a" * 40, **lists})


def _digests(status: RecipeRegistryStatus) -> set[tuple[str, str | None]]:
    written = {(e.name, e.digest) for e in status.recipes if e.digest}
    return written | {(c.name, c.digest) for c in status.config_maps}


def test_a_status_within_the_budget_is_left_as_it_is() -> None:
    status = _status(
        recipes=_entries(200, name_len=30, path_len=60, catalog_len=30),
        problems=_problems(20, 200),
        mods=["mods/a", "mods/b"],
    )
    fitted = fit(status)
    assert fitted.note is None
    assert fitted.status == status


def test_problems_go_first_from_the_end() -> None:
    status = _status(
        recipes=_entries(100, name_len=30, path_len=60, catalog_len=30),
        problems=_problems(MAX_PROBLEMS, 1900),
        mods=["mods/a"],
    )
    budget = wire_size(status) - 100 * 1024
    fitted = fit(status, budget)
    assert wire_size(fitted.status) <= budget
    kept = len(fitted.status.problems)
    assert 0 < kept < MAX_PROBLEMS
    assert fitted.status.problems == status.problems[:kept]
    assert fitted.note == (
        f"status cut to {budget // 1024} KiB: {MAX_PROBLEMS - kept} of {MAX_PROBLEMS} problems not listed"
    )
    # nothing else was touched
    assert (fitted.status.recipes, fitted.status.mods) == (status.recipes, status.mods)
    assert len(status.problems) == MAX_PROBLEMS  # the input is not changed


def test_every_list_at_its_bound_keeps_every_digest_of_what_was_written() -> None:
    """Every list at its count bound, with long paths, catalog names and problems (about 6 MiB of
    JSON): the cuts up to the undigested entries bring it within 512 KiB, and every Recipe and
    ConfigMap written keeps its digest (so its trust)."""
    status = _status(
        recipes=_entries(MAX_RECIPES, name_len=100, path_len=1000, catalog_len=500),
        config_maps=_config_maps(512, name_len=40, item_len=500),
        problems=_problems(MAX_PROBLEMS, 2000),
        mods=[f"mods/{i}" + "m" * 400 for i in range(MAX_LISTED)],
        benchmarkProfiles=[f"p{i}" + "p" * 400 for i in range(MAX_LISTED)],
        tuning=[f"t{i}" + "t" * 400 for i in range(MAX_LISTED)],
    )
    assert wire_size(status) > 5 * 1024 * 1024
    fitted = fit(status)
    assert wire_size(fitted.status) <= STATUS_BUDGET
    assert _digests(fitted.status) == _digests(status)
    assert all(e.digest for e in fitted.status.recipes)  # the undigested went
    assert fitted.status.problems == []
    assert (fitted.status.mods, fitted.status.benchmark_profiles, fitted.status.tuning) == ([], [], [])
    assert {e.path for e in fitted.status.recipes} == {""}
    assert fitted.note is not None
    for said in (
        f"{MAX_PROBLEMS} of {MAX_PROBLEMS} problems not listed",
        "the mods, benchmarkProfiles and tuning lists left out",
        "recipe paths left out",
        "catalog names and ConfigMap items left out",
        f"{MAX_RECIPES // 10} recipes never written not listed",
    ):
        assert said in fitted.note, fitted.note
    assert "not trusted" not in fitted.note
    # the fitted status is still a valid status (what the CRD's schema says, via its model)
    assert RecipeRegistryStatus.model_validate(fitted.status.model_dump(by_alias=True)) == fitted.status


def test_entries_are_capped_last_and_the_note_says_they_are_not_trusted() -> None:
    """Names at their 253-character bound: even bare entries pass the budget, so the last entries
    are not listed (those objects are served, not trusted) and the note says so."""
    status = _status(
        recipes=[
            RegistryRecipeEntry(
                name=f"r{i:05d}" + "n" * 247, catalog_name="x", path="p", digest=_digest(i), valid=True
            )
            for i in range(MAX_RECIPES)
        ],
        config_maps=_config_maps(2 * MAX_LISTED, name_len=253, item_len=10),
    )
    fitted = fit(status)
    assert wire_size(fitted.status) <= STATUS_BUDGET
    kept_recipes, kept_maps = len(fitted.status.recipes), len(fitted.status.config_maps)
    assert kept_recipes < MAX_RECIPES
    assert [e.name for e in fitted.status.recipes] == [e.name for e in status.recipes[:kept_recipes]]
    assert [c.digest for c in fitted.status.config_maps] == [c.digest for c in status.config_maps[:kept_maps]]
    assert fitted.note is not None
    assert (
        f"{MAX_RECIPES - kept_recipes} of {MAX_RECIPES} Recipes and {2 * MAX_LISTED - kept_maps} of "
        f"{2 * MAX_LISTED} ConfigMaps not listed: they stay written but are not trusted"
    ) in fitted.note


def test_a_sync_says_what_was_cut_in_its_synced_condition() -> None:
    entries = _entries(MAX_RECIPES, name_len=40, path_len=1000, catalog_len=30)
    problems = _problems(MAX_PROBLEMS, 2000)
    planned = SyncPlan()
    at = Moment(generation=1, request=None, now=T0)
    status = registry_status.synced(
        RecipeRegistryStatus(),
        at,
        commit="b" * 40,
        planned=planned,
        entries=entries,
        config_maps=[],
        problems=problems,
    )
    assert wire_size(status) <= STATUS_BUDGET + 16 * 1024  # the conditions come on top
    assert _digests(status) == {(e.name, e.digest) for e in entries if e.digest}
    synced = next(c for c in status.conditions if c.type == "Synced")
    assert synced.reason == "SyncedWithProblems"
    assert "status cut to 512 KiB:" in synced.message
    assert "recipe paths left out" in synced.message
    assert f"{MAX_PROBLEMS} problem(s) in status.problems" in synced.message
