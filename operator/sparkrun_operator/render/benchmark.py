"""Children of an InferenceBenchmark: one Job per scenario (and attempt), and the ConfigMap that
keeps each scenario's raw framework output.

Pure. A scenario's Job runs the tools image's runner (``python -m sparkrun_operator.runtime.bench
--plan JSON``) once; the plan is everything the runner needs (framework, profile, bench_args, the
scenario, the target's URL and model names, the tokenizer). The runner prints its result as the
last JSON line of the pod log, which the controller reads (``docs/benchmarks.md``).

When the target workload serves a Ready ModelCache (of the benchmark's own namespace, as every
``cacheRef`` is), the Job mounts that cache's claim READ-ONLY where the engine mounts it, and the
plan names the model's snapshot directory there (``modelCache``): the runner takes the tokenizer
from it before it would ask any Hub (``runtime/bench.py``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec, Scenario
from sparkrun_operator.render import keys, podsecurity
from sparkrun_operator.render.modelcache import DEFAULT_TOOLS_IMAGE
from sparkrun_operator.render.owner import Owner

BENCH_MODULE: Final = "sparkrun_operator.runtime.bench"
#: The runner's exit codes no pod retry can fix: nothing measured / a bad plan (runtime/bench.py).
FATAL_EXIT_CODES: Final = (2, 3)


@dataclass(frozen=True, kw_only=True)
class BenchmarkOwner(Owner):
    """The InferenceBenchmark its children are owned by."""

    kind: ClassVar[str] = "InferenceBenchmark"


@dataclass(frozen=True, kw_only=True)
class BenchOptions:
    """Operator-wide settings of benchmark Jobs."""

    image: str = DEFAULT_TOOLS_IMAGE
    #: Where a ModelCache's claim is mounted (the operator's ``--cache-mount-path``, as for engines).
    cache_mount_path: str = keys.CACHE_MOUNT_PATH
    #: Pod retries of one scenario (a killed pod reruns that scenario, and only it).
    backoff_limit: int = 2


@dataclass(frozen=True, kw_only=True)
class BenchCache:
    """The Ready ModelCache the target workload serves from: mounted read-only for the tokenizer."""

    name: str
    repo: str
    claim_name: str
    #: The full commit the cache holds (``status.resolvedRevision``).
    commit: str
    #: ``spec.storage.path``: the cache root inside the claim (a ``subPath``).
    path: str = "/"
    #: The only node the cache's volume is reachable from: the runner pod is placed there.
    node: str | None = None

    def snapshot(self, root: str) -> str:
        """The model's files under the mount ``root`` (the Hugging Face layout, docs/model-cache.md)."""
        folder = "models--" + self.repo.replace("/", "--")
        return f"{root.rstrip('/')}/hub/{folder}/snapshots/{self.commit}"


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where the runner sends requests: the OpenAI root and the model names."""

    base_url: str
    model: str
    model_id: str | None = None
    cache: BenchCache | None = None


def _fit(base: str, suffix: str) -> str:
    if len(base) + len(suffix) <= 63:
        return base + suffix
    digest = hashlib.sha256(base.encode()).hexdigest()[:8]
    return f"{base[: 63 - len(suffix) - 9]}-{digest}{suffix}"


def job_name(benchmark: str, scenario: str, attempt: int) -> str:
    """``<benchmark>-<scenario>-<attempt>``, shortened to fit 63 characters."""
    digest = hashlib.sha256(f"{benchmark}/{scenario}".encode()).hexdigest()[:6]
    return _fit(benchmark, f"-{digest}-{attempt}")


def raw_config_map(benchmark: str) -> str:
    return _fit(benchmark, "-raw")


def labels(owner: BenchmarkOwner) -> dict[str, str]:
    return {keys.LABEL_BENCHMARK: owner.name, keys.LABEL_MANAGED_BY: keys.MANAGED_BY}


def scenario_plan(
    spec: InferenceBenchmarkSpec,
    scenario: Scenario,
    target: Target,
    cache_root: str = keys.CACHE_MOUNT_PATH,
    profile_args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The runner's ``--plan``. ``profile_args``: the arguments of a registry profile
    (``@<registry>/<name>``, read by the operator: ``plan/benchprofile.py``), under the spec's
    ``benchArgs`` (sparkrun's order); the plan then names it ``registryProfile``, not ``profile``
    (the runner knows only the built-in ones)."""
    plan: dict[str, Any] = {
        "framework": spec.framework,
        "benchArgs": {**(profile_args or {}), **spec.bench_args},
        "scenario": scenario.to_wire(),
        "baseUrl": target.base_url.rstrip("/") + "/v1",
        "model": target.model,
        "timeoutSeconds": spec.timeout_seconds,
    }
    for key, value in (
        ("profile" if profile_args is None else "registryProfile", spec.profile),
        ("modelId", target.model_id),
        ("tokenizer", spec.tokenizer),
        ("hfEndpoint", spec.hf_endpoint),
    ):
        if value:
            plan[key] = value
    if target.cache is not None:
        plan["modelCache"] = {
            "name": target.cache.name,
            "repo": target.cache.repo,
            "root": cache_root,
            "path": target.cache.snapshot(cache_root),
        }
    return plan


def _mount_cache(pod: dict[str, Any], container: dict[str, Any], cache: BenchCache, root: str) -> None:
    """The cache's claim, read-only (the volume and the mount both say so), and its node."""
    pod["volumes"] = [
        {
            "name": keys.VOLUME_CACHE,
            "persistentVolumeClaim": {"claimName": cache.claim_name, "readOnly": True},
        }
    ]
    mount: dict[str, Any] = {"name": keys.VOLUME_CACHE, "mountPath": root, "readOnly": True}
    if cache.path.strip("/"):
        mount["subPath"] = cache.path.strip("/")
    container["volumeMounts"] = [mount]
    if cache.node:
        on_node = {"key": "metadata.name", "operator": "In", "values": [cache.node]}
        pod["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchFields": [on_node]}]
                }
            }
        }


def render_job(
    owner: BenchmarkOwner,
    *,
    spec: InferenceBenchmarkSpec,
    scenario: Scenario,
    attempt: int,
    target: Target,
    options: BenchOptions,
    deadline_seconds: int,
    profile_args: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The Job of one scenario (the planner makes one at a time, in the spec's order)."""
    plan = scenario_plan(spec, scenario, target, options.cache_mount_path, profile_args)
    container = {
        "name": keys.CONTAINER_BENCHMARK,
        "image": options.image,
        "command": ["python"],
        "args": ["-m", BENCH_MODULE, "--plan", json.dumps(plan, separators=(",", ":"), sort_keys=True)],
        "env": [
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            {"name": "HF_HUB_DISABLE_TELEMETRY", "value": "1"},
            {"name": "HOME", "value": "/tmp"},
        ],
        "securityContext": podsecurity.restricted_container(),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    pod_labels = {
        **labels(owner),
        keys.LABEL_BENCHMARK_SCENARIO: scenario.name,
        keys.LABEL_BENCHMARK_ATTEMPT: str(attempt),
    }
    pod: dict[str, Any] = {
        "restartPolicy": "Never",
        "enableServiceLinks": False,
        "automountServiceAccountToken": False,
        "securityContext": podsecurity.tools_pod_context(),
        "containers": [container],
    }
    if target.cache is not None:
        _mount_cache(pod, container, target.cache, options.cache_mount_path)
    if spec.runner.node_selector:
        pod["nodeSelector"] = dict(sorted(spec.runner.node_selector.items()))
    if spec.runner.tolerations:
        pod["tolerations"] = [t.to_wire() for t in spec.runner.tolerations]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(owner.name, scenario.name, attempt),
            "namespace": owner.namespace,
            "labels": pod_labels,
            "ownerReferences": [owner.reference()],
        },
        "spec": {
            "backoffLimit": options.backoff_limit,
            "activeDeadlineSeconds": max(1, deadline_seconds),
            "podFailurePolicy": {
                "rules": [
                    {
                        "action": "FailJob",
                        "onExitCodes": {
                            "containerName": keys.CONTAINER_BENCHMARK,
                            "operator": "In",
                            "values": list(FATAL_EXIT_CODES),
                        },
                    }
                ]
            },
            "template": {"metadata": {"labels": pod_labels}, "spec": pod},
        },
    }


def render_raw(owner: BenchmarkOwner, outputs: dict[str, str]) -> dict[str, Any]:
    """The ConfigMap of raw outputs: one key per scenario (each bounded by the runner)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": raw_config_map(owner.name),
            "namespace": owner.namespace,
            "labels": labels(owner),
            "ownerReferences": [owner.reference()],
        },
        "data": dict(sorted(outputs.items())),
    }
