"""The name policy in the operator (issue 26): a name outside the workload's namespace's prefixes
is withheld: ``Routable=False``, ``NameNotAllowed`` (naming the name and the prefixes), and it is
not in the claim the names index holds, so it neither wins nor blocks a name; oldest-claim still
settles conflicts between allowed claims."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.recipe import RecipeSpec
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.controllers import indexes
from sparkrun_operator.plan import names
from sparkrun_operator.plan.workload import ObservedRecipe, plan
from tests.unit.plan.served_obs import NOW, observation

POLICY = namepolicy.parse({"a": ["a-"], "b": ["b-"]})
MODEL = "Qwen/Qwen3-0.6B"


def _routable(spec: dict[str, Any], **kwargs: Any) -> tuple[str, str, str]:
    obs = observation(InferenceWorkloadSpec.model_validate(spec), **kwargs)
    found = [cond for cond in plan(obs).status.conditions if cond.type == c.ROUTABLE]
    assert len(found) == 1
    return found[0].status, found[0].reason, found[0].message


def test_a_recipe_name_outside_the_prefixes_is_not_allowed() -> None:
    """The squatting scenario's planner side: namespace ``b`` serves ``a-chat`` by a Recipe's
    ``served_model_name``, which admission cannot read."""
    recipe = ObservedRecipe(
        name="rx",
        spec=RecipeSpec.model_validate(
            {"model": MODEL, "runtime": "vllm", "defaults": {"served_model_name": "a-chat"}}
        ),
    )
    status, reason, message = _routable(
        {"recipe": {"name": "rx"}, "model": {"name": MODEL, "aliases": ["b-chat"]}},
        namespace="b",
        recipe=recipe,
        holders=lambda _: (),
        name_policy=POLICY,
    )
    assert (status, reason) == ("False", c.REASON_NAME_NOT_ALLOWED)
    assert message == (
        "'a-chat' may not be claimed from namespace b, which may claim names starting with 'b-'; "
        "the gateway routes this workload as 'b-chat' only"
    )
    # the same workload without the policy: routed under both names
    assert _routable(
        {"recipe": {"name": "rx"}, "model": {"name": MODEL, "aliases": ["b-chat"]}},
        namespace="b",
        recipe=recipe,
        holders=lambda _: (),
    )[:2] == ("True", c.REASON_NAMES_ACCEPTED)


def test_every_name_withheld_and_a_conflict_reported_together() -> None:
    older = names.Claim(namespace="b", name="first", served="b-x", created=NOW - dt.timedelta(days=9))
    status, reason, message = _routable(
        {"model": {"name": MODEL, "servedName": "a-y", "aliases": ["b-x"]}},
        namespace="b",
        holders=lambda model: [older] if model == "b-x" else [],
        name_policy=POLICY,
    )
    assert (status, reason) == ("False", c.REASON_NAME_NOT_ALLOWED)
    assert "'a-y' may not be claimed from namespace b" in message
    assert "alias 'b-x' is served by b/first (older claim)" in message
    assert message.endswith("the gateway does not route this workload")


def test_a_namespace_not_listed_may_claim_nothing() -> None:
    status, reason, message = _routable(
        {"model": {"name": MODEL, "servedName": "a-z"}},
        namespace="c",
        holders=lambda _: (),
        name_policy=POLICY,
    )
    assert (status, reason) == ("False", c.REASON_NAME_NOT_ALLOWED)
    assert "which may claim no model name" in message


def test_an_allowed_name_still_settles_by_the_oldest_claim() -> None:
    older = names.Claim(namespace="a", name="old", served="a-chat", created=NOW - dt.timedelta(days=1))
    status, reason, message = _routable(
        {"model": {"name": MODEL, "servedName": "a-chat"}},
        namespace="a",
        holders=lambda model: [older] if model == "a-chat" else [],
        name_policy=POLICY,
    )
    assert (status, reason) == ("False", c.REASON_NAME_CONFLICT)
    assert "served name 'a-chat' is served by a/old (older claim)" in message


def _body(namespace: str, name: str, created: str, served: str, aliases: list[str]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "creationTimestamp": created},
        "spec": {"recipe": {"name": "r"}},
        "status": {"model": {"name": MODEL, "servedName": served, "aliases": aliases}},
    }


def test_a_withheld_name_neither_wins_nor_blocks() -> None:
    """The names index (``iw_names``) over a squatter created first and its victim: the squatter's
    claim holds only its allowed names, so the victim keeps ``a-chat``."""
    squatter = _body("b", "squat", "2026-01-01T00:00:00Z", "a-chat", ["b-own"])
    victim = _body("a", "chat", "2026-06-01T00:00:00Z", "a-chat", [])
    found = [indexes.claim_of(body, POLICY) for body in (squatter, victim)]
    claims = [claim for claim in found if claim is not None]
    assert len(claims) == 2
    assert claims[0].names == ("b-own",)
    assert claims[0].withheld == frozenset({"a-chat"})
    index: dict[str, list[names.Claim]] = {}
    for claim in claims:
        for model in claim.names:
            index.setdefault(model, []).append(claim)
    assert names.owners(claims)["a-chat"].key == "a/chat"
    assert names.conflicts(claims[1], lambda model: index.get(model, ())) == []
    # without the policy the older squatter keeps the name (ADR 0019's known gap)
    plain = [indexes.claim_of(body) for body in (squatter, victim)]
    assert names.owners([p for p in plain if p is not None])["a-chat"].key == "b/squat"
