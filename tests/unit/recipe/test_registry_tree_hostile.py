"""A hostile registry's files (review R1 of issue 32): whatever a commit holds, a sync plans
writes and a status the apiserver accepts, two items never share an object name, and the
registry's own subpath is read, never the whole repository."""

from __future__ import annotations

import datetime as dt

from sparkrun_operator.api.registry import RecipeRegistryStatus
from sparkrun_operator.plan import registry_status
from sparkrun_operator.plan.registry import finish, plan_sync
from sparkrun_operator.plan.registry_status import Moment
from sparkrun_operator.recipe.registry_tree import MANIFEST_PATH, read_registry, slug
from sparkrun_operator.render.registry import RegistryRef

RECIPE = b"model: org/model-a\nruntime: vllm\n"
REF = RegistryRef(name="reg", uid="uid-1", namespace="team")
COMMIT = "c" * 40
MANIFEST = b"registries:\n- name: r\n  recipes: recipes\n  mods: mods\n  benchmarks: bench\n  tuning: tune\n"


def _status(files: dict[str, bytes], subpath: str = "recipes") -> RecipeRegistryStatus:
    """The status a sync of ``files`` writes (every write answered as planned), validated against
    the model the CRD is generated from (its maxLength bounds are the apiserver's)."""
    contents = read_registry(files, subpath)
    planned = plan_sync(
        REF, commit=COMMIT, contents=contents, recipes=[], config_maps=[], previous=RecipeRegistryStatus()
    )
    written = {w.name: w.body for w in planned.writes if w.resource == "Recipe"}
    entries, config_maps, problems = finish(planned, written=written, refused={})
    at = Moment(generation=1, request=None, now=dt.datetime(2026, 1, 1, tzinfo=dt.UTC))
    status = registry_status.synced(
        RecipeRegistryStatus(),
        at,
        commit=COMMIT,
        planned=planned,
        entries=entries,
        config_maps=config_maps,
        problems=problems,
    )
    return RecipeRegistryStatus.model_validate(status.to_wire())


def test_long_paths_and_names_are_problems_not_a_failed_sync() -> None:
    """Git allows 4096-character paths (255 per directory): catalog names and paths past the
    status's bounds (512 and 1024 characters) must not fail every sync of the registry."""
    deep = "/".join(["d" * 200] * 6)
    files = {
        MANIFEST_PATH: MANIFEST,
        "recipes/ok.yaml": RECIPE,
        f"recipes/{deep}/long.yaml": RECIPE,
        f"recipes/{'n' * 600}.yaml": RECIPE,
        f"mods/{'m' * 600}/run.sh": b"echo\n",
        f"bench/{'p' * 600}.yaml": b"a: 1\n",
        f"tune/{'t' * 600}.json": b"{}",
    }
    status = _status(files)
    assert [e.catalog_name for e in status.recipes] == ["ok"]
    assert status.mods == []
    assert status.benchmark_profiles == []
    assert status.tuning == []
    assert len(status.problems) == 5
    assert all(len(p.path) <= 1024 for p in status.problems)
    assert sum("too long" in p.message for p in status.problems) == 5


def test_a_catalog_name_that_is_another_ones_slug_does_not_share_its_recipe() -> None:
    """``Foo`` is not a DNS name, so its Recipe is ``foo-<hash>``; a file named exactly that must
    not become the same Recipe (one would overwrite the other, and trust's digest with it)."""
    taken = slug("Foo")
    files = {"recipes/Foo.yaml": RECIPE, f"recipes/{taken}.yaml": RECIPE.replace(b"model-a", b"model-b")}
    contents = read_registry(files, "recipes")
    names = [r.slug for r in contents.recipes]
    assert len(names) == len(set(names))
    status = _status(files)
    assert len({e.name for e in status.recipes}) == len(status.recipes)
    mods = read_registry(
        {MANIFEST_PATH: MANIFEST, "mods/Fix/run.sh": b"a", f"mods/{slug('Fix')}/run.sh": b"b"}, "recipes"
    ).mods
    assert len({m.slug for m in mods}) == len(mods)


def test_the_registry_subpath_is_read_even_with_characters_sparkrun_refuses_in_manifests() -> None:
    """The spec's subpath may hold ``@`` and ``+`` (the CRD allows them); it is still the only
    place recipes are read from, never the repository's root."""
    files = {
        "recipes@v2/a.yaml": RECIPE,
        "elsewhere/b.yaml": RECIPE,
        "bench/profile.yaml": b"benchmark: {}\n",
    }
    contents = read_registry(files, "recipes@v2")
    assert [(r.catalog_name, r.path) for r in contents.recipes] == [("a", "recipes@v2/a.yaml")]


def test_a_mod_file_with_a_path_out_of_its_directory_is_a_problem() -> None:
    """``read_registry`` takes files from anywhere (the fetch never returns such names): a mod file
    whose path has an empty segment (``//``: an absolute path in the mod's manifest) or a control
    character is refused at sync, not at pod start. (A ``..`` segment is a dot-directory: left out.)"""
    files = {
        MANIFEST_PATH: MANIFEST,
        "mods/fix/run.sh": b"echo\n",
        "mods/fix//abs": b"escape",
        "mods/dots/run.sh": b"echo\n",
        "mods/dots/../../x": b"escape",
        "mods/ok/run.sh": b"echo\n",
        "mods/nl/run.sh": b"echo\n",
        "mods/nl/a\nb": b"x",
    }
    mods = {m.name: m for m in read_registry(files, "recipes").mods}
    assert mods["mods/ok"].problem is None
    assert mods["mods/dots"].problem is None
    assert mods["mods/dots"].files == {"run.sh": b"echo\n"}
    assert mods["mods/fix"].problem is not None
    assert mods["mods/nl"].problem is not None
