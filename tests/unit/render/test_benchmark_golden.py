"""Golden files for an InferenceBenchmark's scenario Job (``render/benchmark.py``): without a
ModelCache, and with the target's ModelCache mounted read-only (claim and mount both read-only,
the storage path as a subPath, the cache's node required) and named in the runner's plan.
``UPDATE_GOLDEN=1`` rewrites them; review the diff."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec
from sparkrun_operator.plan import benchobserve
from sparkrun_operator.render.benchmark import BenchCache, BenchmarkOwner, BenchOptions, Target, render_job

GOLDEN = Path(__file__).resolve().parent / "golden_bench"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
COMMIT = "c1899de289a04d12100db370d81485cdf75e47ca"
SPEC = InferenceBenchmarkSpec.model_validate(
    {"target": {"workloadRef": {"name": "qwen"}}, "scenarios": [{"name": "single", "requests": 4}]}
)
CACHE = BenchCache(name="qwen-cache", repo="Qwen/Qwen3-0.6B", claim_name="qwen-cache", commit=COMMIT)


def _job(cache: BenchCache | None, options: BenchOptions | None = None) -> dict[str, Any]:
    return render_job(
        BenchmarkOwner(name="smoke", namespace="team-a", uid="6f0c2a3e-0000-4000-8000-000000000002"),
        spec=SPEC,
        scenario=SPEC.scenarios[0],
        attempt=0,
        target=Target(
            base_url="http://qwen.team-a.svc:8000", model="qwen", model_id="Qwen/Qwen3-0.6B", cache=cache
        ),
        options=options or BenchOptions(),
        deadline_seconds=3600,
    )


CASES = {
    "no-cache": lambda: _job(None),
    "cache": lambda: _job(CACHE),
    "cache-subpath-node": lambda: _job(
        BenchCache(
            name="qwen-cache",
            repo="Qwen/Qwen3-0.6B",
            claim_name="shared",
            commit=COMMIT,
            path="/team-a/",
            node="n1",
        ),
        BenchOptions(cache_mount_path="/run/sparkrun-cache"),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case: str) -> None:
    text = yaml.safe_dump(json.loads(json.dumps(CASES[case]())), sort_keys=False, width=120)
    path = GOLDEN / f"{case}.yaml"
    if UPDATE:
        path.write_text(text)
    assert path.read_text() == text, f"{case}: rerun with UPDATE_GOLDEN=1 and review the diff"


def test_the_plan_names_the_snapshot_under_the_mount() -> None:
    job = _job(CACHE)
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    plan = json.loads(args[args.index("--plan") + 1])
    assert plan["modelCache"] == {
        "name": "qwen-cache",
        "repo": "Qwen/Qwen3-0.6B",
        "root": "/models",
        "path": f"/models/hub/models--Qwen--Qwen3-0.6B/snapshots/{COMMIT}",
    }
    assert "modelCache" not in json.loads(_job(None)["spec"]["template"]["spec"]["containers"][0]["args"][-1])


def _cache_obj(**over: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "c", "namespace": "team-a"},
        "spec": {
            "source": {"huggingFace": {"repo": "Qwen/Qwen3-0.6B"}},
            "storage": {"create": {"size": "1Gi"}},
        },
        "status": {"phase": "Ready", "resolvedRevision": COMMIT, "accessModes": ["ReadWriteMany"]},
    }
    for key, value in over.items():
        obj[key] = {**obj[key], **value}
    return obj


def test_which_caches_a_runner_mounts() -> None:
    assert benchobserve.bench_cache(_cache_obj(), "c") == BenchCache(
        name="c", repo="Qwen/Qwen3-0.6B", claim_name="c", commit=COMMIT
    )
    assert benchobserve.bench_cache(None, "c") is None
    assert benchobserve.bench_cache(_cache_obj(status={"phase": "Downloading"}), "c") is None
    # a revision that is no full commit never becomes a path
    assert benchobserve.bench_cache(_cache_obj(status={"resolvedRevision": "../../etc"}), "c") is None
    # a repository id the API would refuse never becomes a path
    bad = _cache_obj(spec={"source": {"huggingFace": {"repo": "../x"}}})
    assert benchobserve.bench_cache(bad, "c") is None
    # ReadWriteOnce on an unknown node: the runner could not attach it
    assert benchobserve.bench_cache(_cache_obj(status={"accessModes": ["ReadWriteOnce"]}), "c") is None
    pinned = benchobserve.bench_cache(
        _cache_obj(status={"accessModes": ["ReadWriteOnce"], "nodeName": "n1"}), "c"
    )
    assert pinned is not None
    assert pinned.node == "n1"
