"""Whether a serving revision's frozen hooks and mods may run now (issue 32, ADR 0056).

A trusted recipe's mods, ``pre_exec`` and ``post_exec`` are frozen into the serving revision made
while it was trusted (``render/frozenhooks.py``), so a kept revision renders them again: after a
group restart, under ``rollout.apply: OnRequest`` while the change waits for approval, under a
recipe pin, and in a rollback that copies it. Trust is decided now, never when the revision was
made: losing it (the RecipeRegistry untrusted or disabled, the Recipe deleted, made invalid or
edited by hand) is a security event, not drift. So the history stage
(``plan/workload/history.py``)

- never makes a rollback to a revision whose hooks may not run now (:func:`rollback_refused`);
- replaces a serving revision whose hooks may not run now by a copy without them
  (:func:`without_hooks`, cause ``TrustWithdrawn``), whatever ``OnRequest``, a recipe pin or a
  rollback pin says (the tenant's approval is for settings, not for running code);
- and, while a replica of such a revision still runs, the rollout gate promotes the new one
  without its benchmark (a held rollout would keep the untrusted hooks serving).

Hooks may run now only when the workload names the Recipe the revision was made from, that
Recipe exists and is valid, and ``recipe/trust.py`` trusts it now (``obs.hooks``). Pure.
"""

from __future__ import annotations

import dataclasses
import json

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.history import Change, ServingRevision
from sparkrun_operator.plan.workload.model import Observation
from sparkrun_operator.plan.workload.revisions import Kept
from sparkrun_operator.render import frozen
from sparkrun_operator.render.workload import ServingInputs


def has_hooks(inputs: ServingInputs) -> bool:
    """``inputs`` run a recipe's mods, ``pre_exec`` or ``post_exec`` in the engine pods."""
    return inputs.hooks is not None and not inputs.hooks.empty


def untrusted(obs: Observation, inputs: ServingInputs) -> str | None:
    """Why the hooks frozen in ``inputs`` may not run now; ``None`` when they may (or it has none)."""
    if not has_hooks(inputs):
        return None
    named = obs.spec.recipe.name if obs.spec.recipe is not None else None
    if named is None or named != inputs.spec.recipe_name:
        return f"the workload no longer names Recipe {inputs.spec.recipe_name}, which they came from"
    if obs.recipe is None or not obs.recipe.exists:
        return f"Recipe {named} is deleted"
    if obs.recipe.spec is None:
        return f"Recipe {named} is invalid"
    if obs.hooks is None:
        return f"Recipe {named} comes from no RecipeRegistry"
    if not obs.hooks.trust.trusted:
        return obs.hooks.trust.reason
    return None


def rollback_refused(pin: int, obs: Observation, target: ServingInputs) -> str | None:
    """Why a rollback to ``target`` (revision ``pin``) may not be made: its hooks may not run now."""
    why = untrusted(obs, target)
    if why is None:
        return None
    return (
        f"spec.rollout.revision pins {pin}, whose engine pods ran the recipe's hooks and mods, which "
        f"may not run now ({why}): a rollback never brings them back; trust the recipe again, or "
        "remove the pin"
    )


def without_hooks(kept: Kept, why: str, generation: int) -> tuple[ServingRevision, ServingInputs]:
    """A copy of ``kept`` without its hooks and mods (cause ``TrustWithdrawn``): the same settings,
    the plain engine command. Not a rollback of anything (a rollback pin to ``kept`` made again
    once trusted brings its hooks back)."""
    assert kept.inputs.hooks is not None
    inputs = dataclasses.replace(kept.inputs, hooks=None)
    hooks = kept.inputs.hooks
    ran = {
        "mods": [m.name for m in hooks.mods],
        "preExec": len(hooks.pre_exec),
        "postExec": len(hooks.post_exec),
    }
    change = Change(
        field="hooks",
        source="recipe",
        detail=clip(why, 128),
        before=clip(json.dumps(ran, separators=(",", ":")), 160),
        after="null",
    )
    data = kept.data.model_copy(
        update={
            "hash": inputs.revision(),
            "cause": "TrustWithdrawn",
            "rollback_of": None,
            "generation": generation,
            "inputs": frozen.to_wire(inputs),
            "changes": [change],
        }
    )
    return data, inputs


def message(number: int, data: ServingRevision, source: int, why: str) -> str:
    """What ``UpToDate`` says in the pass that makes the copy."""
    return (
        f"revision {number} ({data.hash}) copies revision {source} without its recipe hooks and mods, "
        f"which may not run now ({why}): losing trust stops them whatever spec.rollout says"
    )


def running_untrusted(obs: Observation, kept: list[Kept]) -> bool:
    """A live JobSet runs one of ``kept`` whose hooks may not run now."""
    live = {js.revision for js in obs.jobsets if not js.deleting and js.terminal is None and js.revision}
    return any(k.data.hash in live and untrusted(obs, k.inputs) is not None for k in kept)
