"""The rollout gate (plan/workload/rolloutgate.py): thresholds against results, and the planner's
promote / hold decisions derived from the gate's InferenceBenchmark."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from sparkrun_operator.api import conditions as c
from sparkrun_operator.api.benchmark import LatencySummary, ScenarioResult
from sparkrun_operator.api.meta import find_condition
from sparkrun_operator.api.workload import GateThreshold, InferenceWorkloadSpec
from sparkrun_operator.plan.workload import ObservedGate, Plan, plan
from sparkrun_operator.plan.workload.rolloutgate import check
from sparkrun_operator.render import gate as render_gate
from sparkrun_operator.render import keys
from tests.unit.plan.test_workload_plan import NEW, SERVICE, World, _js, _leader, _obs, _rev, _spec, _steady

GATE: dict[str, Any] = {
    "benchmark": {
        "scenarios": [{"name": "single", "requests": 2}, {"name": "pair", "concurrency": 2}],
        "benchArgs": {"skip_coherence": True},
    },
    "thresholds": [
        {"metric": "ttftP99", "max": 100},
        {"metric": "outputTokensPerSecond", "scenario": "pair", "min": 50},
    ],
    "timeoutSeconds": 300,
}


def _result(name: str, *, ttft99: float, tps: float) -> ScenarioResult:
    return ScenarioResult(
        name=name,
        requests=2,
        errors=0,
        ttft=LatencySummary(p50=ttft99 / 2, p90=ttft99, p99=ttft99),
        output_tokens_per_second=tps,
    )


def _thresholds() -> list[GateThreshold]:
    return [GateThreshold.model_validate(t) for t in GATE["thresholds"]]


def test_met_thresholds_miss_nothing() -> None:
    results = [_result("single", ttft99=80, tps=10), _result("pair", ttft99=99.5, tps=60)]
    assert check(results, _thresholds(), ["single", "pair"]) == []


def test_misses_name_the_figure_the_bound_and_by_how_much() -> None:
    results = [_result("single", ttft99=150, tps=10), _result("pair", ttft99=90, tps=40)]
    misses = check(results, _thresholds(), ["single", "pair"])
    assert [m.describe() for m in misses] == [
        "ttftP99 of scenario single is 150 ms, above the max 100 ms by 50 ms (+50%)",
        "outputTokensPerSecond of scenario pair is 40, below the min 50 by 10 (-20%)",
    ]


def test_a_scenario_without_a_result_or_a_figure_misses() -> None:
    no_ttft = ScenarioResult(name="pair", requests=0, errors=2, output_tokens_per_second=70)
    errors = GateThreshold.model_validate({"metric": "errors", "max": 0})
    misses = check([no_ttft], [*_thresholds(), errors], ["single", "pair"])
    assert [m.describe() for m in misses] == [
        "ttftP99 of scenario single was not measured (max 100 ms)",
        "ttftP99 of scenario pair was not measured (max 100 ms)",
        "errors of scenario single was not measured (max 0)",
        "errors of scenario pair is 2, above the max 0 by 2",
    ]


# -- the planner ---------------------------------------------------------------------------


def _gated(**extra: Any) -> InferenceWorkloadSpec:
    return _spec(replicas=1, rollout={"maxSurge": 1, "gate": GATE}, **extra)


def _world(*, new_ready: bool = True) -> tuple[InferenceWorkloadSpec, str, list[Any], list[Any]]:
    old_js, old_pods = _steady(_gated(), 1)
    new_spec = _gated(**NEW)
    revision = _rev(new_spec)
    new = _js(0, revision, ready=new_ready, created=dt.datetime(2026, 9, 1, tzinfo=dt.UTC))
    return new_spec, revision, [*old_js, new], [*old_pods, _leader(new, ip="10.0.0.9")]


def _gate(revision: str, spec: InferenceWorkloadSpec, **kwargs: Any) -> ObservedGate:
    assert spec.rollout.gate is not None
    template = render_gate.template_hash(spec.rollout.gate.benchmark)
    name = render_gate.gate_name(workload="qwen", revision=revision, template=template)
    return ObservedGate(name=name, uid=f"uid-{name}", revision=revision, template=template, **kwargs)


def _cond(p: Plan, type_: str) -> tuple[str, str, str]:
    found = find_condition(p.status.conditions, type_)
    assert found is not None, f"no {type_} condition"
    return found.status, found.reason, found.message


def test_the_ready_surge_replica_is_benchmarked_and_the_old_one_stays() -> None:
    spec, revision, jobsets, pods = _world()
    p = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    assert [d.name for d in p.delete] == []
    (bench,) = [d for d in p.apply if d["kind"] == "InferenceBenchmark"]
    assert bench["spec"]["target"] == {"url": "http://10.0.0.9:8000", "model": "Qwen/Qwen3-0.6B"}
    assert bench["spec"]["tokenizer"] == "Qwen/Qwen3-0.6B"
    assert bench["spec"]["timeoutSeconds"] == 300
    assert [s["name"] for s in bench["spec"]["scenarios"]] == ["single", "pair"]
    assert bench["metadata"]["labels"][keys.LABEL_GATE_WORKLOAD] == "qwen"
    assert bench["metadata"]["labels"][keys.LABEL_REVISION] == revision
    assert bench["metadata"]["ownerReferences"][0]["kind"] == "InferenceWorkload"
    status, reason, _ = _cond(p, "Promoted")
    assert (status, reason) == ("False", "Benchmarking")
    assert _cond(p, c.PROGRESSING)[:2] == ("True", c.REASON_ROLLING_OUT)


def test_no_benchmark_before_the_new_replica_is_ready_nor_without_a_rollout() -> None:
    spec, _, jobsets, pods = _world(new_ready=False)
    p = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE))
    assert [d for d in p.apply if d["kind"] == "InferenceBenchmark"] == []
    assert _cond(p, "Promoted")[:2] == ("False", "WaitingForReplica")
    fresh = plan(_obs(_gated()))
    assert [d for d in fresh.apply if d["kind"] == "InferenceBenchmark"] == []
    assert find_condition(fresh.status.conditions, "Promoted") is None


def test_met_thresholds_promote_and_the_old_replica_goes() -> None:
    spec, revision, jobsets, pods = _world()
    results = (_result("single", ttft99=80, tps=10), _result("pair", ttft99=90, tps=60))
    done = _gate(revision, spec, phase="Succeeded", results=results)
    p = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE, gates=(done,)))
    assert [d.name for d in p.delete] == [jobsets[0].name]
    status, reason, message = _cond(p, "Promoted")
    assert (status, reason) == ("True", "ThresholdsMet")
    assert done.name in message


def test_a_missed_threshold_holds_the_old_revision_serving() -> None:
    spec, revision, jobsets, pods = _world()
    results = (_result("single", ttft99=262.5, tps=10), _result("pair", ttft99=90, tps=60))
    done = _gate(revision, spec, phase="Succeeded", results=results)
    p = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE, gates=(done,)))
    assert [d.name for d in p.delete] == [jobsets[1].name]  # the new revision's replica, not the old
    status, reason, message = _cond(p, "Promoted")
    assert (status, reason) == ("False", "ThresholdMissed")
    assert message == (
        f"revision {revision} held (benchmark {done.name}): "
        "ttftP99 of scenario single is 262.5 ms, above the max 100 ms by 162.5 ms (+162%)"
    )
    assert _cond(p, c.PROGRESSING) == ("False", "ThresholdMissed", message)
    assert _cond(p, c.READY)[:2] == ("True", c.REASON_ALL_REPLICAS_READY)
    assert p.status.phase == "Running"  # held is not updating
    # once it is gone, nothing recreates it: the old one serves alone
    p = plan(_obs(spec, jobsets=(jobsets[0],), pods=tuple(pods[:1]), service=SERVICE, gates=(done,)))
    assert p.apply == []
    assert p.delete == []
    assert _cond(p, "Promoted")[:2] == ("False", "ThresholdMissed")


def test_a_failed_benchmark_holds_with_its_reason() -> None:
    spec, revision, jobsets, pods = _world()
    failed = _gate(revision, spec, phase="Failed", failure=("Timeout", "ran past timeoutSeconds=300"))
    p = plan(_obs(spec, jobsets=tuple(jobsets), pods=tuple(pods), service=SERVICE, gates=(failed,)))
    assert [d.name for d in p.delete] == [jobsets[1].name]
    status, reason, message = _cond(p, "Promoted")
    assert (status, reason) == ("False", "BenchmarkFailed")
    assert "failed (Timeout: ran past timeoutSeconds=300)" in message


def test_a_new_spec_change_while_held_starts_over() -> None:
    spec, revision, jobsets, pods = _world()
    results = (_result("single", ttft99=500, tps=10), _result("pair", ttft99=90, tps=60))
    held = _gate(revision, spec, phase="Succeeded", results=results)
    newer = _gated(model={"name": "Qwen/Qwen3-0.6B", "revision": "v3"})
    newest = _rev(newer)
    p = plan(_obs(newer, jobsets=(jobsets[0],), pods=tuple(pods[:1]), service=SERVICE, gates=(held,)))
    assert [d["metadata"]["name"] for d in p.apply if d["kind"] == "JobSet"] == [f"qwen-0-{newest[:5]}"]
    assert [(d.kind, d.name) for d in p.delete] == [("InferenceBenchmark", held.name)]
    assert _cond(p, "Promoted")[:2] == ("False", "WaitingForReplica")


def test_a_spec_change_while_benchmarking_replaces_the_unpromoted_replica() -> None:
    spec, revision, jobsets, pods = _world()
    running = _gate(revision, spec, phase="Running")
    newer = _gated(model={"name": "Qwen/Qwen3-0.6B", "revision": "v3"})
    old = replace(jobsets[0], created=dt.datetime(2026, 8, 1, tzinfo=dt.UTC))
    p = plan(_obs(newer, jobsets=(old, jobsets[1]), pods=tuple(pods), service=SERVICE, gates=(running,)))
    deleted = [(d.kind, d.name) for d in p.delete]
    assert ("JobSet", jobsets[1].name) in deleted
    assert ("JobSet", old.name) not in deleted
    assert ("InferenceBenchmark", running.name) in deleted


class GatedWorld(World):
    """:class:`World` plus the gate's benchmark, which finishes (with ``results``) a pass later."""

    def __init__(self, jobsets: list[Any], results: tuple[ScenarioResult, ...]) -> None:
        super().__init__(jobsets)
        self.results = results
        self.gates: dict[str, ObservedGate] = {}
        self.created: list[str] = []

    def step(self, p: Plan) -> None:
        for name, found in list(self.gates.items()):
            if found.phase is None:
                self.gates[name] = replace(found, phase="Succeeded", results=self.results)
        super().step(p)
        for d in p.delete:
            if d.kind == "InferenceBenchmark":
                del self.gates[d.name]
        for doc in p.apply:
            if doc["kind"] == "InferenceBenchmark":
                meta = doc["metadata"]
                labels = meta["labels"]
                self.created.append(meta["name"])
                self.gates[meta["name"]] = ObservedGate(
                    name=meta["name"],
                    uid=f"uid-{meta['name']}",
                    revision=labels[keys.LABEL_REVISION],
                    template=labels[keys.LABEL_GATE_TEMPLATE],
                )

    def observe(self, spec: InferenceWorkloadSpec) -> Plan:
        jobsets = tuple(self.jobsets.values())
        pods = tuple(_leader(js, ip=f"10.0.1.{i}") for i, js in enumerate(jobsets))
        return plan(_obs(spec, jobsets=jobsets, pods=pods, service=SERVICE, gates=tuple(self.gates.values())))


def test_a_gated_rollout_of_three_replicas_measures_once_and_converges() -> None:
    replicas = 3
    jobsets, _ = _steady(_gated(), replicas)
    spec = _gated(**NEW).model_copy(update={"replicas": replicas})
    new = _rev(spec)
    world = GatedWorld(jobsets, (_result("single", ttft99=50, tps=10), _result("pair", ttft99=50, tps=90)))
    for _ in range(40):
        p = world.observe(spec)
        olds_deleted = any(d.kind == "JobSet" and not d.name.endswith(new[:5]) for d in p.delete)
        assert not olds_deleted or any(g.phase == "Succeeded" for g in world.gates.values())
        world.step(p)
        assert len(world.jobsets) <= replicas + 1
        live = [js for js in world.jobsets.values() if not js.deleting]
        if len(live) == replicas and all(js.revision == new and js.leader_ready for js in live):
            break
    else:
        pytest.fail(f"rollout did not converge: {sorted(world.jobsets)}")
    assert len(world.created) == 1  # one benchmark for the revision, not one per replica
    assert _cond(world.observe(spec), "Promoted")[:2] == ("True", "ThresholdsMet")


def test_a_held_rollout_of_three_replicas_keeps_every_old_one_serving() -> None:
    replicas = 3
    jobsets, _ = _steady(_gated(), replicas)
    spec = _gated(**NEW).model_copy(update={"replicas": replicas})
    old = {js.name for js in jobsets}
    world = GatedWorld(jobsets, (_result("single", ttft99=500, tps=10), _result("pair", ttft99=50, tps=90)))
    for _ in range(10):
        p = world.observe(spec)
        assert not {d.name for d in p.delete} & old
        world.step(p)
    assert set(world.jobsets) == old
    assert _cond(world.observe(spec), "Promoted")[:2] == ("False", "ThresholdMissed")


@pytest.mark.parametrize("surging_ready", [False, True])
def test_a_spec_change_during_an_ungated_surge_does_not_wait_forever(surging_ready: bool) -> None:
    # revision A serves, B surges, then C is desired: B (never promoted) goes and C gets the budget
    jobsets, pods = _steady(_spec(), 1)
    old = replace(jobsets[0], created=dt.datetime(2026, 8, 1, tzinfo=dt.UTC))
    surging = _js(0, _rev(_spec(**NEW)), ready=surging_ready, created=dt.datetime(2026, 9, 1, tzinfo=dt.UTC))
    newest_spec = _spec(model={"name": "Qwen/Qwen3-0.6B", "revision": "v3"})
    p = plan(_obs(newest_spec, jobsets=(old, surging), pods=tuple(pods), service=SERVICE))
    assert [d.name for d in p.delete] == [surging.name]
    p = plan(_obs(newest_spec, jobsets=(old,), pods=tuple(pods), service=SERVICE))
    assert [d["metadata"]["name"] for d in p.apply if d["kind"] == "JobSet"] == [
        f"qwen-0-{_rev(newest_spec)[:5]}"
    ]
    assert p.delete == []
