"""Every enabled operation, run once through the shim against the testbed.

Each of the 85 enabled operations (the reference's 76, the project's 9) is called with valid
arguments as the document's users would (jobs through their HTTP alias, queries inline) and must
end as expected: succeeded, or failed with the typed error its situation calls for (a JobSet that
does not exist is a ``LookupError``). A job that succeeded passed the runtime check of its result
against the reference result schema, so this also proves every executor's result shape. Effects
are checked where they are the point (the cluster exists, the alias is saved, the recipe was
imported). The ten ``model_cache.*`` operations need a claim with a cache and process nodes: here
they must fail as ``LookupError`` for a claim that does not exist; they succeed, each one, in
``tests/operator/test_modelcache_ops.py``.

The shim and the operator run with exactly the chart's RBAC (their ServiceAccounts' tokens,
``tests/shim/chart_rbac.py``), not as the testbed admin: every operation that succeeds here is
one the chart lets the product do, and none ends ``Forbidden``.
"""

from __future__ import annotations

import secrets
from typing import Any

import pytest

from sparkrun_operator.ops import catalog
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed

RECIPE_YAML = """
model: Qwen/Qwen3-0.6B
runtime: vllm
container: vllm/vllm-openai:v0.11.0
defaults:
  tensor_parallel: 1
  served_model_name: tiny
metadata:
  description: imported through the daemon API
"""


#: the module's ``daemon`` (tests/shim/conftest.py) runs with the chart's RBAC
CHART_RBAC = True


def _call(daemon: Daemon, who: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Run ``name``; returns ``{"state", "result", "error"}`` for jobs and queries alike."""
    op = catalog.load().get(name)
    with daemon.http(who) as client:
        answer = client.post(op.http_path or f"/v1/ops/{name}", json=arguments)
    if op.kind == "query":
        if answer.status_code == 200:
            return {"state": "succeeded", "result": answer.json(), "error": None}
        return {"state": "failed", "result": None, "error": answer.json(), "status": answer.status_code}
    assert answer.status_code == 202, (name, answer.text)
    job: dict[str, Any] = daemon.wait_job(answer.json()["job_id"], who, timeout=240)
    return job


def test_every_enabled_operation_runs(daemon: Daemon) -> None:
    tag = secrets.token_hex(3)
    cluster = f"ops-{tag}"
    seen: dict[str, dict[str, Any]] = {}
    problems: list[str] = []

    def run(name: str, arguments: dict[str, Any], *, who: str = "admin", error: str | None = None) -> Any:
        job = _call(daemon, who, name, arguments)
        seen[name] = job
        if error is None and job["state"] != "succeeded":
            problems.append(f"{name}: {job['state']} {job.get('error')}")
        if error is not None and (
            job["state"] != "failed" or (job["error"] or {}).get("error", {}).get("type") != error
        ):
            problems.append(f"{name}: expected a {error} failure, got {job['state']} {job.get('error')}")
        return job.get("result")

    try:
        # Clusters and capacity.
        created = run(
            "cluster.create", {"name": cluster, "hosts": ["gpu-0", "gpu-1"], "description": "ops test"}
        )
        assert created["hosts"] == ["gpu-0", "gpu-1"]
        assert created["hosts_hardware"]["gpu-0"]["accelerators"][0]["count"] == 8
        updated = run("cluster.update", {"name": cluster, "hosts": ["gpu-0"], "user": "ubuntu"})
        assert (updated["hosts"], updated["user"]) == (["gpu-0"], "ubuntu")
        run("cluster.default", {"name": cluster})
        assert daemon.kube.get(API, "InferenceCluster", cluster)["spec"]["default"] is True
        run("cluster.default", {"name": None})
        observed = run("cluster.observe", {"cluster": cluster})
        assert [h["host"] for h in observed["hosts"]] == ["gpu-0"]
        run("cluster.report", {"hosts": ["gpu-0", "gpu-1"]})
        rows = run("catalog.clusters", {}, who="reader")
        assert cluster in {r["name"] for r in rows}
        capacity = run("catalog.capacity", {"cluster": cluster}, who="reader")
        assert capacity["hosts"][0]["reachable"] is True

        # Recipes.
        imported = run("catalog.import", {"content": RECIPE_YAML}, who="operator")
        reference = imported["reference"]
        assert imported["source_kind"] == "imported"
        assert run("catalog.recipe", {"reference": "qwen3-8b-vllm"}, who="reader")["model"] == "Qwen/Qwen3-8B"
        run(
            "catalog.recipe",
            {"reference": "qwen3-8b-vllm", "expected_revision": "0" * 12},
            who="reader",
            error="Conflict",
        )
        listing = run("catalog.recipes", {"limit": 1}, who="reader")
        assert listing["total"] == 2
        assert listing["next_offset"] == 1
        assert {r["name"] for r in run("catalog.search", {"query": "8b"}, who="reader")} == {"qwen3-8b-vllm"}
        run("catalog.retain", {"reference": reference}, who="operator")
        assert run("catalog.cleanup", {}, who="operator") == 0  # retained
        issues = run("recipes.validate", {"recipe": "qwen3-8b-vllm"}, who="reader")
        assert all(issue["severity"] != "error" for issue in issues)

        # Recipe registries (in depth, with a git server and the controller: test_registry_ops.py).
        # The admin principal holds no Kubernetes permission on reciperegistries itself: add is
        # refused, and so are the others, before the name is looked up (a refusal does not say
        # which registries exist; with the permission an unknown name is the reference's error).
        assert isinstance(run("catalog.registries", {}, who="reader"), list)
        url = "https://example.com/recipes.git"
        run("catalog.registries.add", {"name": f"reg-{tag}", "url": url}, error="PermissionError")
        for action in ("remove", "enable", "disable", "untrust"):
            run(f"catalog.registries.{action}", {"name": f"no-reg-{tag}"}, error="PermissionError")
        trust = {"name": f"no-reg-{tag}", "acknowledge_trust": True}
        run("catalog.registries.trust", trust, error="PermissionError")
        assert set(run("catalog.refresh", {}, who="operator")) == {"updated", "failed"}

        # Benchmarks (measured for real in tests/operator/test_benchmark_ops.py).
        preview = run(
            "benchmarks.run",
            {"recipe": "qwen3-8b-vllm", "dry_run": True, "bench_args": {"concurrency": [1, 4]}},
            who="operator",
        )
        assert preview["benchmark_id"].startswith("bench-")
        assert preview["framework"] == "llama-benchy"
        assert (
            daemon.kube.get(API, "InferenceBenchmark", preview["benchmark_id"], namespace=daemon.namespace)
            is None
        )
        run("benchmarks.resume", {"benchmark_id": "bench-none"}, who="operator", error="LookupError")

        # Workloads.
        plan = run("workloads.plan", {"recipe": "qwen3-8b-vllm", "overrides": {"tp": 2}}, who="reader")
        assert plan["workload_id"].startswith("sparkrun_")
        materialized = run("workloads.materialize", {"recipe": "qwen3-8b-vllm"}, who="operator")
        assert materialized["kind"] == "kubernetes.jobset"
        assert materialized["units"]
        # Placed and pinned, and what a build needs (each in depth: tests/shim/test_realize.py).
        realized = run("recipes.realize", {"recipe": "qwen3-8b-vllm"}, who="operator")
        assert realized["plan"]["workload_id"] == materialized["workload_id"]
        assert run("recipes.plan_build", {"recipe": "qwen3-8b-vllm"}, who="reader")["needs_image"] is False
        dry = run("workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True}, who="operator")
        assert dry["dry_run"] is True
        ready = run("workloads.ensure_ready", {"recipe": "qwen3-8b-vllm", "timeout": 180}, who="operator")
        assert ready["state"] == "ready"
        assert ready["adopted"] is False
        workload_id = ready["workload_id"]
        revision = ready["workload"]["recipe_revision"]
        again = run(
            "workloads.ensure_ready", {"recipe": "qwen3-8b-vllm", "recipe_revision": revision}, who="operator"
        )
        assert again["adopted"] is True
        guarded = {"recipe": "qwen3-8b-vllm", "recipe_revision": revision, "workload_id": workload_id}
        assert run("workloads.status", guarded, who="reader")["state"] == "ready"
        run("workloads.sleep", guarded, who="operator", error="Conflict")  # started without sleep mode
        assert run("workloads.wake", guarded, who="operator")["state"] == "ready"
        # The project's own operations (ADR 0048; a rollback the operator serves:
        # tests/shim/test_rollout_ops.py), by workload id as the daemon's clients address it.
        kept = run("plugins.sparkrun-k8s.workloads.history", {"workload": workload_id}, who="reader")
        assert kept["workload"] == "qwen3-8b-vllm"
        # The ETag an If-Match names (ADR 0049; each conditional operation: tests/shim/test_if_match.py).
        found = run(
            "plugins.sparkrun-k8s.objects.get",
            {"kind": "InferenceWorkload", "name": workload_id},
            who="reader",
        )
        assert (found["name"], found["etag"][0], found["etag"][-1]) == ("qwen3-8b-vllm", '"', '"')
        run(
            "plugins.sparkrun-k8s.workloads.rollback",
            {"workload": workload_id, "revision": 99},
            who="operator",
            error="LookupError",
        )
        run(
            "plugins.sparkrun-k8s.workloads.apply_drift",
            {"workload": workload_id},
            who="operator",
            error="Conflict",
        )
        run("plugins.sparkrun-k8s.clusters.apply_drift", {"cluster": cluster}, error="Conflict")
        # Ownership leases (ADR 0049; lapses, orphans and claims: tests/shim/test_ownership_leases.py):
        # this workload did not opt in, so it is not listed and a claim or release is refused.
        leases = run("plugins.sparkrun-k8s.workloads.leases", {"owned": None}, who="reader")
        assert "qwen3-8b-vllm" not in {row["workload"] for row in leases["leases"]}, leases
        run(
            "plugins.sparkrun-k8s.workloads.lease",
            {"workload": workload_id},
            who="operator",
            error="Conflict",
        )
        run(
            "plugins.sparkrun-k8s.workloads.release",
            {"workload": workload_id},
            who="operator",
            error="Conflict",
        )
        # Drain and replace (ADR 0049): no serving group on a cordoned node, so Done at once.
        drained = run("plugins.sparkrun-k8s.clusters.drain", {"cluster": cluster, "timeout_seconds": 60})
        assert (drained["state"], drained["groups"]) == ("Done", []), drained
        # The idle policy's zero replicas (as the autoscaler leaves them, ADR 0045): reported as
        # such, and workloads.wake brings the replicas back, as a request through the gateway does.
        path = daemon.kube.resource_path(
            API, "InferenceWorkload", namespace=daemon.namespace, name="qwen3-8b-vllm"
        )

        def reported_zero(reason: str) -> bool:  # NB: the operator saw it (status.conditions lag the spec)
            got = daemon.kube.get(API, "InferenceWorkload", "qwen3-8b-vllm", namespace=daemon.namespace) or {}
            conditions = (got.get("status") or {}).get("conditions") or []
            return any(c.get("type") == "Ready" and c.get("reason") == reason for c in conditions)

        daemon.kube.request(
            "PATCH",
            path,
            json={"spec": {"idle": {"zeroAfterSeconds": 3600}, "replicas": 0}},
            headers={"content-type": "application/merge-patch+json"},
        )
        daemon.kube.wait(lambda: reported_zero("ScaledToZero"), timeout=60, what="Ready reason ScaledToZero")
        assert run("workloads.status", guarded, who="reader")["state"] == "scaled_to_zero"
        assert "wake" in run("workloads.status", guarded, who="reader")["actions"]
        assert run("workloads.wake", guarded, who="operator")["state"] == "ready"
        woken = daemon.kube.get(API, "InferenceWorkload", "qwen3-8b-vllm", namespace=daemon.namespace)
        assert woken is not None
        assert woken["spec"]["replicas"] == 1
        owners = {f["manager"] for f in woken["metadata"]["managedFields"] if "f:replicas" in str(f)}
        assert "sparkrun-daemon-api" in owners
        # Your own zero (no idle policy): nothing to wake (refused, not a wait for a Ready that
        # never comes); parked (Stopped) at the idle policy's zero: the wake brings the replicas back.
        merge = {"content-type": "application/merge-patch+json"}
        daemon.kube.request("PATCH", path, json={"spec": {"idle": None, "replicas": 0}}, headers=merge)

        daemon.kube.wait(lambda: reported_zero("NoReplicasDesired"), timeout=60, what="NoReplicasDesired")
        assert run("workloads.status", guarded, who="reader")["state"] == "stopped"
        run("workloads.wake", guarded, who="operator", error="Conflict")
        parked = {"spec": {"idle": {"zeroAfterSeconds": 3600}, "state": "Stopped"}}
        daemon.kube.request("PATCH", path, json=parked, headers=merge)
        assert run("workloads.wake", guarded, who="operator")["state"] == "ready"
        woken = daemon.kube.get(API, "InferenceWorkload", "qwen3-8b-vllm", namespace=daemon.namespace)
        assert woken is not None
        assert (woken["spec"]["state"], woken["spec"]["replicas"]) == ("Running", 1)
        assert (
            run("workloads.reconcile", {**guarded, "acknowledge_effects": True})["workload_id"] == workload_id
        )
        inventory = run("workloads.inventory", {}, who="reader")
        assert workload_id in {row["workload_id"] for row in inventory["workloads"]}
        assert workload_id in {
            row["workload_id"] for row in run("workloads.list", {"limit": 10}, who="reader")
        }
        endpoints = run("workloads.endpoints", {"workload_id": workload_id}, who="reader")
        assert endpoints["endpoints"][0]["healthy"] is True
        # A recipe served under its own name (workload qwen3-8b-vllm, the recipe's
        # served_model_name qwen3-8b): the daemon reports the names the operator wrote to
        # status.model (what the gateway routes), never the workload's name.
        endpoint = endpoints["endpoints"][0]
        stored = daemon.kube.get(API, "InferenceWorkload", "qwen3-8b-vllm", namespace=daemon.namespace)
        assert stored is not None
        assert stored["status"]["model"]["servedName"] == "qwen3-8b"
        assert (endpoint["model"], endpoint["served_model_name"]) == ("Qwen/Qwen3-8B", "qwen3-8b")
        assert endpoint["actual_models"] == ["qwen3-8b"]
        assert endpoint["capabilities"] == stored["status"]["model"]["capabilities"] == ["text-generation"]
        rows = {row["workload_id"]: row for row in run("workloads.list", {}, who="reader")}
        assert rows[workload_id]["metadata"]["model"] == "Qwen/Qwen3-8B"
        snapshot = run("discovery.snapshot", {"workload_ids": [workload_id]}, who="reader")
        assert [e["workload_id"] for e in snapshot["endpoints"]] == [workload_id]
        found = run(
            "workloads.find_intent",
            {"intent_id": workload_id.split("_")[1], "hosts": ["gpu-0"]},
            who="reader",
        )
        assert found is not None
        assert found["workload_id"] == workload_id
        assert run("workloads.plugins", {}, who="reader")["plugins"][0]["lifecycle"] is True
        bundle = run("diagnostics.collect", {"workload_id": workload_id, "log_tail": 5}, who="reader")
        assert bundle["artifact"]["size_bytes"] > 0

        # Gateway state.
        saved = run("proxy.add_alias", {"alias": f"alias-{tag}", "target": "qwen3-8b"})
        assert saved["aliases"][f"alias-{tag}"] == "qwen3-8b"
        assert saved["applied"] == 1  # the ready workload serves qwen3-8b
        assert run("proxy.list_aliases", {}, who="reader") == {f"alias-{tag}": "qwen3-8b"}
        models = {m["model_name"] for m in run("proxy.models", {}, who="reader")}
        assert {"qwen3-8b", f"alias-{tag}"} <= models
        assert run("proxy.remove_alias", {"alias": f"alias-{tag}"})["removed"] == 1
        assert run("proxy.list_gateways", {}, who="reader") == ["sparkrun-gateway"]
        assert run("proxy.resolve_gateway", {}, who="reader") == "sparkrun-gateway"
        run("proxy.resolve_gateway", {"name": "litellm"}, who="reader", error="LookupError")
        assert run("proxy.status", {}, who="reader")["running"] is False  # no gateway on the testbed
        assert run("proxy.register_loaded_model", {"recipe": "qwen3-8b-vllm"}, who="operator")["added"] == 1
        assert (
            run("proxy.unregister_loaded_model", {"recipe": "qwen3-8b-vllm"}, who="operator")["removed"] == 1
        )

        # The Kubernetes plugin, on the operator's own cluster.
        info = run("plugins.k8s.cluster_info", {}, who="operator")
        assert info["reachable"] is True
        assert info["server_version"].startswith("v1.")
        run("plugins.k8s.cluster_info", {"kubeconfig": "/etc/kubeconfig"}, who="operator", error="ValueError")
        account = run("plugins.k8s.configure_service_account", {"name": f"ci-{tag}", "dry_run": True})
        assert "ServiceAccount" in account["manifests_yaml"]
        assert account["applied"] is False
        # disabled (ops/catalog.py: the operator runs no kubectl): a typed 403 naming the way
        with daemon.http("admin") as client:
            refused = client.post("/v1/plugins/k8s/ops/ensure_kubectl", json={})
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "FeatureDisabled"
        assert refused.json()["error"]["attrs"]["reason"] == "not_applicable"
        assert "plugins.k8s.cluster_info" in refused.json()["error"]["attrs"]["alternative"]
        run("plugins.k8s.jobset_status", {"name": "no-such-jobset"}, who="operator", error="LookupError")
        assert run("plugins.k8s.kueue_status", {}, who="operator") == {
            "kueue_installed": False,
            "jobset_installed": True,
        }
        nodes = run("plugins.k8s.list_nodes", {"gpu_only": True}, who="operator")
        assert {n["name"] for n in nodes} >= {"gpu-0", "gpu-1"}
        assert all(n["capacity_gpus"] == 8 for n in nodes)
        queues = run("plugins.k8s.setup_kueue", {"dry_run": True})
        assert queues["flavors"]
        assert queues["provisioned"] is False
        run("plugins.k8s.stop_jobset", {"name": "no-such-jobset"}, who="operator", error="LookupError")

        # The gateway Deployment (absent here: test_daemon_api.py has one).
        assert run("proxy.service_status", {})["installed"] is False
        run("proxy.stop", {}, who="operator", error="LookupError")
        run("proxy.start", {}, who="operator", error="LookupError")
        assert run("proxy.sync", {}, who="operator")["added"] == 0
        assert run("proxy.discovery.status", {})["backend"] == "kubernetes-watch"

        # Model caches: a claim that does not exist is a LookupError for every one of them.
        missing = {"cache_dir": f"no-claim-{tag}"}
        commit = "0" * 40
        for name, extra, who in (
            ("model_cache.list", {}, "reader"),
            ("model_cache.inspect", {"model": "o/m"}, "reader"),
            ("model_cache.resolve", {"model": "o/m"}, "reader"),
            ("model_cache.pin", {"model": "o/m", "revision": commit}, "operator"),
            ("model_cache.repair", {"model": "o/m"}, "operator"),
            ("model_cache.import", {"model": "o/m", "fetch_manifest": True}, "operator"),
            ("model_cache.prune", {}, "admin"),
            (
                "model_cache.reconcile",
                {"model": "o/m", "revision": commit, "claim": "w", "confirm_inactive": True},
                "admin",
            ),
            ("model_cache.adopt", {"all_models": True}, "admin"),
            ("model_cache.delete", {"model": "o/m"}, "admin"),
        ):
            run(name, {**missing, **extra}, who=who, error="LookupError")

        # Teardown through the API.
        preview = run("workloads.stop_all", {"cluster": cluster, "dry_run": True}, who="operator")
        assert preview["dry_run"] is True
        nothing = run(
            "workloads.stop_matching",
            {"workload_id": "sparkrun_0000000000000000_000000000000"},
            who="operator",
        )
        assert nothing["containers_removed"] == 0
        assert run("workloads.stop", guarded, who="operator")["state"] == "offline"
        run("cluster.delete", {"name": cluster})
        assert daemon.kube.get(API, "InferenceCluster", cluster) is None
    finally:
        daemon.kube.delete(API, "InferenceCluster", cluster)
    assert not problems, "\n".join(problems)
    enabled = {op.name for op in catalog.load() if op.enabled}
    assert set(seen) == enabled, sorted(enabled - set(seen))
    # Nothing the components asked of the apiserver with the chart's RBAC was refused.
    assert daemon.rbac is not None
    for component in ("shim", "operator"):
        log = (daemon.runner.workdir / f"{component}.log").read_text()
        assert "Forbidden" not in log, f"{component}:\n{log[-4000:]}"
        assert "is forbidden" not in log, f"{component}:\n{log[-4000:]}"
