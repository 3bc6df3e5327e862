"""``recipes.realize``, ``recipes.plan_build`` and the disabled ``recipes.build`` through the daemon
API (the shim and the operator on the testbed, with the chart's RBAC).

``recipes.realize`` answers the reference's result (its schema is checked here as well as by the
job runner) built from what ``workloads.plan`` and ``workloads.materialize`` answer: the recipe
with the request's overrides baked into ``defaults``, the image pinned when its reference has a
digest, what could not be pinned listed, and the rendered JobSet; host-execution settings and
``ensure`` are refused at submission naming them, and per-request trust is refused where the
listener does not allow it. ``recipes.plan_build`` answers what a build would need (a recipe
naming a ``builder`` needs an image the operator will not build); ``recipes.build`` is a typed
403 naming the alternative (ADR 0054).
"""

from __future__ import annotations

import secrets
from typing import Any

import jsonschema
import pytest

from sparkrun_operator.ops import catalog
from sparkrun_operator.render import keys
from tests.operator.test_benchmark_registry_profile import record_config_maps
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed

CHART_RBAC = True
RECIPE = "qwen3-8b-vllm"  # examples/recipe.yaml, created by start_daemon
DIGEST = "sha256:" + "ab" * 32


def _job(daemon: Daemon, who: str, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = daemon.wait_job(daemon.submit(who, name, arguments), who, timeout=120)
    return job


def _recipe(daemon: Daemon, name: str, **spec: Any) -> None:
    body = {
        "apiVersion": API,
        "kind": "Recipe",
        "metadata": {"name": name, "namespace": daemon.namespace},
        "spec": {"recipeVersion": "2", "model": "Qwen/Qwen3-0.6B", "runtime": "vllm", **spec},
    }
    daemon.kube.apply(body)


def test_realize_exports_the_placed_pinned_rendered_recipe(daemon: Daemon) -> None:
    job = _job(
        daemon, "operator", "recipes.realize", {"recipe": RECIPE, "overrides": {"tp": 2}, "dry_run": True}
    )
    assert job["state"] == "succeeded", job
    result = job["result"]
    jsonschema.validate(result, dict(catalog.load().get("recipes.realize").result_schema))
    recipe = result["recipe"]
    assert recipe["model"] == "Qwen/Qwen3-8B"
    assert recipe["defaults"]["tensor_parallel"] == 2  # the override, baked in
    assert recipe["defaults"]["served_model_name"] == "qwen3-8b"  # the recipe's own, kept
    assert recipe["metadata"]["realized_for"]["platform"] == "kubernetes"
    assert recipe["metadata"]["pinned"]["mode"] == "cluster"
    # nothing in the namespace knows the tag's digest or the model's commit: both listed, not guessed
    assert result["pins"] == []
    assert [u.split(" ", 2)[:2] for u in result["unpinned"]] == [
        ["container", "vllm/vllm-openai:v0.33.0"],
        ["model_revision", "main"],
    ]
    plan = result["plan"]
    assert plan["recipe"] == RECIPE
    assert plan["workload_id"].startswith("sparkrun_")
    rendered = result["materialized"]
    assert rendered["kind"] == "kubernetes.jobset"
    assert rendered["tensor_parallel"] == 2
    assert rendered["workload_id"] == plan["workload_id"]
    command = rendered["units"][0]["command"]
    assert "--tensor-parallel-size" in " ".join(command), command
    # realize creates nothing
    assert daemon.kube.list_items(API, "InferenceWorkload", namespace=daemon.namespace) == []


def test_a_digest_reference_is_already_pinned(daemon: Daemon) -> None:
    image = f"vllm/vllm-openai@{DIGEST}"
    _recipe(daemon, "pinned", container=image, modelRevision="c" * 40, defaults={"served_model_name": "p"})
    result = _job(daemon, "operator", "recipes.realize", {"recipe": "pinned"})["result"]
    assert result["recipe"]["container"] == image
    assert result["recipe"]["model_revision"] == "c" * 40
    assert (result["pins"], result["unpinned"]) == ([], [])


def test_unsupported_arguments_are_refused_naming_them(daemon: Daemon) -> None:
    detail = daemon.refused_at_submission(
        "operator", "recipes.realize", {"recipe": RECIPE, "ensure": True, "executor": "docker"}
    )
    assert detail.startswith("recipes.realize: not supported on Kubernetes: ensure, executor"), detail
    assert "workloads.ensure_ready" in detail
    # their defaults are accepted (a client that sends every field)
    defaults = {
        "recipe": RECIPE,
        "ensure": False,
        "transfer_mode": "auto",
        "offline": False,
        "rootful": False,
    }
    assert _job(daemon, "operator", "recipes.realize", defaults)["state"] == "succeeded"
    refused = daemon.refused_at_submission(
        "operator", "recipes.realize", {"recipe": RECIPE, "overrides": {"x": 1}}
    )
    assert "override 'x' is not supported on Kubernetes" in refused
    # per-request trust: this listener does not allow it (shim --allow-request-trust)
    answer = daemon.post_op("operator", "recipes.realize", {"recipe": RECIPE, "trust": True})
    assert answer.status_code == 403, answer.text
    missing = _job(daemon, "operator", "recipes.realize", {"recipe": "no-such-recipe"})
    assert missing["state"] == "failed"
    assert missing["error"]["error"]["type"] == "LookupError"


def test_plan_build_answers_what_a_build_needs(daemon: Daemon) -> None:
    plain = _job(daemon, "reader", "recipes.plan_build", {"recipe": RECIPE})
    assert plain["state"] == "succeeded", plain
    result = plain["result"]
    jsonschema.validate(result, dict(catalog.load().get("recipes.plan_build").result_schema))
    assert (result["needs_image"], result["runtime"], result["recipe"]) == (False, "vllm", RECIPE)
    assert [i["code"] for i in result["issues"]] == ["image_not_pinned"]
    _recipe(daemon, "built", container="local/eugr:latest", runtimeConfig={"builder": "eugr"})
    built = _job(daemon, "reader", "recipes.plan_build", {"recipe": "built", "offline": True})["result"]
    assert built["needs_image"] is True
    assert built["offline"] == {"offline": True, "source": "request"}
    issue = next(i for i in built["issues"] if i["code"] == "builder_not_run")
    assert issue["severity"] == "error"
    assert "build and push the image in CI" in issue["fix"]
    refused = daemon.refused_at_submission(
        "reader", "recipes.plan_build", {"recipe": RECIPE, "executor": "docker"}
    )
    assert "executor" in refused


def test_build_is_disabled_naming_the_alternative(daemon: Daemon) -> None:
    with daemon.http("operator") as client:
        answer = client.post("/v1/recipes/build", json={"recipe": RECIPE})
    assert answer.status_code == 403, answer.text
    error = answer.json()["error"]
    assert error["type"] == "FeatureDisabled"
    assert error["attrs"]["reason"] == "not_applicable"
    assert "hack/pin-digests.py" in error["attrs"]["alternative"]
    assert "recipes.plan_build" in error["attrs"]["alternative"]
    with daemon.http("operator") as client:  # NB: /v1/ops lists what the caller's scope may call
        listed = {op["name"] for op in client.get("/v1/ops").json()}
    assert {"recipes.realize", "recipes.plan_build"} <= listed
    assert "recipes.build" not in listed


def test_benchmarks_run_takes_a_registry_profile(daemon: Daemon) -> None:
    """``benchmarks.run`` with ``profile: "@<registry>/<name>"``: the profile's framework and
    timeout when the request names none (as sparkrun takes them); unknown ones fail typed.
    (Measured with a registry profile: tests/operator/test_benchmark_registry_profile.py.)"""
    name = f"bench-profiles-{secrets.token_hex(3)}"
    registry = daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "RecipeRegistry",
            "metadata": {"name": name},
            "spec": {"url": "http://127.0.0.1:9/none.git", "targetNamespace": daemon.namespace},
        }
    )
    try:
        owner = {"apiVersion": API, "kind": "RecipeRegistry", "name": name, "controller": True}
        stored = daemon.kube.apply(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {
                    "name": f"{name}-bench-tools",
                    "namespace": daemon.namespace,
                    "labels": {keys.LABEL_REGISTRY: name, keys.LABEL_BENCHMARK_PROFILE: "tools"},
                    "annotations": {keys.ANNOTATION_BENCHMARK_PROFILE_NAME: "tools"},
                    "ownerReferences": [{**owner, "uid": registry["metadata"]["uid"]}],
                },
                "data": {"profile.yaml": "framework: tool-eval-bench\ntimeout: 1234\nshort: true\n"},
            }
        )
        # as the registry's controller records what it wrote (issue 32, H9: a profile is used only
        # while its data has the recorded digest); after the operator's first (failing) sync, which
        # writes the status from its own view
        daemon.kube.wait(
            lambda: any(
                c.get("type") == "Synced"
                for c in ((daemon.kube.get(API, "RecipeRegistry", name) or {}).get("status") or {}).get(
                    "conditions", []
                )
            ),
            timeout=30,
            what=f"RecipeRegistry {name} tried once",
        )
        record_config_maps(daemon.kube, name, [stored])
        arguments = {"recipe": RECIPE, "profile": f"@{name}/tools", "dry_run": True}
        preview = _job(daemon, "operator", "benchmarks.run", arguments)
        assert preview["state"] == "succeeded", preview
        result = preview["result"]
        assert (result["framework"], result["category"]) == ("tool-eval-bench", "tools")
        assert result["profile"] == f"@{name}/tools"
        wrong = _job(daemon, "operator", "benchmarks.run", {**arguments, "framework": "llama-benchy"})
        assert wrong["state"] == "failed"
        assert wrong["error"]["error"]["type"] == "ValueError"
        assert "is for tool-eval-bench, not llama-benchy" in wrong["error"]["detail"], wrong["error"]
        unknown = _job(daemon, "operator", "benchmarks.run", {**arguments, "profile": f"@{name}/nope"})
        assert unknown["state"] == "failed"
        assert f"not found in registry {name} (its profiles: tools)" in unknown["error"]["detail"]
    finally:
        daemon.kube.delete(API, "RecipeRegistry", name)


def test_an_engine_pod_running_the_image_pins_it(daemon: Daemon) -> None:
    """The digest an engine pod in the namespace reports (``imageID``) pins the recipe's tag. The
    pod is bound to a node no kubelet runs, so the status written here is the one it keeps."""
    image = "vllm/vllm-openai:v0.99.0"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "engine-pin",
            "namespace": daemon.namespace,
            "labels": {keys.LABEL_WORKLOAD: "x"},
        },
        "spec": {"nodeName": "no-kubelet-here", "containers": [{"name": "vllm", "image": image}]},
    }
    daemon.kube.create(pod)
    try:
        status = {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": "vllm",
                    "image": image,
                    "imageID": f"docker.io/vllm/vllm-openai@{DIGEST}",
                    "ready": True,
                    "restartCount": 0,
                    "state": {"running": {}},
                }
            ],
        }
        daemon.kube.request(
            "PATCH",
            daemon.kube.resource_path("v1", "Pod", namespace=daemon.namespace, name="engine-pin") + "/status",
            json={"status": status},
            headers={"Content-Type": "application/merge-patch+json"},
        )
        _recipe(daemon, "by-pod", container=image, defaults={"served_model_name": "bp"})
        result = _job(daemon, "operator", "recipes.realize", {"recipe": "by-pod"})["result"]
        pinned = f"vllm/vllm-openai@{DIGEST}"
        assert result["recipe"]["container"] == pinned
        assert result["pins"][0] == {
            "field": "container",
            "before": image,
            "after": pinned,
            "source": "pod engine-pin",
        }
        assert result["recipe"]["metadata"]["pinned"]["from"]["container"] == image
    finally:
        daemon.kube.delete("v1", "Pod", "engine-pin", namespace=daemon.namespace)
