"""The pure argument checks the daemon API runs at submission (``ops/executors`` ``ARGUMENT_CHECKS``).

Each check refuses what its executor would refuse before touching the cluster, with the
executor's own words, and accepts the arguments the operation is documented with. The testbed
tests (``tests/operator/test_modelcache_ops.py``, ``test_benchmark_ops.py``) see the 422 at
submission and no DaemonJob.
"""

from __future__ import annotations

from typing import Any

import pytest

from sparkrun_operator.ops import catalog
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS, EXECUTORS
from sparkrun_operator.ops.settings import Settings

COMMIT = "a" * 40
MANIFEST = {"repo": "org/model", "revision": COMMIT, "files": [{"path": "config.json", "size": 2}]}
SETTINGS = Settings(namespace="default")


def test_every_check_belongs_to_an_enabled_job_operation() -> None:
    ops = catalog.load()
    for name in ARGUMENT_CHECKS:
        op = ops.get(name)
        assert op.enabled, name
        assert op.kind == "job", name
        assert name in EXECUTORS


@pytest.mark.parametrize(
    ("name", "arguments", "words"),
    [
        ("model_cache.list", {"cache_dir": "/var/cache/hf"}, "host paths do not exist here"),
        ("model_cache.delete", {"cache_dir": "claim:/a/../b", "model": "o/m"}, "may not contain '..'"),
        ("model_cache.prune", {"cache_dir": "claim", "min_age_days": -1}, "min_age_days must be >= 0"),
        ("model_cache.prune", {"cache_dir": "claim", "max_bytes": -5}, "max_bytes must be >= 0"),
        (
            "model_cache.reconcile",
            {"cache_dir": "c", "model": "o/m", "revision": "main", "claim": "w", "confirm_inactive": True},
            "a 40-hex commit",
        ),
        (
            "model_cache.reconcile",
            {"cache_dir": "c", "model": "o/m", "revision": COMMIT, "claim": "w", "confirm_inactive": False},
            "confirm_inactive must be true",
        ),
        ("model_cache.adopt", {"cache_dir": "c"}, "either model (optionally revision) or all_models"),
        ("model_cache.adopt", {"cache_dir": "c", "model": "o/m", "all_models": True}, "either model"),
        ("model_cache.adopt", {"cache_dir": "c", "all_models": True, "revision": "main"}, "revision narrows"),
        ("model_cache.inspect", {"cache_dir": "c", "model": "o/m", "projector": True}, "projector"),
        ("model_cache.repair", {"cache_dir": "c", "model": "o/m", "local_cache_dir": "/x"}, "daemon's host"),
        ("model_cache.resolve", {"model": "o/m", "endpoint": "ftp://hub"}, "must be an http(s) URL"),
        ("model_cache.import", {"cache_dir": "c", "model": "o/m"}, "fetch_manifest: true"),
        ("model_cache.import", {"cache_dir": "c", "model": "o/m", "offline": True}, "offline: true"),
        ("model_cache.import", {"cache_dir": "c", "model": "x/y", "manifest": MANIFEST}, "is not model"),
        (
            "model_cache.import",
            {"cache_dir": "c", "model": "org/model", "manifest": {**MANIFEST, "revision": "main"}},
            "the full commit",
        ),
        ("workloads.run", {"recipe": "r", "overrides": {"port": 9000}}, "override 'port' is not supported"),
        (
            "workloads.ensure_ready",
            {"recipe": "r", "overrides": {"image": "x"}},
            "supported: enable_sleep_mode",
        ),
        ("workloads.plan", {"recipe": "r", "overrides": {"nccl": "x"}}, "not supported on Kubernetes"),
        ("workloads.materialize", {"recipe": "r", "overrides": {"env": {}}}, "not supported on Kubernetes"),
        ("workloads.stop_matching", {"dry_run": True}, "Provide workload_id, recipe, hosts or cluster"),
        ("workloads.stop_matching", {"recipe": "r", "overrides": {"x": 1}}, "override 'x' is not supported"),
        ("benchmarks.run", {"recipe": "r", "overrides": {"port": 1}}, "override 'port' is not supported"),
        ("benchmarks.run", {"recipe": "r", "framework": "locust"}, "known: llama-benchy, tool-eval-bench"),
        ("benchmarks.run", {"recipe": "r", "category": "vibes"}, "unknown benchmark category 'vibes'"),
        ("benchmarks.run", {"recipe": "r", "resume": "Not A Name"}, "not a valid Kubernetes object name"),
        ("benchmarks.resume", {"benchmark_id": "UPPER"}, "not a valid Kubernetes object name"),
    ],
)
def test_a_check_refuses_with_the_executors_words(name: str, arguments: dict[str, Any], words: str) -> None:
    with pytest.raises(Invalid) as caught:
        ARGUMENT_CHECKS[name](arguments, SETTINGS)
    assert words in caught.value.detail
    assert caught.value.status == 422


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        ("model_cache.list", {"cache_dir": "claim"}),
        ("model_cache.pin", {"cache_dir": "claim:/models", "model": "o/m", "revision": "main"}),
        ("model_cache.prune", {"cache_dir": "claim", "min_age_days": 0, "max_bytes": 10}),
        (
            "model_cache.reconcile",
            {"cache_dir": "c", "model": "o/m", "revision": COMMIT, "claim": "w", "confirm_inactive": True},
        ),
        ("model_cache.adopt", {"cache_dir": "c", "all_models": True}),
        ("model_cache.adopt", {"cache_dir": "c", "model": "o/m", "revision": "dev"}),
        ("model_cache.inspect", {"cache_dir": "c", "model": "o/m", "checksums": True}),
        ("model_cache.resolve", {"model": "o/m", "endpoint": "http://127.0.0.1:8080"}),
        ("model_cache.import", {"cache_dir": "c", "model": "o/m", "fetch_manifest": True}),
        ("model_cache.import", {"cache_dir": "c", "model": "org/model", "manifest": MANIFEST}),
        ("workloads.run", {"recipe": "r", "overrides": {"tp": 2, "max_model_len": 4096}}),
        ("workloads.plan", {"recipe": "r"}),
        ("workloads.stop_matching", {"recipe": "r", "overrides": {"served_model_name": "m"}}),
        ("benchmarks.run", {"recipe": "qwen3-8b-vllm", "bench_args": {"concurrency": [1, 4]}}),
        ("benchmarks.run", {"recipe": "r", "category": "tools"}),
        ("benchmarks.run", {"recipe": "r", "resume": "bench-abc"}),
        ("benchmarks.resume", {"benchmark_id": "bench-abc"}),
    ],
)
def test_a_check_accepts_documented_arguments(name: str, arguments: dict[str, Any]) -> None:
    ARGUMENT_CHECKS[name](arguments, SETTINGS)
