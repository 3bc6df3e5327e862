"""Registry benchmark profiles (``@<registry>/<name>``, pure): which ConfigMap a scoped name picks
(the name, else a unique stem; ambiguity refused), the ownership check by UID, the document read
as sparkrun reads a standalone profile within its bounds, the framework rule, and what the
planner and the rendered Job do with it (sparkrun's merge: defaults <- profile <- bench_args)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec, InferenceBenchmarkStatus
from sparkrun_operator.plan import benchprofile
from sparkrun_operator.plan.benchmark import BenchmarkObservation, plan
from sparkrun_operator.plan.benchprofile import ProfileError, ScopedName, choose, parse_document, scoped
from sparkrun_operator.recipe.trust import config_map_digest
from sparkrun_operator.render import keys
from sparkrun_operator.runtime import benchframeworks
from tests.unit.plan.test_benchmark_plan import READY, T0

API = "sparkrun.dev/v1alpha1"
NESTED = "benchmark:\n  framework: llama-benchy\n  timeout: 900\n  args:\n    pp: [4096]\n    tg: [64]\n"
FLAT = "framework: llama-benchy\npp: [1024]\ndepth: [0, 8192]\nmetadata: {note: not an argument}\n"


def _cm(name: str, text: str, *, uid: str = "reg-uid", controller: bool = True) -> dict[str, Any]:
    return {
        "metadata": {
            "name": f"official-bench-{name.replace('/', '-')}",
            "namespace": "recipes",
            "labels": {keys.LABEL_REGISTRY: "official", keys.LABEL_BENCHMARK_PROFILE: "x"},
            "annotations": {keys.ANNOTATION_BENCHMARK_PROFILE_NAME: name},
            "ownerReferences": [
                {
                    "apiVersion": API,
                    "kind": "RecipeRegistry",
                    "name": "official",
                    "uid": uid,
                    "controller": controller,
                }
            ],
        },
        "data": {benchprofile.PROFILE_KEY: text},
    }


def _registry(*written: dict[str, Any], enabled: bool = True) -> dict[str, Any]:
    """The registry, its status recording ``written`` (as its controller wrote them)."""
    recorded = [
        {
            "name": cm["metadata"]["name"],
            "kind": "benchmarkProfile",
            "item": cm["metadata"]["annotations"][keys.ANNOTATION_BENCHMARK_PROFILE_NAME],
            "digest": config_map_digest(cm),
        }
        for cm in written
    ]
    return {
        "metadata": {"name": "official", "uid": "reg-uid"},
        "spec": {"enabled": enabled},
        "status": {"configMaps": recorded},
    }


def test_scoped_names() -> None:
    assert scoped("@official/spark-arena-v2") == ScopedName("official", "spark-arena-v2")
    assert scoped("@official/suite/foo") == ScopedName("official", "suite/foo")
    assert str(scoped("@a/b")) == "@a/b"
    for other in (None, "", "quick", "@official", "@/x", "@x/", "suite/foo"):
        assert scoped(other) is None, other


def test_the_name_then_a_unique_stem_picks_the_profile() -> None:
    maps = [_cm("spark-arena-v2", NESTED), _cm("suite/long", FLAT)]
    found = choose(ScopedName("official", "spark-arena-v2"), _registry(*maps), maps, "llama-benchy")
    assert (found.framework, dict(found.args), found.timeout) == (
        "llama-benchy",
        {"pp": [4096], "tg": [64]},
        900,
    )
    assert found.source == "recipes/official-bench-spark-arena-v2"
    assert found.reference == "@official/spark-arena-v2"
    by_stem = choose(ScopedName("official", "long"), _registry(*maps), maps, None)
    # flat: unknown keys are swept into args; metadata is not an argument
    assert dict(by_stem.args) == {"pp": [1024], "depth": [0, 8192]}
    assert choose(ScopedName("official", "suite/long"), _registry(*maps), maps, None).args == by_stem.args


def test_ambiguity_is_refused_naming_each_choice() -> None:
    maps = [_cm("a/long", FLAT), _cm("b/long", FLAT)]
    with pytest.raises(ProfileError) as caught:
        choose(ScopedName("official", "long"), _registry(*maps), maps, None)
    assert caught.value.reason == "ProfileAmbiguous"
    assert "@official/a/long, @official/b/long" in str(caught.value)


def test_only_the_registrys_own_config_maps_count() -> None:
    forged = [_cm("evil", NESTED, uid="other-uid"), _cm("evil2", NESTED, controller=False)]
    with pytest.raises(ProfileError) as caught:
        choose(ScopedName("official", "evil"), _registry(*forged), forged, None)
    assert caught.value.reason == "ProfileNotFound"
    assert str(caught.value) == (
        "benchmark profile @official/evil not found in registry official (its profiles: none)"
    )


def test_missing_or_disabled_registry_and_unknown_profile() -> None:
    with pytest.raises(ProfileError, match="no RecipeRegistry 'nope'"):
        choose(ScopedName("nope", "x"), None, [], None)
    maps = [_cm("spark-arena-v2", NESTED)]
    with pytest.raises(ProfileError, match="RecipeRegistry official is disabled"):
        choose(ScopedName("official", "spark-arena-v2"), _registry(*maps, enabled=False), maps, None)
    with pytest.raises(ProfileError, match=r"its profiles: spark-arena-v2\)"):
        choose(ScopedName("official", "other"), _registry(*maps), maps, None)


def test_an_edited_profile_is_refused_until_the_registry_writes_it_back() -> None:
    """A tenant who may edit ConfigMaps in the target namespace changes a registry's profile:
    its data no longer has the digest the registry recorded, so it is refused, saying why."""
    written = _cm("spark-arena-v2", NESTED)
    registry = _registry(written)
    edited = _cm("spark-arena-v2", NESTED.replace("pp: [4096]", "pp: [1]"))
    with pytest.raises(ProfileError) as caught:
        choose(ScopedName("official", "spark-arena-v2"), registry, [edited], None)
    assert caught.value.reason == "ProfileEdited"
    assert str(caught.value) == (
        "benchmark profile @official/spark-arena-v2: ConfigMap recipes/official-bench-spark-arena-v2: "
        "edited since RecipeRegistry official wrote it; the next sync restores it"
    )
    # a key added beside profile.yaml changes the digest too
    extra = {**written, "data": {**written["data"], "other": "x"}}
    with pytest.raises(ProfileError, match="edited since RecipeRegistry official wrote it"):
        choose(ScopedName("official", "spark-arena-v2"), registry, [extra], None)
    # as written: used
    assert choose(ScopedName("official", "spark-arena-v2"), registry, [written], None).args


def test_a_config_map_the_registry_did_not_record_is_not_its_profile() -> None:
    """Owned by the registry's UID (an ownerReference anyone may write) but absent from its
    status.configMaps: not a profile (not synced yet, or forged); it cannot make a real one
    ambiguous either."""
    real = _cm("a/long", FLAT)
    forged = _cm("b/long", NESTED)
    registry = _registry(real)
    found = choose(ScopedName("official", "long"), registry, [real, forged], None)
    assert found.source == "recipes/official-bench-a-long"
    with pytest.raises(ProfileError) as caught:
        choose(ScopedName("official", "b/long"), registry, [real, forged], None)
    assert caught.value.reason == "ProfileNotFound"
    assert str(caught.value) == (
        "benchmark profile @official/b/long not found in registry official (its profiles: a/long); "
        "a ConfigMap of that name is not in the registry's status.configMaps (not synced yet?)"
    )
    # another registry's status entry (a mod of that name) does not count as a profile
    mod_entry = {**_registry(forged)["status"]["configMaps"][0], "kind": "mod"}
    as_mod = {**registry, "status": {"configMaps": [mod_entry]}}
    with pytest.raises(ProfileError, match="its profiles: none"):
        choose(ScopedName("official", "b/long"), as_mod, [forged], None)


def test_the_config_maps_a_name_may_pick_are_read_by_name() -> None:
    """The operator never lists ConfigMaps: a scoped name reads the ConfigMap its name is
    written as (even unrecorded: ``choose`` then says "not synced yet?") and those the status
    records with that name or that file stem, bounded; the message lists the recorded names."""
    maps = [_cm("a/long", FLAT), _cm("b/long", NESTED), _cm("spark-arena-v2", NESTED)]
    registry = _registry(*maps)
    assert benchprofile.candidates(ScopedName("official", "spark-arena-v2"), registry) == [
        "official-bench-spark-arena-v2"
    ]
    assert benchprofile.candidates(ScopedName("official", "long"), registry) == [
        "official-bench-long",
        "official-bench-a-long",
        "official-bench-b-long",
    ]
    many = _registry(*(_cm(f"d{i}/long", FLAT) for i in range(40)))
    assert len(benchprofile.candidates(ScopedName("official", "long"), many)) == benchprofile.MAX_CANDIDATES
    listed = benchprofile.recorded_items(registry)
    assert listed == ["a/long", "b/long", "spark-arena-v2"]
    with pytest.raises(ProfileError, match=r"its profiles: a/long, b/long, spark-arena-v2\)"):
        choose(ScopedName("official", "other"), registry, [], None, listed=listed)


def test_a_profile_of_another_framework_is_refused() -> None:
    tools = "framework: tool-eval-bench\nshort: true\n"
    maps = [_cm("tools", tools)]
    with pytest.raises(ProfileError) as caught:
        choose(ScopedName("official", "tools"), _registry(*maps), maps, "llama-benchy")
    assert caught.value.reason == "ProfileFrameworkMismatch"
    assert "is for tool-eval-bench, not llama-benchy" in str(caught.value)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("a: &x [1]\nb: *x\n", "anchors and aliases are not allowed"),
        ("framework: llama-benchy\npp: [" + "1," * 40000 + "1]\n", "benchmark profile YAML"),
        ("- a\n", "is not a YAML mapping"),
        ("pp: [1]\n", "no 'benchmark' mapping and no framework"),
        ("framework: [x]\n", "framework must be a string"),
        ("framework: llama-benchy\nargs: [1]\n", "args must be a mapping"),
        ("framework: llama-benchy\ntimeout: -1\n", "timeout must be a positive integer"),
        ("framework: llama-benchy\n" + "".join(f"k{i}: 1\n" for i in range(200)), "at most 128"),
    ],
)
def test_hostile_documents_are_refused(text: str, why: str) -> None:
    with pytest.raises(ProfileError) as caught:
        parse_document(text, "@official/x")
    assert caught.value.reason == "ProfileInvalid"
    assert why in str(caught.value)


SPEC = InferenceBenchmarkSpec.model_validate(
    {
        "target": {"workloadRef": {"name": "w"}},
        "scenarios": [{"name": "a", "concurrency": 2}],
        "profile": "@official/spark-arena-v2",
        "benchArgs": {"tg": [16]},
    }
)


def _obs(**over: Any) -> BenchmarkObservation:
    fields: dict[str, Any] = {
        "name": "bench",
        "namespace": "ns",
        "uid": "u1",
        "generation": 1,
        "spec": SPEC,
        "status": InferenceBenchmarkStatus(),
        "now": T0,
        "target": READY,
    }
    fields.update(over)
    return BenchmarkObservation(**fields)


def _job_plan(doc: dict[str, Any]) -> dict[str, Any]:
    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
    loaded: dict[str, Any] = json.loads(args[args.index("--plan") + 1])
    return loaded


def test_the_job_carries_the_profiles_arguments_under_the_spec_bench_args() -> None:
    p = plan(_obs(profile_args={"pp": [4096], "tg": [64]}))
    [doc] = p.create
    job_plan = _job_plan(doc)
    assert job_plan["benchArgs"] == {"pp": [4096], "tg": [16]}
    assert job_plan["registryProfile"] == "@official/spark-arena-v2"
    assert "profile" not in job_plan  # the runner knows the built-in ones only
    # what the runner makes of it: defaults <- profile <- bench_args <- the scenario
    merged = benchframeworks.merged_args(
        "llama-benchy",
        profile=job_plan.get("profile"),
        bench_args=job_plan["benchArgs"],
        scenario={"concurrency": 2},
    )
    assert (merged["pp"], merged["tg"], merged["depth"], merged["concurrency"]) == ([4096], [16], [0], [2])


def test_an_unusable_profile_fails_the_benchmark_with_its_reason() -> None:
    p = plan(_obs(profile_error=("ProfileNotFound", "benchmark profile @official/x: no RecipeRegistry")))
    assert p.create == []
    assert p.status.phase == "Failed"
    failed = next(c for c in p.status.conditions if c.type == "Failed")
    assert (failed.reason, failed.message) == (
        "ProfileNotFound",
        "benchmark profile @official/x: no RecipeRegistry",
    )


def test_a_built_in_profile_is_still_the_runners() -> None:
    spec = SPEC.model_copy(update={"profile": "quick"})
    job_plan = _job_plan(plan(_obs(spec=spec)).create[0])
    assert job_plan["profile"] == "quick"
    assert "registryProfile" not in job_plan
