"""What of a recipe's hooks and mods runs for a workload (issue 32): the decision, pure.

Follows sparkrun (``core/launcher.py`` ``resolve_recipe_trust``, ``core/mods.py``): hooks
(``pre_exec``, ``post_exec``, ``post_commands``) **and mods** run only for a trusted recipe (mods
become ``pre_exec`` entries there, under its trust). Trust is ``recipe/trust.py``'s verdict. A
mod resolves, as in sparkrun, in the recipe's own registry first, then in the registry named
``eugr``; here that means the mod ConfigMap a RecipeRegistry wrote (``<registry>-mod-<slug>``, its
``manifest.json`` listing the files), in the workload's namespace. An entry that cannot run here
(a ``copy`` entry: a path on sparkrun's control machine) or a mod that does not resolve is named
in the ``HooksApplied`` condition; the rest runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.failures import FailureRecord
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import ENGINE_PORT, InferenceWorkloadStatus, StartupEvent
from sparkrun_operator.plan.workload.hooksource import HookSource, ObservedMod
from sparkrun_operator.plan.workload.model import Conditions, Observation, ObservedPod, Plan, leader_pod
from sparkrun_operator.recipe.resolve import EffectiveSpec
from sparkrun_operator.render.hookjob import render_post_commands_job
from sparkrun_operator.render.hooks import (
    FAILED_PREFIX,
    HookPlan,
    HookStep,
    ModSource,
    steps,
)
from sparkrun_operator.render.workload import Owner, endpoint_url

#: sparkrun's fallback registry for mods (``EUGR_FALLBACK_REGISTRY``).
FALLBACK_REGISTRY: Final = "eugr"


@dataclass(frozen=True, kw_only=True)
class Decision:
    """The plan for the pods (``None``: nothing runs in them), post_commands, and the
    ``HooksApplied`` condition (``None``: the recipe declares no hooks and no mods)."""

    plan: HookPlan | None = None
    post_commands: tuple[HookStep, ...] = ()
    condition: tuple[bool, str, str] | None = None


def declared_mods(recipe: RecipeSpec) -> list[str]:
    """The recipe's ``mods`` (sparkrun keeps an unknown top-level key in ``runtime_config``)."""
    raw = (recipe.runtime_config or {}).get("mods")
    return [m for m in raw if isinstance(m, str) and m.strip()] if isinstance(raw, list) else []


def mod_key(ref: str) -> str:
    """A mod's name as compared (``mods/fix-x``, ``fix-x/`` and ``fix-x`` are one mod)."""
    return ref.strip().strip("/").removeprefix("mods/")


def mod_lookup(ref: str, own: str | None) -> tuple[tuple[str | None, ...], str]:
    """The registries ``ref`` is looked up in, in order (sparkrun's: ``@registry/...``, else the
    recipe's own registry ``own``, then ``eugr``), and the name looked up (:func:`mod_key`)."""
    if ref.startswith("@") and "/" in ref:
        scope, _, rest = ref[1:].partition("/")
        return (scope,), mod_key(rest)
    return (own, FALLBACK_REGISTRY), mod_key(ref)


def _resolve_mod(ref: str, source: HookSource) -> ObservedMod | str:
    """The mod ConfigMap ``ref`` names (:func:`mod_lookup`'s order), or why none."""
    registries, wanted = mod_lookup(ref, source.trust.registry)
    for registry in registries:
        for mod in source.mods:
            if mod.registry == registry and mod_key(mod.name) == wanted:
                return mod if mod.problem is None else f"{ref} ({mod.problem})"
    where = " or ".join(f"RecipeRegistry {r}" for r in registries if r) or "no RecipeRegistry"
    return f"{ref} (not found in {where})"


def decide(
    recipe: RecipeSpec | None,
    source: HookSource | None,
    *,
    context: Mapping[str, str],
    env: Sequence[tuple[str, str]] = (),
    health_wait_s: int = 3600,
) -> Decision:
    """What runs of ``recipe``'s mods and hooks, with ``context`` filling their placeholders."""
    if recipe is None:
        return Decision()
    mods = declared_mods(recipe)
    declared = [h for h in ("pre_exec", "post_exec", "post_commands") if getattr(recipe, h)]
    if not mods and not declared:
        return Decision()
    names = [*(["mods " + ", ".join(mods)] if mods else []), *declared]
    if source is None or not source.trust.trusted:
        why = source.trust.reason if source is not None else "the Recipe comes from no RecipeRegistry"
        return Decision(condition=(False, c.REASON_HOOKS_UNTRUSTED, f"not run ({'; '.join(names)}): {why}"))
    problems: list[str] = []
    resolved: list[ModSource] = []
    for ref in mods:
        found = _resolve_mod(ref, source)
        if isinstance(found, str):
            problems.append("mod " + found)
        else:
            resolved.append(
                ModSource(name=ref, config_map=found.config_map, files=found.files, digest=found.digest)
            )
    pre, pre_bad = steps(recipe.pre_exec, context=context)
    post, post_bad = steps(recipe.post_exec, context=context)
    after, after_bad = steps(recipe.post_commands, context=context)
    for hook, bad in (("pre_exec", pre_bad), ("post_exec", post_bad), ("post_commands", after_bad)):
        problems += [f"{hook}[{b}" for b in bad]
    plan = HookPlan(
        mods=tuple(resolved),
        pre_exec=tuple(pre),
        post_exec=tuple(post),
        env=tuple(env),
        health_wait_s=health_wait_s,
    )
    if problems:
        message = "not applied: " + "; ".join(problems)
        return Decision(
            plan=plan, post_commands=tuple(after), condition=(False, c.REASON_MODS_UNRESOLVED, message[:1024])
        )
    return Decision(
        plan=plan,
        post_commands=tuple(after),
        condition=(True, c.REASON_HOOKS_APPLIED, f"run ({'; '.join(names)}): {source.trust.reason}"),
    )


# -- in the planner ---------------------------------------------------------------------------


def context_of(effective: EffectiveSpec, recipe: RecipeSpec, *, base_url: str) -> dict[str, str]:
    """The values ``{name}`` placeholders of hooks are filled from: the recipe's defaults, then the
    resolved settings (sparkrun's config chain), then the post-launch ones."""
    out = {k: str(v) for k, v in (recipe.defaults or {}).items() if isinstance(v, str | int | float | bool)}
    out.update(
        model=effective.model,
        served_model_name=effective.served_name,
        port=str(ENGINE_PORT),
        tensor_parallel=str(effective.topology.tensor_parallel),
        pipeline_parallel=str(effective.topology.pipeline_parallel),
        base_url=base_url,
    )
    if effective.max_model_len is not None:
        out["max_model_len"] = str(effective.max_model_len)
    if effective.model_revision:
        out["model_revision"] = effective.model_revision
    return out


def env_of(effective: EffectiveSpec, *, base_url: str) -> tuple[tuple[str, str], ...]:
    """sparkrun's ``SPARKRUN_*`` hook variables that do not differ between the pods."""
    return (
        ("SPARKRUN_RECIPE_NAME", effective.recipe_name or ""),
        ("SPARKRUN_RUNTIME", "vllm"),
        ("SPARKRUN_MODEL", effective.model),
        ("SPARKRUN_MODEL_REVISION", effective.model_revision or ""),
        ("SPARKRUN_NUM_NODES", str(effective.topology.nodes)),
        ("SPARKRUN_PORT", str(ENGINE_PORT)),
        ("SPARKRUN_BASE_URL", base_url),
    )


def settle(obs: Observation, effective: EffectiveSpec | None, cond: Conditions) -> Decision:
    """The decision for the workload's Recipe now, and ``HooksApplied`` (set only when the Recipe
    declares hooks or mods)."""
    recipe = obs.recipe.spec if obs.recipe is not None and obs.spec.recipe is not None else None
    if recipe is None or effective is None:
        return Decision()
    base_url = endpoint_url(namespace=obs.namespace, workload=obs.name) + "/v1"
    found = decide(
        recipe,
        obs.hooks,
        context=context_of(effective, recipe, base_url=base_url),
        env=env_of(effective, base_url=base_url),
        health_wait_s=obs.options.probes.startup_budget_seconds,
    )
    if found.condition is not None:
        status, reason, message = found.condition
        cond.set(c.HOOKS_APPLIED, status, reason, message)
    return found


_LABELS: Final = (("mods[", "mods"), ("pre_exec[", "preExec"), ("post_exec", "postExec"))


def _failed_stage(record: FailureRecord) -> tuple[str, str] | None:
    """``(stage, line)`` when ``record`` is a hook's failure (its wrapper's last line)."""
    at = record.message.rfind(FAILED_PREFIX)
    if at < 0:
        return None
    line = record.message[at + len(FAILED_PREFIX) :].split("\n", 1)[0]
    for label, stage in _LABELS:
        if line.startswith(label):
            return stage, clip(line, 480)
    return None


#: The stages of ``status.startup`` this module writes.
HOOK_STAGES: Final = frozenset({"mods", "preExec", "postExec", "postCommands"})
#: How often a full pass looks again while a Ready leader's post_exec outcome is not known.
POST_EXEC_POLL_S: Final = 15.0


def post_exec_pending(obs: Observation, serving: HookPlan | None, revision: str | None) -> list[ObservedPod]:
    """The Ready leaders of ``revision`` whose post_exec outcome is not known yet."""
    if serving is None or not serving.post_exec or revision is None:
        return []
    have = {e.replica for e in obs.status.startup if e.stage == "postExec" and e.revision == revision}
    out: list[ObservedPod] = []
    for js in obs.jobsets:
        if js.revision != revision or js.replica is None or js.deleting or js.replica in have:
            continue
        leader = leader_pod(obs.pods, js.name)
        if js.leader_ready and leader is not None and leader.ready and not leader.deleting:
            out.append(leader)
    return out


def timeline(
    obs: Observation,
    status: InferenceWorkloadStatus,
    out: Plan,
    *,
    serving: HookPlan | None,
    decision: Decision,
) -> None:
    """The hook stages of the serving revision in ``status.startup``: skipped (untrusted, once),
    ok for a replica whose leader is Ready (every pre-engine step ran), postExec from the
    leader's log (looked at again while unknown), failed from a pod's failure."""
    revision = out.revision
    if revision is None:
        return
    # NB: a hook stage of another revision (a workload-level "skipped" too) is not this one's
    status.startup = [e for e in status.startup if e.stage not in HOOK_STAGES or e.revision == revision]
    have = {(e.stage, e.replica) for e in status.startup if e.revision == revision}
    added: list[StartupEvent] = []

    def add(stage: Any, replica: int | None, when: Any, outcome: Any, message: str | None = None) -> None:
        if (stage, replica) not in have:
            have.add((stage, replica))
            added.append(
                StartupEvent(
                    stage=stage,
                    time=when or obs.now,
                    replica=replica,
                    revision=revision,
                    outcome=outcome,
                    message=message,
                )
            )

    if decision.condition is not None and decision.condition[1] == c.REASON_HOOKS_UNTRUSTED:
        add("preExec", None, None, "skipped", decision.condition[2][:512])
    if serving is not None and not serving.empty:
        stages = [s for s, on in (("mods", serving.mods), ("preExec", serving.pre_exec)) if on]
        for js in obs.jobsets:
            if js.revision != revision or js.replica is None or js.deleting:
                continue
            leader = leader_pod(obs.pods, js.name)
            if js.leader_ready and leader is not None and leader.ready:
                for stage in stages:
                    add(stage, js.replica, leader.ready_time, "ok")
        for leader in post_exec_pending(obs, serving, revision):
            seen = obs.post_exec.get(leader.name)
            if seen is not None:
                add("postExec", leader.replica, seen[1], seen[0])
            else:
                out.later(POST_EXEC_POLL_S)
        records = [*obs.failures, *(p.failure for p in obs.pods if p.failure is not None)]
        for record in records:
            found = _failed_stage(record)
            if found is not None and record.revision in (None, revision[: len(record.revision or "")]):
                add(found[0], record.replica, record.time, "failed", found[1])
    status.startup.extend(added)


def post_commands(obs: Observation, out: Plan, status: InferenceWorkloadStatus, decision: Decision) -> None:
    """The post_commands Job of the serving revision, once one of its leaders is Ready (created
    once: its outcome, from the Job, goes into ``status.startup``)."""
    revision = out.revision
    if not decision.post_commands or revision is None:
        return
    jobs = [j for j in obs.hook_jobs if j.revision == revision and j.owner_uid == obs.uid]
    if not jobs:
        ready = any(js.revision == revision and js.leader_ready and not js.deleting for js in obs.jobsets)
        if ready:
            base_url = endpoint_url(namespace=obs.namespace, workload=obs.name) + "/v1"
            env = (*(decision.plan.env if decision.plan is not None else ()), ("SPARKRUN_BASE_URL", base_url))
            out.apply.append(
                render_post_commands_job(
                    namespace=obs.namespace,
                    workload=obs.name,
                    revision=revision,
                    commands=decision.post_commands,
                    env=tuple(dict(env).items()),
                    image=obs.options.tools_image,
                    owner=Owner(name=obs.name, uid=obs.uid),
                    node_selector=obs.spec.scheduling.node_selector,
                    tolerations=[t.to_wire() for t in obs.spec.scheduling.tolerations],
                )
            )
        return
    job = jobs[0]
    if job.succeeded is None or any(
        e.stage == "postCommands" and e.revision == revision for e in status.startup
    ):
        return
    status.startup.append(
        StartupEvent(
            stage="postCommands",
            time=job.time or obs.now,
            revision=revision,
            outcome="ok" if job.succeeded else "failed",
            message=None if job.succeeded else f"Job {job.name}: {job.message}"[:512],
        )
    )
