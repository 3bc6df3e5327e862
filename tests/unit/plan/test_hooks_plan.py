"""The planner and a recipe's hooks (issue 32): what reaches the JobSet, ``HooksApplied``, the
startup timeline, and a kept revision that renders its hooks again."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.failures import FailureRecord
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec, InferenceWorkloadStatus
from sparkrun_operator.plan.workload import (
    Observation,
    ObservedJobSet,
    ObservedPod,
    ObservedRecipe,
    hooks,
    identity,
    plan,
)
from sparkrun_operator.plan.workload.gates import check
from sparkrun_operator.plan.workload.hooksource import (
    HookSource,
    ObservedHookJob,
    hook_job_from,
    observed_mod,
)
from sparkrun_operator.plan.workload.model import Conditions
from sparkrun_operator.recipe.trust import Trust
from sparkrun_operator.render import frozen, keys

NOW = dt.datetime(2026, 9, 1, 12, 0, tzinfo=dt.UTC)
RECIPE = RecipeSpec.model_validate(
    {
        "model": "Qwen/Qwen3-0.6B",
        "runtime": "vllm",
        "pre_exec": ["echo {model} > /tmp/pre"],
        "post_exec": ["curl -s {base_url}/models"],
        "runtime_config": {"mods": ["mods/fix-x"]},
    }
)
MANIFEST = '{"name":"mods/fix-x","files":[{"key":"f0","path":"run.sh","mode":493}]}'
TRUSTED = HookSource(
    trust=Trust(True, "from trusted RecipeRegistry reg", "reg"),
    mods=(observed_mod("reg", "mods/fix-x", "reg-mod-fix-x", {"manifest.json": MANIFEST, "f0": "true"}, {}),),
)
UNTRUSTED = HookSource(trust=Trust(False, "RecipeRegistry reg is not trusted", "reg"))


def _obs(hooks: HookSource | None, **kwargs: Any) -> Observation:
    values: dict[str, Any] = {
        "name": "qwen",
        "namespace": "ns",
        "uid": "uid-w",
        "generation": 1,
        "spec": InferenceWorkloadSpec.model_validate({"recipe": {"name": "r"}}),
        "status": InferenceWorkloadStatus(),
        "now": NOW,
        "created": NOW,
        "recipe": ObservedRecipe(name="r", spec=RECIPE),
        "hooks": hooks,
    }
    values.update(kwargs)
    return Observation(**values)


def _engine(p: Any) -> dict[str, Any]:
    jobsets = [d for d in p.apply if d["kind"] == "JobSet"]
    assert len(jobsets) == 1
    pod = jobsets[0]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    engine: dict[str, Any] = pod["containers"][0]
    return engine


def test_a_trusted_recipe_runs_its_mods_and_hooks_in_the_engine_pod() -> None:
    p = plan(_obs(TRUSTED))
    engine = _engine(p)
    script = engine["args"][0]
    assert "echo Qwen/Qwen3-0.6B > /tmp/pre" in script
    assert "curl -s http://qwen.ns.svc:8000/v1/models" in script
    assert "/run/sparkrun/mod-src/0/run.sh" in script
    cond = find_condition(p.status.conditions, c.HOOKS_APPLIED)
    assert cond is not None
    assert (cond.status, cond.reason) == ("True", c.REASON_HOOKS_APPLIED)
    assert p.revision != plan(_obs(UNTRUSTED)).revision


def test_an_untrusted_recipe_runs_nothing_and_the_workload_says_so() -> None:
    p = plan(_obs(UNTRUSTED))
    engine = _engine(p)
    assert engine["command"] == ["vllm", "serve"]
    cond = find_condition(p.status.conditions, c.HOOKS_APPLIED)
    assert cond is not None
    assert (cond.status, cond.reason) == ("False", c.REASON_HOOKS_UNTRUSTED)
    assert "mods mods/fix-x; pre_exec; post_exec" in cond.message
    skipped = [e for e in p.status.startup if e.outcome == "skipped"]
    assert [e.stage for e in skipped] == ["preExec"]
    # a Recipe applied with kubectl: no source at all
    assert plan(_obs(None)).revision == p.revision


def test_a_missing_mod_is_named_and_the_rest_runs() -> None:
    p = plan(_obs(HookSource(trust=TRUSTED.trust)))
    assert "echo Qwen/Qwen3-0.6B" in _engine(p)["args"][0]
    assert "mod-src" not in _engine(p)["args"][0]
    cond = find_condition(p.status.conditions, c.HOOKS_APPLIED)
    assert cond is not None
    assert cond.reason == c.REASON_MODS_UNRESOLVED
    assert "mods/fix-x (not found in RecipeRegistry reg or RecipeRegistry eugr)" in cond.message


def test_the_timeline_says_ok_at_ready_and_names_a_failed_step() -> None:
    revision = plan(_obs(TRUSTED)).revision
    assert revision is not None
    js = ObservedJobSet(
        name=f"qwen-0-{revision[:5]}", uid="u", replica=0, revision=revision, leader_ready=True
    )
    leader = ObservedPod(
        name="l",
        jobset=js.name,
        role="leader",
        replica=0,
        revision=revision,
        phase="Running",
        ready=True,
        ip="10.0.0.1",
        node="n",
        ready_time=NOW,
    )
    p = plan(_obs(TRUSTED, jobsets=(js,), pods=(leader,)))
    got = {(e.stage, e.outcome) for e in p.status.startup if e.replica == 0}
    assert {("mods", "ok"), ("preExec", "ok")} <= got
    failed = FailureRecord(
        reason="Error",
        message="...\nsparkrun hook failed: pre_exec[1] exited 7\n",
        time=NOW,
        replica=1,
        revision=revision,
    )
    p = plan(_obs(TRUSTED, failures=(failed,)))
    events = [e for e in p.status.startup if e.outcome == "failed"]
    assert [(e.stage, e.replica, e.message) for e in events] == [("preExec", 1, "pre_exec[1] exited 7")]


def test_a_kept_revision_renders_its_hooks_again() -> None:
    obs = _obs(TRUSTED)
    found = check(obs, Conditions([], 1, NOW), InferenceWorkloadStatus())
    decision = hooks.settle(obs, found.effective, Conditions([], 1, NOW))
    desired = identity.desired(obs, found, decision.plan)
    assert desired is not None
    assert desired.hooks is not None
    again = frozen.from_wire(frozen.to_wire(desired))
    assert again.hooks == desired.hooks
    assert again.revision() == desired.revision() == plan(obs).revision


def _ready(revision: str) -> tuple[ObservedJobSet, ObservedPod]:
    js = ObservedJobSet(
        name=f"qwen-0-{revision[:5]}", uid="u", replica=0, revision=revision, leader_ready=True
    )
    leader = ObservedPod(
        name="leader-0",
        jobset=js.name,
        role="leader",
        replica=0,
        revision=revision,
        phase="Running",
        ready=True,
        ip="10.0.0.1",
        node="n",
        ready_time=NOW,
    )
    return js, leader


WITH_POST = RecipeSpec.model_validate(
    {
        "model": "Qwen/Qwen3-0.6B",
        "runtime": "vllm",
        "post_commands": [{"command": "echo {base_url}", "timeout": 30}],
    }
)


def test_post_commands_run_once_as_a_job_when_the_revision_is_ready() -> None:
    recipe = ObservedRecipe(name="r", spec=WITH_POST)
    revision = plan(_obs(TRUSTED, recipe=recipe)).revision
    assert revision is not None
    assert not [d for d in plan(_obs(TRUSTED, recipe=recipe)).apply if d["kind"] == "Job"]  # not Ready yet
    js, leader = _ready(revision)
    p = plan(_obs(TRUSTED, recipe=recipe, jobsets=(js,), pods=(leader,)))
    (job,) = [d for d in p.apply if d["kind"] == "Job"]
    assert job["metadata"]["name"] == f"qwen-post-{revision}"
    assert job["metadata"]["ownerReferences"][0]["uid"] == "uid-w"
    assert "echo http://qwen.ns.svc:8000/v1" in job["spec"]["template"]["spec"]["containers"][0]["args"][0]
    done = ObservedHookJob(
        name=job["metadata"]["name"],
        uid="j",
        revision=revision,
        owner_uid="uid-w",
        succeeded=False,
        message="BackoffLimitExceeded",
        time=NOW,
    )
    p = plan(_obs(TRUSTED, recipe=recipe, jobsets=(js,), pods=(leader,), hook_jobs=(done,)))
    assert not [d for d in p.apply if d["kind"] == "Job"]
    (event,) = [e for e in p.status.startup if e.stage == "postCommands"]
    assert (event.outcome, event.message) == ("failed", f"Job qwen-post-{revision}: BackoffLimitExceeded")
    # a Job of the same labels another workload (UID) owns is not this one's
    foreign = ObservedHookJob(name="x", uid="j2", revision=revision, owner_uid="someone-else", succeeded=True)
    p = plan(_obs(TRUSTED, recipe=recipe, jobsets=(js,), pods=(leader,), hook_jobs=(foreign,)))
    assert [d["kind"] for d in p.apply if d["kind"] == "Job"] == ["Job"]


def test_post_exec_is_looked_at_again_until_the_leaders_log_shows_it() -> None:
    revision = plan(_obs(TRUSTED)).revision
    assert revision is not None
    js, leader = _ready(revision)
    p = plan(_obs(TRUSTED, jobsets=(js,), pods=(leader,)))
    assert p.requeue_after is not None
    assert p.requeue_after <= hooks.POST_EXEC_POLL_S
    assert "postExec" not in {e.stage for e in p.status.startup}
    p = plan(_obs(TRUSTED, jobsets=(js,), pods=(leader,), post_exec={"leader-0": ("ok", NOW)}))
    assert ("postExec", "ok") in {(e.stage, e.outcome) for e in p.status.startup}


def test_hook_job_from_a_watched_job() -> None:
    body = {
        "metadata": {
            "name": "qwen-post-0123456789",
            "namespace": "ns",
            "uid": "j",
            "labels": {keys.LABEL_HOOK_WORKLOAD: "qwen", keys.LABEL_REVISION: "0123456789"},
            "ownerReferences": [{"controller": True, "uid": "uid-w"}],
        },
        "status": {
            "conditions": [
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-09-01T12:00:00Z"}
            ]
        },
    }
    found = hook_job_from(body)
    assert found is not None
    assert found[0] == ("ns", "qwen")
    assert (found[1].succeeded, found[1].owner_uid, found[1].time) == (True, "uid-w", NOW)
    assert hook_job_from({"metadata": {"labels": {}}}) is None
