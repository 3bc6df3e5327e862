"""A rollout gate's InferenceBenchmark (pure): the gate's benchmark template, aimed at one replica
of the new revision, owned by the workload and labelled with the revision it measures.

Its name is ``<workload>-gate-<revision>-<template hash>``: one benchmark per revision and
template, so a changed template (not a changed threshold: thresholds are applied by the
workload's planner to the benchmark's results) measures again.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from sparkrun_operator.api.benchmark import BenchmarkTemplate
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.render import keys
from sparkrun_operator.render.workload import Owner

#: Hex digits of the template hash in names and labels.
TEMPLATE_HASH_LEN = 6


def template_hash(template: BenchmarkTemplate) -> str:
    raw = json.dumps(template.to_wire(), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(raw.encode()).hexdigest()[:TEMPLATE_HASH_LEN]


def gate_name(*, workload: str, revision: str, template: str) -> str:
    """At most 35 + 6 + 10 + 7 = 58 characters (workload names have at most 35)."""
    return f"{workload}-gate-{revision}-{template}"


def render_gate_benchmark(
    *,
    namespace: str,
    owner: Owner,
    revision: str,
    template: BenchmarkTemplate,
    url: str,
    served_name: str,
    model_id: str,
    timeout_seconds: int,
) -> dict[str, Any]:
    """The InferenceBenchmark measuring ``url`` (one new-revision replica) with ``template``."""
    digest = template_hash(template)
    spec = template.to_wire()
    spec.setdefault("tokenizer", model_id)
    spec["target"] = {"url": url, "model": served_name}
    spec["timeoutSeconds"] = timeout_seconds
    return {
        "apiVersion": API_VERSION,
        "kind": "InferenceBenchmark",
        "metadata": {
            "name": gate_name(workload=owner.name, revision=revision, template=digest),
            "namespace": namespace,
            "labels": {
                keys.LABEL_GATE_WORKLOAD: owner.name,
                keys.LABEL_REVISION: revision,
                keys.LABEL_GATE_TEMPLATE: digest,
                keys.LABEL_MANAGED_BY: keys.MANAGED_BY,
            },
            "ownerReferences": [owner.reference()],
        },
        "spec": spec,
    }
