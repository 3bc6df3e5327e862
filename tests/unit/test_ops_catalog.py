"""The daemon operation catalog: completeness against the spec, schema fidelity, availability.

Tested: all 94 operations of the document are registered with its kind, scope, alias, version
and reservation (beside the project's own in ``plugins.sparkrun-k8s.``, ADR 0048,
tests/unit/test_pluginops.py); request/result schemas equal the reference daemon's; every request schema
refuses unknown top-level fields; the committed package data is what the generator produces
from the vendored ``spec/daemon-api`` (no drift); every disabled operation says why and what to use instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sparkrun_operator.api import pluginops
from sparkrun_operator.ops import catalog

REPO = Path(__file__).resolve().parents[2]
SPEC = REPO / "spec" / "daemon-api"


def _spec(name: str) -> list[dict]:
    path = SPEC / name
    if not path.exists():
        pytest.fail(f"{path} is missing: the vendored spec is part of the repository")
    return json.loads(path.read_text())


def test_every_documented_operation_is_registered_as_documented() -> None:
    ops = catalog.load()
    documented = _spec("sparkrun-daemon-ops.json")
    reference = [op for op in ops if op.owner != pluginops.PLUGIN_ID]
    assert len(reference) == len(documented) == 94
    assert len(ops) == 94 + len(pluginops.OPERATIONS)
    for doc in documented:
        op = ops.get(doc["name"])
        assert (op.kind, op.scope, op.http_path, op.version, op.resources) == (
            doc["kind"],
            doc["scope"],
            doc["http_path"],
            doc["version"],
            doc["reservation"],
        ), doc["name"]
        assert op.description == doc["description"]
        required = {a["name"] for a in doc["arguments"] if a["required"]}
        assert required <= set(op.request_schema.get("properties", {})), doc["name"]


def test_schemas_are_the_reference_daemons() -> None:
    ops = catalog.load()
    for ref in _spec("reference-daemon-ops.json"):
        op = ops.get(ref["name"])
        assert op.request_schema == ref["request_schema"], ref["name"]
        assert op.result_schema == ref["result_schema"], ref["name"]
        assert op.discovery()["owner"] == ref["owner"]
        assert op.local_name == ref["local_name"]
        assert op.cacheable == ref["cacheable"]


def test_every_request_schema_refuses_unknown_top_level_fields() -> None:
    for op in catalog.load():
        assert op.request_schema["type"] == "object"
        assert op.request_schema["additionalProperties"] is False, op.name


def test_aliases_are_unique_and_resolve_back() -> None:
    ops = catalog.load()
    assert len(ops.paths) == 94 + len(pluginops.OPERATIONS)
    for path, op in ops.paths.items():
        assert ops.by_path(path) is op
    assert ops.get("plugins.k8s.list_nodes").http_path == "/v1/plugins/k8s/ops/list_nodes"
    assert ops.by_path("/v1/workloads/run") is ops.get("workloads.run")


def test_committed_catalog_matches_the_generator() -> None:
    _spec("reference-daemon-ops.json")
    done = subprocess.run(
        [sys.executable, str(REPO / "hack" / "gen-ops-catalog.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr


def test_availability_policy() -> None:
    ops = catalog.load()
    codes = {op.name: op.availability.code for op in ops}
    assert sum(code == "enabled" for code in codes.values()) == 76 + len(pluginops.OPERATIONS)
    for name in ("setup.mesh_ssh_keys", "tailscale.join", "proxy.install_service", "proxy.discovery.ensure"):
        assert codes[name] == "not_applicable"
    # the operator runs no kubectl and its image has none (issue 32)
    assert codes["plugins.k8s.ensure_kubectl"] == "not_applicable"
    # recipe registries are RecipeRegistries (issue 32): every catalog.registries* and refresh runs
    assert all(code == "enabled" for name, code in codes.items() if name.startswith("catalog."))
    assert "not_implemented" not in codes.values()
    # the operator builds no image (ADR 0054); plan_build and realize answer read-only (issue 32)
    assert codes["recipes.build"] == "not_applicable"
    assert codes["recipes.plan_build"] == codes["recipes.realize"] == "enabled"
    for prefix in ("workloads.", "cluster.", "plugins.k8s.", "model_cache.", "benchmarks."):
        assert all(
            code == "enabled"
            for name, code in codes.items()
            if name.startswith(prefix) and name != "plugins.k8s.ensure_kubectl"
        ), prefix
    for name in (
        "discovery.snapshot",
        "diagnostics.collect",
        "recipes.validate",
        "proxy.add_alias",
        "catalog.recipes",
    ):
        assert codes[name] == "enabled"
    for op in ops:
        if not op.enabled:
            message = op.availability.describe(op.name)
            assert op.availability.reason, op.name
            assert op.availability.alternative, op.name
            assert message.startswith(f"Operation {op.name} is disabled on Kubernetes: ")


def test_prefix_policy_prefers_the_longest_match() -> None:
    assert catalog.availability_of("catalog.registries").enabled
    assert catalog.availability_of("setup.plan").code == "not_applicable"  # by its prefix
    assert catalog.availability_of("catalog.recipes").enabled
    assert catalog.availability_of("proxy.discovery.stop").code == "not_applicable"
    assert catalog.availability_of("tailscale.join").code == "not_applicable"  # by its prefix
    assert catalog.availability_of("proxy.status").enabled
