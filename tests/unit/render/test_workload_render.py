"""Rules of ``render/workload.py`` and ``render/names.py`` that goldens do not make obvious.

Tested: the child-name budget (and that the CRD enforces the same limit), the revision (stable,
blind to replicas/state/aliases, sensitive to what changes pods), shell quoting of worker
arguments, env precedence, Kueue queue precedence, the leader selector.
"""

from __future__ import annotations

import shlex
from typing import Any

import pytest

from sparkrun_operator.api.crdgen import WORKLOAD_NAME_MAX, crd
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import keys, names
from sparkrun_operator.render.workload import (
    CacheMount,
    Placement,
    ServingInputs,
    render_jobset,
    selector_string,
)


def _inputs(doc: dict[str, Any], **kwargs: Any) -> ServingInputs:
    spec = InferenceWorkloadSpec.model_validate(doc)
    resolution = resolve(workload=spec, recipe=None)
    assert resolution.spec is not None
    return ServingInputs(spec=resolution.spec, scheduling=spec.scheduling, **kwargs)


BASE: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}}
MULTI: dict[str, Any] = {
    "model": {"name": "m/m"},
    "topology": {"nodes": 64, "gpusPerNode": 1, "tensorParallel": 64},
}


def test_name_budget_matches_the_crd() -> None:
    assert names.WORKLOAD_NAME_MAX == 35
    assert WORKLOAD_NAME_MAX == names.WORKLOAD_NAME_MAX
    root = crd(INFERENCE_WORKLOAD)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    assert root["properties"]["metadata"]["properties"]["name"]["maxLength"] == names.WORKLOAD_NAME_MAX


def test_longest_names_fit_exactly() -> None:
    longest = "w" * names.WORKLOAD_NAME_MAX
    assert names.check_workload_name(workload=longest, nodes=64) is None
    assert max(len(n) for n in names.longest_child_names(workload=longest, nodes=64)) == 63
    message = names.check_workload_name(workload=longest + "w", nodes=64)
    assert message is not None
    assert "64 characters" in message


def test_real_jobset_names_stay_within_budget() -> None:
    """Render the worst case (replica 999, 64 nodes) and check every generated name."""
    workload = "w" * names.WORKLOAD_NAME_MAX
    js = render_jobset(namespace="ns", workload=workload, inputs=_inputs(MULTI), replica=999, suspend=False)
    name = js["metadata"]["name"]
    worker = js["spec"]["replicatedJobs"][1]
    completions = worker["template"]["spec"]["completions"]
    assert completions == 63
    pod = names.pod_hostname(jobset=name, role="worker", index=completions - 1) + names.POD_SUFFIX
    assert len(pod) == 63
    assert len(name) <= 63
    assert js["spec"]["network"]["subdomain"] == name


@pytest.mark.parametrize("bad", ["1abc", "a.b", "Abc", "abc-"])
def test_names_must_be_dns1035(bad: str) -> None:
    assert names.check_workload_name(workload=bad, nodes=1) is not None


def test_revision_ignores_replicas_state_and_aliases() -> None:
    base = _inputs(BASE).revision()
    assert _inputs({**BASE, "replicas": 7, "state": "Stopped"}).revision() == base
    assert _inputs({"model": {"name": "Qwen/Qwen3-0.6B", "aliases": ["x"]}}).revision() == base
    assert len(base) == names.REVISION_LEN
    assert base == _inputs(BASE).revision()


@pytest.mark.parametrize(
    ("change", "kwargs"),
    [
        ({"model": {"name": "Qwen/Qwen3-0.6B", "revision": "abc"}}, {}),
        ({**BASE, "engine": {"image": "vllm/vllm-openai:v0.12.0"}}, {}),
        ({**BASE, "engine": {"args": ["--enforce-eager"]}}, {}),
        ({**BASE, "engine": {"env": [{"name": "A", "value": "1"}]}}, {}),
        ({**BASE, "topology": {"nodes": 1, "gpusPerNode": 2, "tensorParallel": 2}}, {}),
        ({**BASE, "scheduling": {"nodeSelector": {"a": "b"}}}, {}),
        (BASE, {"placement": Placement(cluster="c", node_names=("n1",))}),
        (BASE, {"cache": CacheMount(cache="c", claim_name="pvc")}),
    ],
)
def test_revision_changes_with_the_pods(change: dict[str, Any], kwargs: dict[str, Any]) -> None:
    assert _inputs(change, **kwargs).revision() != _inputs(BASE).revision()


def test_worker_script_quotes_user_arguments() -> None:
    inputs = _inputs(
        {
            "model": {"name": "m/m"},
            "engine": {"args": ["--chat-template", "{{ x }}; rm -rf /", "--x=$(id)"]},
            "topology": {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
        }
    )
    js = render_jobset(namespace="ns", workload="w", inputs=inputs, replica=0, suspend=False)
    script = js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["containers"][0]["args"][
        0
    ]
    tokens = shlex.split(script)
    assert tokens[:3] == ["exec", "vllm", "serve"]
    assert "{{ x }}; rm -rf /" in tokens
    assert "--x=$(id)" in tokens
    # the only unquoted expansion is the node rank
    assert "$((JOB_COMPLETION_INDEX+1))" in script
    assert script.count("$((") == 1
    assert tokens[tokens.index("--node-rank") + 1] == "$((JOB_COMPLETION_INDEX+1))"
    assert "--headless" in tokens


def test_user_env_wins_by_name() -> None:
    inputs = _inputs({**BASE, "engine": {"env": [{"name": "VLLM_ENGINE_READY_TIMEOUT_S", "value": "60"}]}})
    js = render_jobset(namespace="ns", workload="w", inputs=inputs, replica=0, suspend=False)
    env = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["env"]
    values = [e.get("value") for e in env if e["name"] == "VLLM_ENGINE_READY_TIMEOUT_S"]
    assert values == ["60"]


def test_queue_precedence() -> None:
    placement = Placement(cluster="c", queue_name="cluster-q")
    assert _inputs(BASE, placement=placement).queue_name == "cluster-q"
    own = _inputs({**BASE, "scheduling": {"queueName": "own-q"}}, placement=placement)
    assert own.queue_name == "own-q"
    js = render_jobset(namespace="ns", workload="w", inputs=own, replica=0, suspend=True)
    assert js["metadata"]["labels"][keys.LABEL_KUEUE_QUEUE] == "own-q"
    assert _inputs(BASE).queue_name is None


def test_single_node_has_no_rendezvous() -> None:
    js = render_jobset(namespace="ns", workload="w", inputs=_inputs(BASE), replica=3, suspend=False)
    assert [r["name"] for r in js["spec"]["replicatedJobs"]] == ["leader"]
    args = js["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--nnodes" not in args
    assert "--node-rank" not in args
    assert js["spec"]["network"] == {"enableDNSHostnames": False}
    assert js["metadata"]["labels"][keys.LABEL_REPLICA] == "3"


def test_selector_string() -> None:
    assert selector_string("w") == "sparkrun.dev/role=leader,sparkrun.dev/workload=w"
