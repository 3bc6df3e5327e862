"""Tenant YAML is bounded before it is walked (issue 23; ADR 0038), through the daemon API.

``catalog.import`` with a recipe whose ``defaults`` hold a YAML alias chain (the finding: 481
bytes, 8 levels of 10 references, 10^8 nodes once expanded, took an operator replica down) is
a 422 at submission naming the line and column, no DaemonJob is created, and the operator
keeps reconciling. A DaemonJob written without the API carrying the same content fails in the
executor with the same message (it runs the check again) and the operator survives it.

NB: the 5-level chain goes first everywhere: on code that accepts it (a 202, 10^5 nodes: harmless)
the test stops there, before the 8-level one can reach an operator.
"""

from __future__ import annotations

import secrets
import time
from typing import Any

import pytest

from tests.shim.conftest import API, Daemon
from tests.shim.harness import with_digest

pytestmark = pytest.mark.testbed

HEADER = "model: Qwen/Qwen3-0.6B\nruntime: vllm\ncontainer: vllm/vllm-openai:v0.11.0\n"
ANCHOR_MESSAGE = "recipe YAML uses an anchor (&l1) at line 5, column 7: anchors and aliases are not allowed"


def alias_chain(levels: int) -> str:
    """A valid recipe whose ``defaults`` hold ``levels`` levels of 10 references each: level 1
    is 10 strings, level ``n`` 10 aliases of level ``n - 1``."""
    lines = [HEADER + "defaults:", "  l1: &l1 [" + ",".join(["lol"] * 10) + "]"]
    for n in range(2, levels + 1):
        lines.append(f"  l{n}: &l{n} [" + ",".join([f"*l{n - 1}"] * 10) + "]")
    lines.append("metadata:\n  description: an alias chain")
    return "\n".join(lines) + "\n"


def _recipe_status(daemon: Daemon, name: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = daemon.kube.get(API, "Recipe", name, namespace=daemon.namespace) or {}
        status: dict[str, Any] = found.get("status") or {}
        if status.get("observedGeneration") == (found.get("metadata") or {}).get("generation") and status:
            return status
        assert time.monotonic() < deadline, f"the operator wrote no status for Recipe {name}: {found}"
        time.sleep(0.2)


def _operator_reconciles(daemon: Daemon) -> None:
    """The operator is alive and still reconciles: a new Recipe gets its status."""
    assert daemon.runner.operator.alive(), daemon.runner.logs()
    name = "after-" + secrets.token_hex(3)
    daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "Recipe",
            "metadata": {"name": name, "namespace": daemon.namespace},
            "spec": {"model": "Qwen/Qwen3-0.6B", "runtime": "vllm", "container": "vllm/vllm-openai:v0.11.0"},
        }
    )
    assert _recipe_status(daemon, name).get("revision")


def test_an_alias_chain_is_refused_at_submission(daemon: Daemon) -> None:
    small, bomb = alias_chain(5), alias_chain(8)
    assert len(bomb.encode()) < 600
    assert ANCHOR_MESSAGE in daemon.refused_at_submission("operator", "catalog.import", {"content": small})
    assert ANCHOR_MESSAGE in daemon.refused_at_submission("operator", "catalog.import", {"content": bomb})
    # A lone alias (no anchor before it) is named as an alias.
    lone = HEADER + "defaults:\n  served_model_name: *nowhere\n"
    assert (
        "recipe YAML uses an alias (*nowhere) at line 5, column 22: anchors and aliases are not allowed"
        in daemon.refused_at_submission("operator", "catalog.import", {"content": lone})
    )
    _operator_reconciles(daemon)


def test_deep_and_oversized_recipes_are_refused_at_submission(daemon: Daemon) -> None:
    deep = HEADER + "defaults:\n  x: " + "[" * 100 + "]" * 100 + "\n"
    assert "recipe YAML nests deeper than 32 levels at line 5, column 36" in daemon.refused_at_submission(
        "operator", "catalog.import", {"content": deep}
    )
    # 140,000 characters (within the schema's 262,144) but 280,000 bytes of UTF-8.
    big = HEADER + "# " + "\u00e9" * 140_000 + "\n"
    assert "recipe YAML is 280076 bytes; at most 262144 are allowed" in daemon.refused_at_submission(
        "operator", "catalog.import", {"content": big}
    )
    _operator_reconciles(daemon)


def test_a_recipe_over_the_recipe_crd_bounds_is_refused_at_submission(daemon: Daemon) -> None:
    # Within the YAML bound (32 levels) but past the Recipe CRD's 6 levels of defaults: the
    # offline admission refuses it with the path before a job exists (before: 202, then the
    # apiserver's 422 inside the job).
    deep = HEADER + "defaults:\n  deep: " + "{a: " * 6 + "1" + "}" * 6 + "\n"
    assert daemon.refused_at_submission("operator", "catalog.import", {"content": deep}).startswith(
        "recipe content makes an invalid Recipe: spec.defaults.deep.a.a.a.a.a: "
    )
    _operator_reconciles(daemon)


def test_deep_json_is_refused_at_submission(daemon: Daemon) -> None:
    # A body nested 100,000 deep: the pre-scan refuses it before json decodes it.
    with daemon.http("operator") as client:
        answer = client.post(
            "/v1/ops/catalog.import", content=b"[" * 100_000, headers={"content-type": "application/json"}
        )
    assert answer.status_code == 422, answer.text
    assert (
        answer.json()["detail"] == "Invalid JSON request: request body nests deeper than 64 levels (100000)"
    )
    # A model_cache.import manifest past its 7 levels (within the schema's 20), refused before a job.
    extra: dict[str, Any] = {}
    for _ in range(10):
        extra = {"a": extra}
    manifest = {
        "repo": "org/model",
        "revision": "a" * 40,
        "files": [{"path": "x", "size": 1}],
        "extra": extra,
    }
    arguments = {"cache_dir": "claim", "model": "org/model", "manifest": manifest}
    assert "manifest nests deeper than 7 levels" in daemon.refused_at_submission(
        "operator", "model_cache.import", arguments
    )


def test_the_executor_refuses_an_alias_chain_written_without_the_api(daemon: Daemon) -> None:
    ns = daemon.namespace
    name = secrets.token_hex(16)
    daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "DaemonJob",
            "metadata": {"name": name, "namespace": ns},
            "spec": with_digest(
                {
                    "operation": "catalog.import",
                    "arguments": {"content": alias_chain(5)},
                    "principal": {"username": daemon.env.username("operator")},
                }
            ),
        }
    )
    deadline = time.monotonic() + 60
    while True:
        status = daemon.job_object(name).get("status") or {}
        if status.get("state") in {"succeeded", "failed", "cancelled", "lost"}:
            break
        assert time.monotonic() < deadline, status
        time.sleep(0.2)
    assert status["state"] == "failed", status
    assert status["error"]["type"] == "ValueError", status
    assert ANCHOR_MESSAGE in status["error"]["message"], status
    imported = daemon.kube.list_items(API, "Recipe", namespace=ns)
    assert not [
        r for r in imported if (r["spec"].get("metadata") or {}).get("description") == "an alias chain"
    ]
    _operator_reconciles(daemon)
