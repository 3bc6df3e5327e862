"""The admission corpus: valid resources (the examples) and invalid ones with the expected error.

Used twice: offline against the generated CRD schemas (``tests/unit/test_admission.py``) and
against the real kube-apiserver of the testbed (``tests/testbed/test_admission.py``), where the
CEL rules run for real. Each invalid case names the field path the error must carry and, for
CEL rules, a substring of the rule's message (schema errors are worded differently by the
apiserver and by jsonschema, so only their path is compared).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def load_examples() -> dict[str, dict[str, Any]]:
    """Every example manifest by file stem."""
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("*.yaml"))}


VALID: list[dict[str, Any]] = list(load_examples().values())


@dataclass(frozen=True)
class InvalidCase:
    """A manifest the apiserver must reject (on create, or on update from ``old``)."""

    name: str
    manifest: dict[str, Any]
    field_path: str
    message: str | None = None  # substring of the CEL message; None for plain schema errors
    old: dict[str, Any] | None = None

    @property
    def cel(self) -> bool:
        return self.message is not None


def _mutate(
    example: str, change: Callable[[dict[str, Any]], None], *, name: str | None = None
) -> dict[str, Any]:
    doc = copy.deepcopy(load_examples()[example])
    change(doc)
    if name is not None:
        doc["metadata"]["name"] = name
    return doc


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value

    return change


def _delete(path: str) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[part]
        del node[last]

    return change


def _case(
    name: str, example: str, change: Callable[[dict[str, Any]], None], path: str, message: str | None = None
) -> InvalidCase:
    return InvalidCase(name, _mutate(example, change, name=f"bad-{name}"), path, message)


def _update(
    name: str, example: str, change: Callable[[dict[str, Any]], None], path: str, message: str
) -> InvalidCase:
    old = _mutate(example, lambda d: None, name=f"bad-{name}")
    return InvalidCase(name, _mutate(example, change, name=f"bad-{name}"), path, message, old=old)


def _both(doc: dict[str, Any]) -> None:
    doc["spec"]["storage"]["claimName"] = "existing-claim"


WL = "inferenceworkload"
MN = "inferenceworkload-multinode"
GATED = "inferenceworkload-gated"

INVALID: list[InvalidCase] = [
    # InferenceWorkload: topology arithmetic (CEL)
    _case(
        "tp-pp-not-multiple-of-nodes",
        MN,
        _set("spec.topology.nodes", 3),
        "spec.topology.nodes",
        "multiple of nodes",
    ),
    _case(
        "gpus-per-node-mismatch",
        MN,
        _set("spec.topology.gpusPerNode", 4),
        "spec.topology.gpusPerNode",
        "must equal tensorParallel x pipelineParallel",
    ),
    _case(
        "tp-without-gpus",
        WL,
        _set("spec.topology.tensorParallel", 8),
        "spec.topology.gpusPerNode",
        "must equal tensorParallel x pipelineParallel",
    ),
    # InferenceWorkload: bounds, enums, types, unknown fields (schema)
    _case("zero-nodes", WL, _set("spec.topology.nodes", 0), "spec.topology.nodes"),
    _case("too-many-nodes", WL, _set("spec.topology.nodes", 65), "spec.topology.nodes"),
    _case("zero-gpus", WL, _set("spec.topology.gpusPerNode", 0), "spec.topology.gpusPerNode"),
    _case("negative-replicas", WL, _set("spec.replicas", -1), "spec.replicas"),
    _case("unknown-state", WL, _set("spec.state", "Paused"), "spec.state"),
    _case("unknown-engine", WL, _set("spec.engine.kind", "sglang"), "spec.engine.kind"),
    _case(
        "gpu-util-over-one",
        WL,
        _set("spec.engine.gpuMemoryUtilization", 1.5),
        "spec.engine.gpuMemoryUtilization",
    ),
    _case(
        "gpu-util-zero", WL, _set("spec.engine.gpuMemoryUtilization", 0), "spec.engine.gpuMemoryUtilization"
    ),
    _case("max-model-len-zero", WL, _set("spec.engine.maxModelLen", 0), "spec.engine.maxModelLen"),
    _case("replicas-not-int", WL, _set("spec.replicas", "two"), "spec.replicas"),
    _case("unknown-field", WL, _set("spec.gpus", 4), "spec"),
    _case("unknown-nested-field", WL, _set("spec.model.quantization", "fp8"), "spec.model"),
    _case("empty-model-name", WL, _set("spec.model.name", ""), "spec.model.name"),
    _case("bad-cluster-name", WL, _set("spec.cluster", "Not_A_Name"), "spec.cluster"),
    _case("bad-queue-name", WL, _set("spec.scheduling.queueName", "UPPER"), "spec.scheduling.queueName"),
    _case(
        "bad-toleration-operator",
        WL,
        _set("spec.scheduling.tolerations", [{"key": "a", "operator": "Maybe"}]),
        "spec.scheduling.tolerations[0].operator",
    ),
    _case(
        "bad-env-name",
        WL,
        _set("spec.engine.env", [{"name": "1BAD", "value": "x"}]),
        "spec.engine.env[0].name",
    ),
    _case("negative-surge", WL, _set("spec.rollout.maxSurge", -1), "spec.rollout.maxSurge"),
    _case(
        "bad-recipe-revision",
        "inferenceworkload-from-recipe",
        _set("spec.recipe.revision", "v1"),
        "spec.recipe.revision",
    ),
    # InferenceWorkload: served names and aliases (CEL: api/servedname.py, one rule for both)
    _case(
        "served-name-line-break",
        WL,
        _set("spec.model.servedName", "qwen3-0.6b\n"),
        "spec.model.servedName",
        "control or format characters",
    ),
    _case(
        "served-name-bidi-override",
        WL,
        _set("spec.model.servedName", "qwen\u202e-evil"),
        "spec.model.servedName",
        "control or format characters",
    ),
    _case(
        "served-name-zero-width",
        WL,
        _set("spec.model.servedName", "qwen3-0.6b\u200b"),
        "spec.model.servedName",
        "control or format characters",
    ),
    _case(
        "served-name-leading-space",
        WL,
        _set("spec.model.servedName", " qwen3-0.6b"),
        "spec.model.servedName",
        "begin or end with whitespace",
    ),
    _case(
        "served-name-trailing-nbsp",
        WL,
        _set("spec.model.servedName", "qwen3-0.6b\u00a0"),
        "spec.model.servedName",
        "begin or end with whitespace",
    ),
    _case(
        "alias-crlf",
        WL,
        _set("spec.model.aliases", ["qwen-small\r\n"]),
        "spec.model.aliases[0]",
        "control or format characters",
    ),
    _case(
        "alias-bidi-isolate",
        WL,
        _set("spec.model.aliases", ["qwen-small", "qwen\u2066small"]),
        "spec.model.aliases[1]",
        "control or format characters",
    ),
    _case(
        "model-name-escape-sequence",
        WL,
        _set("spec.model.name", "\x1b[2JQwen/Qwen3-0.6B"),
        "spec.model.name",
        "control or format characters",
    ),
    # InferenceWorkload: cross-field rules (CEL)
    _case("neither-model-nor-recipe", WL, _delete("spec.model"), "spec.model", "either model or recipe"),
    _case("sleeping-without-sleep-mode", MN, _set("spec.state", "Sleeping"), "spec.state", "enableSleepMode"),
    InvalidCase(
        "name-too-long",
        _mutate(WL, _set("metadata.name", "a" * 36)),
        "metadata.name",
    ),
    InvalidCase(
        "name-starts-with-digit",
        _mutate(WL, _set("metadata.name", "1-qwen")),
        "metadata.name",
    ),
    InvalidCase(
        "manager-changed",
        _mutate(WL, _set("spec.manager", "team-b"), name="bad-manager-changed"),
        "spec.manager",
        "manager is immutable",
        old=_mutate(WL, _set("spec.manager", "team-a"), name="bad-manager-changed"),
    ),
    # InferenceCluster
    _case(
        "cluster-names-and-selector",
        "inferencecluster",
        _set("spec.nodes.names", ["gpu-0"]),
        "spec.nodes",
        "exactly one of nodes.names or nodes.selector",
    ),
    _case(
        "cluster-no-members",
        "inferencecluster",
        _delete("spec.nodes.selector"),
        "spec.nodes",
        "exactly one of nodes.names or nodes.selector",
    ),
    _case(
        "cluster-negative-min-ready", "inferencecluster", _set("spec.minReadyNodes", -1), "spec.minReadyNodes"
    ),
    _case(
        "cluster-bad-selector-op",
        "inferencecluster",
        _set("spec.nodes.selector.matchExpressions", [{"key": "a", "operator": "Like"}]),
        "spec.nodes.selector.matchExpressions[0].operator",
    ),
    # NB: spec.gpuResource is applied on request since ADR 0046 (a change is drift, not refused).
    # ModelCache
    _case(
        "cache-claim-and-create",
        "modelcache",
        _both,
        "spec.storage",
        "exactly one of storage.claimName or storage.create",
    ),
    _case(
        "cache-no-storage-choice",
        "modelcache",
        _delete("spec.storage.create"),
        "spec.storage",
        "exactly one of storage.claimName or storage.create",
    ),
    _case("cache-bad-verify", "modelcache", _set("spec.verify", "md5"), "spec.verify"),
    _case(
        "cache-bad-size", "modelcache", _set("spec.storage.create.size", "lots"), "spec.storage.create.size"
    ),
    _case(
        "cache-bad-access-mode",
        "modelcache",
        _set("spec.storage.create.accessModes", ["ReadEverything"]),
        "spec.storage.create.accessModes[0]",
    ),
    _case("cache-relative-path", "modelcache", _set("spec.storage.path", "models"), "spec.storage.path"),
    _case(
        "cache-missing-repo",
        "modelcache",
        _delete("spec.source.huggingFace.repo"),
        "spec.source.huggingFace.repo",
    ),
    _case(
        "cache-bad-endpoint",
        "modelcache",
        _set("spec.source.huggingFace.endpoint", "ftp://hub"),
        "spec.source.huggingFace.endpoint",
    ),
    _update(
        "cache-source-changed",
        "modelcache",
        _set("spec.source.huggingFace.repo", "Qwen/Qwen3-8B"),
        "spec.source",
        "source is immutable",
    ),
    # InferenceBenchmark
    _case(
        "bench-ref-and-url",
        "inferencebenchmark",
        _set("spec.target.url", "http://10.0.0.1:8000"),
        "spec.target",
        "exactly one of target.workloadRef or target.url",
    ),
    _case(
        "bench-url-without-model",
        "inferencebenchmark",
        lambda d: d["spec"].update(target={"url": "http://svc:8000"}),
        "spec.target.model",
        "target.model is required",
    ),
    _case("bench-no-scenarios", "inferencebenchmark", _set("spec.scenarios", []), "spec.scenarios"),
    _case(
        "bench-zero-requests",
        "inferencebenchmark",
        lambda d: d["spec"]["scenarios"][0].update(requests=0),
        "spec.scenarios[0].requests",
    ),
    _case("bench-via-nowhere", "inferencebenchmark", _set("spec.target.via", "Ingress"), "spec.target.via"),
    _case(
        "bench-zero-concurrency",
        "inferencebenchmark",
        lambda d: d["spec"]["scenarios"][0].update(concurrency=0),
        "spec.scenarios[0].concurrency",
    ),
    _case("bench-bad-framework", "inferencebenchmark", _set("spec.framework", "locust"), "spec.framework"),
    _update(
        "bench-spec-changed",
        "inferencebenchmark",
        _set("spec.timeoutSeconds", 60),
        "spec",
        "spec is immutable",
    ),
    # InferenceWorkload: rollout gate (ADR 0029)
    _case(
        "gate-without-surge",
        GATED,
        _set("spec.rollout.maxSurge", 0),
        "spec.rollout.maxSurge",
        "rollout.gate needs maxSurge >= 1",
    ),
    _case(
        "gate-min-and-max",
        GATED,
        _set("spec.rollout.gate.thresholds", [{"metric": "ttftP99", "min": 1, "max": 2}]),
        "spec.rollout.gate.thresholds[0].max",
        "set exactly one of min or max",
    ),
    _case(
        "gate-latency-with-min",
        GATED,
        _set("spec.rollout.gate.thresholds", [{"metric": "ttftP99", "min": 1}]),
        "spec.rollout.gate.thresholds[0].metric",
        "latencies and errors are bounded by max",
    ),
    _case(
        "gate-throughput-with-max",
        GATED,
        _set("spec.rollout.gate.thresholds", [{"metric": "requestsPerSecond", "max": 1}]),
        "spec.rollout.gate.thresholds[0].metric",
        "bounded by min (higher is better)",
    ),
    _case(
        "gate-unknown-scenario",
        GATED,
        _set("spec.rollout.gate.thresholds", [{"metric": "ttftP99", "scenario": "other", "max": 1}]),
        "spec.rollout.gate.thresholds",
        "every threshold's scenario must be one of benchmark.scenarios",
    ),
    _case(
        "gate-unknown-metric",
        GATED,
        _set("spec.rollout.gate.thresholds", [{"metric": "ttft_p99_ms", "max": 1}]),
        "spec.rollout.gate.thresholds[0].metric",
    ),
    _case(
        "gate-no-thresholds", GATED, _set("spec.rollout.gate.thresholds", []), "spec.rollout.gate.thresholds"
    ),
    _case(
        "gate-negative-bound",
        GATED,
        _set("spec.rollout.gate.thresholds", [{"metric": "ttftP99", "max": -1}]),
        "spec.rollout.gate.thresholds[0].max",
    ),
    # Recipe
    _case("recipe-version-1", "recipe", _set("spec.recipeVersion", "1"), "spec.recipeVersion"),
    _case(
        "recipe-max-below-min",
        "recipe",
        _set("spec.minNodes", 2),
        "spec.maxNodes",
        "maxNodes must be at least minNodes",
    ),
    _case("recipe-no-model", "recipe", _delete("spec.model"), "spec.model"),
    _case("recipe-bad-runtime", "recipe", _set("spec.runtime", "VLLM!"), "spec.runtime"),
    _case("recipe-env-not-string", "recipe", _set("spec.env", {"A": {"nested": 1}}), "spec.env.A"),
    # RecipeRegistry (issue 32)
    _case(
        "registry-trust-unacknowledged",
        "reciperegistry",
        _set("spec.trusted", True),
        "spec.trusted",
        "trusted needs acknowledgeTrust",
    ),
    _case(
        "registry-userinfo",
        "reciperegistry",
        _set("spec.url", "https://user:secret@github.com/org/recipes.git"),
        "spec.url",
        "without user information",
    ),
    _case("registry-file-url", "reciperegistry", _set("spec.url", "file:///etc"), "spec.url", "url must be"),
    _case(
        "registry-ssh-url",
        "reciperegistry",
        _set("spec.url", "ssh://git@host/x.git"),
        "spec.url",
        "url must be",
    ),
    _case(
        "registry-dotdot-subpath", "reciperegistry", _set("spec.subpath", "a/../b"), "spec.subpath", "'..'"
    ),
    _case(
        "registry-short-interval",
        "reciperegistry",
        _set("spec.syncIntervalSeconds", 10),
        "spec.syncIntervalSeconds",
    ),
    _case("registry-no-target", "reciperegistry", _delete("spec.targetNamespace"), "spec.targetNamespace"),
    _update(
        "registry-target-moved",
        "reciperegistry",
        _set("spec.targetNamespace", "elsewhere"),
        "spec.targetNamespace",
        "targetNamespace is immutable",
    ),
    # InferenceWorkload: spec.inferencePool (issue 30)
    _case(
        "pool-external-without-service",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"mode": "External"}}),
        "spec.inferencePool.endpointPicker.service",
        "mode External needs service",
    ),
    _case(
        "pool-managed-with-service",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"service": "epp"}}),
        "spec.inferencePool.endpointPicker.service",
        "service is only for mode External",
    ),
    _case(
        "pool-none-with-port",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"mode": "None", "port": 9002}}),
        "spec.inferencePool.endpointPicker.port",
        "port is only for mode External",
    ),
    _case(
        "pool-service-not-dns-1035",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"mode": "External", "service": "9-epp"}}),
        "spec.inferencePool.endpointPicker.service",
    ),
    _case(
        "pool-service-too-long",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"mode": "External", "service": "e" * 64}}),
        "spec.inferencePool.endpointPicker.service",
    ),
    _case(
        "pool-port-zero",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"mode": "External", "service": "epp", "port": 0}}),
        "spec.inferencePool.endpointPicker.port",
    ),
    _case(
        "pool-unknown-mode",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"mode": "Sidecar"}}),
        "spec.inferencePool.endpointPicker.mode",
    ),
    _case(
        "pool-unknown-failure-mode",
        WL,
        _set("spec.inferencePool", {"endpointPicker": {"failureMode": "Retry"}}),
        "spec.inferencePool.endpointPicker.failureMode",
    ),
    # DaemonJob
    _case("job-bad-operation", "daemonjob", _set("spec.operation", "Workloads List"), "spec.operation"),
    _case("job-no-principal", "daemonjob", _delete("spec.principal"), "spec.principal"),
    _case("job-no-digest", "daemonjob", _delete("spec.requestDigest"), "spec.requestDigest"),
    _case(
        "job-arguments-too-deep",
        "daemonjob",
        _set("spec.arguments", {"deep": {"a": {"a": {"a": {"a": {"a": {"a": {"a": {"a": 1}}}}}}}}}),
        "spec.arguments.deep.a.a.a.a.a.a.a",
    ),
    # NB: arguments may change (their schema bounds their depth, which leaves them no CEL type);
    # the immutable digest pins them (ops/jobargs.py; tests/shim/test_job_arguments.py).
    _update(
        "job-digest-changed",
        "daemonjob",
        _set("spec.requestDigest", "0" * 64),
        "spec.requestDigest",
        "requestDigest is immutable",
    ),
    InvalidCase(
        "job-cancel-withdrawn",
        _mutate("daemonjob", _set("spec.cancel", False), name="bad-job-cancel-withdrawn"),
        "spec.cancel",
        "cancel cannot be withdrawn",
        old=_mutate("daemonjob", _set("spec.cancel", True), name="bad-job-cancel-withdrawn"),
    ),
]
