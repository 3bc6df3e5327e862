"""Serving revisions another party made (ADR 0046, "Trust"): numbers and names that would make
the next revision collide or overflow, and the workload stuck for good."""

from __future__ import annotations

import dataclasses

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.plan.workload import ObservedRecipe, plan
from sparkrun_operator.plan.workload.revisions import MAX_NUMBER, number_in_name, revision_from
from sparkrun_operator.render import frozen
from tests.unit.plan.test_history import IMAGE_A, IMAGE_B, _cond, _image, _recipe, _running, _seen, _world
from tests.unit.plan.test_workload_plan import NAME, _obs, _spec


def test_a_revision_named_past_its_number_is_not_collided_with() -> None:
    """Labelled with the workload, named ``<workload>-9`` yet numbered 2: the next revision is not
    ``-9`` (the apiserver would refuse it for good: the name is taken, the index shows number 2)."""
    first, revisions, rev = _world(_image(IMAGE_A))
    odd = dataclasses.replace(revisions[0], name=f"{NAME}-9", uid="u9", number=2, owner="someone-else")
    p = plan(_obs(_image(IMAGE_B), revisions=(*revisions, odd), jobsets=_running(rev), status=first.status))
    assert [d["metadata"]["name"] for d in p.revisions] == [f"{NAME}-10"]
    assert [d["revision"] for d in p.revisions] == [10]


def test_a_revision_numbered_near_the_int64_limit_is_no_revision() -> None:
    """One numbered 2**63 - 1 (made by hand) would make the next number overflow int64: the
    apiserver refuses every later revision. It is not read as a revision at all."""
    first, revisions, rev = _world(_image(IMAGE_A))
    body = {
        "metadata": {
            "name": f"{NAME}-huge",
            "uid": "u-huge",
            "ownerReferences": [{"kind": "InferenceWorkload", "uid": "uid-w", "controller": True}],
        },
        "revision": 2**63 - 1,
        "data": None,
    }
    assert revision_from(body) is None
    assert revision_from({**body, "revision": 2**62}) is None
    assert revision_from({**body, "revision": MAX_NUMBER}) is not None
    p = plan(_obs(_image(IMAGE_B), revisions=revisions, jobsets=_running(rev), status=first.status))
    assert [d["revision"] for d in p.revisions] == [2]


def test_names_give_numbers_only_when_they_are_the_workloads_and_short() -> None:
    assert number_in_name(f"{NAME}-12", NAME) == 12
    assert number_in_name(f"{NAME}-x12", NAME) is None
    assert number_in_name(f"{NAME}-", NAME) is None
    assert number_in_name(f"{NAME}-" + "9" * 16, NAME) is None  # beyond MAX_NUMBER: never ours
    assert number_in_name(f"{NAME}-\u0661\u0662", NAME) is None  # Arabic-Indic digits
    assert number_in_name("other-12", NAME) is None
    assert number_in_name(f"{NAME}-a-12", NAME) is None


def _with_account(account: str | None, **extra: object) -> InferenceWorkloadSpec:
    pod = {"serviceAccountName": account} if account else {}
    return _image(IMAGE_A, pod=pod, **extra) if account else _image(IMAGE_B, **extra)


def test_a_rollback_never_brings_back_a_service_account_the_spec_no_longer_names() -> None:
    """Revision 1 ran as ServiceAccount ``power`` (admitted then); the spec dropped it (revision 2).
    Admission checks the account on the spec only: a pin to 1 must not run the engines as
    ``power`` again (an administrator may have withdrawn it), unless the spec names it again."""
    first, revisions, rev_a = _world(_with_account("power"))
    second = plan(
        _obs(_with_account(None), revisions=revisions, jobsets=_running(rev_a), status=first.status)
    )
    both = revisions + _seen(second)
    assert second.revision is not None
    pinned = _with_account(None, rollout={"revision": 1})
    p = plan(_obs(pinned, revisions=both, jobsets=_running(second.revision), status=second.status))
    assert p.revisions == []
    assert p.revision == second.revision
    status, reason, message = _cond(p, c.UP_TO_DATE)
    assert (status, reason) == ("False", c.REASON_REVISION_PINNED)
    assert "ServiceAccount 'power'" in message
    # naming the account again (admission checks it then) lets the rollback through
    named = _with_account("power", rollout={"revision": 1})
    p = plan(_obs(named, revisions=both, jobsets=_running(second.revision), status=second.status))
    assert [d["data"]["rollbackOf"] for d in p.revisions] == [1]
    assert p.revision == rev_a


def test_a_recipe_command_of_1024_words_with_the_workloads_128_arguments_is_kept() -> None:
    """What the admission and the resolution take, a revision keeps: the planner never raises."""
    command = "vllm serve " + " ".join(f"w{i}" for i in range(1020))
    recipe = ObservedRecipe(
        name="rx", spec=RecipeSpec.model_validate({**_recipe(IMAGE_A), "command": command})
    )
    spec = _spec(model=None, recipe={"name": "rx"}, engine={"args": [f"--x{i}" for i in range(128)]})
    p = plan(_obs(spec, recipe=recipe, revisions=()))
    assert len(p.revisions) == 1
    kept = revision_from({**p.revisions[0], "metadata": {**p.revisions[0]["metadata"], "uid": "u1"}})
    assert kept is not None
    assert kept.data is not None
    assert len(frozen.from_wire(kept.data.inputs).spec.engine_args) > 1024


def test_settings_too_large_to_keep_are_a_source_problem_not_a_revision_each_pass() -> None:
    """Arguments of 300 KiB (the workload object takes them): a revision of them would be over
    what is read back, never serve, and the next pass would make another. None is made; the
    newest keeps serving and SourcesAvailable says why, without the arguments."""
    first, revisions, rev = _world(_image(IMAGE_A))
    secret = "sk-" + "s" * 2400
    big = _spec(engine={"image": IMAGE_A, "args": [f"--a{i}={secret}" for i in range(128)]})
    p = plan(_obs(big, revisions=revisions, jobsets=_running(rev), status=first.status))
    assert p.revisions == []
    assert p.revision == rev
    status, reason, message = _cond(p, c.SOURCES_AVAILABLE)
    assert (status, reason) == ("False", c.REASON_INVALID_SPEC)
    assert "bytes" in message
    assert secret not in message
    fresh = plan(_obs(big, revisions=()))
    assert fresh.revisions == []
    assert _cond(fresh, c.SOURCES_AVAILABLE)[:2] == ("False", c.REASON_INVALID_SPEC)


def _with_secret(secret: str | None, **extra: object) -> InferenceWorkloadSpec:
    env = (
        [{"name": "DB", "valueFrom": {"secretKeyRef": {"name": secret, "key": "password"}}}] if secret else []
    )
    return _spec(engine={"image": IMAGE_A if secret else IMAGE_B, "env": env}, **extra)


def test_a_rollback_never_brings_back_a_secret_the_spec_no_longer_names() -> None:
    """Revision 1's env read Secret ``db`` (its author could read it: admission checked). The
    spec dropped it; whoever pins revision 1 is checked by admission against the spec's env only,
    so the pin must not put ``db`` back into engine pods unless the spec names it again."""
    first, revisions, rev_a = _world(_with_secret("db"))
    second = plan(_obs(_with_secret(None), revisions=revisions, jobsets=_running(rev_a), status=first.status))
    both = revisions + _seen(second)
    assert second.revision is not None
    p = plan(
        _obs(
            _with_secret(None, rollout={"revision": 1}),
            revisions=both,
            jobsets=_running(second.revision),
            status=second.status,
        )
    )
    assert p.revisions == []
    assert p.revision == second.revision
    status, reason, message = _cond(p, c.UP_TO_DATE)
    assert (status, reason) == ("False", c.REASON_REVISION_PINNED)
    assert "secretKeyRef 'db'" in message
    p = plan(
        _obs(
            _with_secret("db", rollout={"revision": 1}),
            revisions=both,
            jobsets=_running(second.revision),
            status=second.status,
        )
    )
    assert [d["data"]["rollbackOf"] for d in p.revisions] == [1]
