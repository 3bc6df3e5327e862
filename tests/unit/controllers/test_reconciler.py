"""The one pass shape of the resource controllers (``controllers/reconciler.py``): observe ->
plan -> execute -> one status write -> events, in that order; nothing after an observation of
nothing; no write when the outcome says so; no events when the write failed. And two
controllers on it (the Recipe's change handler, the cluster's daemon pass): what they write,
report and emit is what they did before the contract."""

from __future__ import annotations

from typing import Any

import kopf
import pytest
from pydantic import BaseModel

from sparkrun_operator.controllers import cluster, recipe
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.reconciler import Event, Outcome, nothing_to_execute, run_pass
from sparkrun_operator.k8s import errors
from tests.unit.controllers.recording_memo import patches_of, recording_memo


class Status(BaseModel):
    phase: str = ""


class Steps:
    """Each step records its name; the outcome is configurable."""

    def __init__(
        self, *, observed: str | None = "seen", write: bool = True, fail_write: bool = False
    ) -> None:
        self.calls: list[str] = []
        self.observed = observed
        self.write = write
        self.fail_write = fail_write
        self.wrote: bool | None = None

    async def observe(self) -> str | None:
        self.calls.append("observe")
        return self.observed

    def plan(self, observed: str) -> str:
        self.calls.append(f"plan {observed}")
        return "planned"

    async def execute(self, observed: str, planned: str) -> Outcome[Status]:
        self.calls.append(f"execute {planned}")
        events = (Event(type="Normal", reason="Done", message="m"),)
        return Outcome(status=Status(phase="Ready"), write=self.write, events=events, requeue=5.0)

    async def write_status(self, outcome: Outcome[Status]) -> bool:
        self.calls.append(f"write {outcome.status.phase}")
        if self.fail_write:
            raise errors.KubeConflict("stale")
        return True

    def emit(self, outcome: Outcome[Status], wrote: bool) -> None:
        self.calls.append(f"emit {len(outcome.events)}")
        self.wrote = wrote

    async def run(self) -> float | None:
        return await run_pass(
            observe=self.observe,
            plan=self.plan,
            execute=self.execute,
            write_status=self.write_status,
            emit_events=self.emit,
        )


async def test_a_pass_runs_its_steps_in_order_and_returns_the_requeue() -> None:
    steps = Steps()
    assert await steps.run() == 5.0
    assert steps.calls == ["observe", "plan seen", "execute planned", "write Ready", "emit 1"]
    assert steps.wrote is True


async def test_nothing_observed_ends_the_pass() -> None:
    steps = Steps(observed=None)
    assert await steps.run() is None
    assert steps.calls == ["observe"]


async def test_an_outcome_without_a_write_still_emits() -> None:
    steps = Steps(write=False)
    assert await steps.run() == 5.0
    assert steps.calls == ["observe", "plan seen", "execute planned", "emit 1"]
    assert steps.wrote is False


async def test_a_failed_write_emits_nothing() -> None:
    steps = Steps(fail_write=True)
    with pytest.raises(errors.KubeConflict):
        await steps.run()
    assert steps.calls[-1] == "write Ready"


async def test_nothing_to_execute_writes_the_plan_as_the_status() -> None:
    outcome = await nothing_to_execute("seen", Status(phase="Ready"))
    assert outcome == Outcome(status=Status(phase="Ready"))


# -- controllers on the contract ------------------------------------------------------------


def _patches(ctx: Memo) -> list[tuple[str, dict[str, Any]]]:
    return patches_of(ctx)


@pytest.fixture
def posted(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    sent: list[tuple[str, str]] = []

    def event(body: Any, *, type: str, reason: str, message: str = "") -> None:
        sent.append((type, reason))

    monkeypatch.setattr(kopf, "event", event)
    return sent


def _recipe(runtime: str, status: dict[str, Any] | None = None) -> kopf.Body:
    raw = {
        "metadata": {"name": "r", "namespace": "ns", "generation": 1},
        "spec": {"model": "Qwen/Qwen3-8B", "runtime": runtime},
        "status": status or {},
    }
    return raw  # type: ignore[return-value]


async def test_an_invalid_recipe_is_warned_about_once_when_its_status_is_written(
    posted: list[tuple[str, str]],
) -> None:
    ctx = recording_memo()
    await recipe.reconcile(ctx, body=_recipe("nope"))
    [(name, patch)] = _patches(ctx)
    assert name == "r"
    assert patch["status"]["conditions"][0]["status"] == "False"
    assert posted == [("Warning", "InvalidRecipe")]
    assert (
        ctx.metrics.registry.get_sample_value(
            "sparkrun_operator_objects", {"kind": "Recipe", "ready": "False"}
        )
        == 1
    )
    # the same status again (a resume): nothing written, nothing warned
    await recipe.reconcile(ctx, body=_recipe("nope", patch["status"]))
    assert len(_patches(ctx)) == 1
    assert posted == [("Warning", "InvalidRecipe")]
    await ctx.http.aclose()


async def test_a_valid_recipe_is_written_without_an_event(posted: list[tuple[str, str]]) -> None:
    ctx = recording_memo()
    await recipe.reconcile(ctx, body=_recipe("vllm"))
    assert len(_patches(ctx)) == 1
    assert posted == []
    await ctx.http.aclose()


async def test_a_cluster_pass_writes_its_status_and_a_deleted_one_nothing() -> None:
    ctx = recording_memo()
    body: Any = {"metadata": {"name": "c", "generation": 1}, "spec": {"nodes": {"names": ["gpu-0"]}}}
    assert await cluster.reconcile(ctx, body=body, indices={}) is None
    [(name, patch)] = _patches(ctx)
    assert (name, "conditions" in patch["status"]) == ("c", True)
    ready = {"kind": "InferenceCluster", "ready": "False"}
    assert ctx.metrics.registry.get_sample_value("sparkrun_operator_objects", ready) == 1
    deleted: Any = {"metadata": {"name": "d", "deletionTimestamp": "2026-09-01T12:00:00Z"}, "spec": {}}
    assert await cluster.reconcile(ctx, body=deleted, indices={}) is None
    assert len(_patches(ctx)) == 1
    await ctx.http.aclose()
