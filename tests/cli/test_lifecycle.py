"""``sparkrun-k8s sleep|wake|stop NAME`` as a user runs them, on workloads on the testbed's
PROCESS nodes (the vLLM engine stand-in really sleeps and wakes), with the operator running.

By default (the newcomer's flow): a workload ``sparkrun-k8s run`` created (model-only, no
``spec.manager``, sleep mode on) in a fresh namespace that is not the shim's is slept, woken and
stopped with ``-n``; the verbs run the daemon operations' executors with the kubeconfig's rights,
print their progress on stderr, and the workload's status follows (Sleeping, Ready, gone). A
workload without sleep mode is refused (exit 1, Conflict) and left as it was; a user who may
read workloads there but not patch them is refused by the apiserver (exit 5), nothing changed.

With ``--daemon``: the daemon API reached through kube-apiserver (tests/cli/aggregated.py) acts in
its own namespace: Sleeping, then Ready again, then gone; a workload that does not exist is exit
4, one another manager owns is refused by the daemon (exit 1, its typed error), a wake with
``--no-wait`` returns with the job's id.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.cli.aggregated import Aggregated, aggregated_daemon
from tests.cli.conftest import SPARKRUN_K8S
from tests.cli.test_run import ON_PROCESS_NODES as RUN_ON_PROCESS_NODES
from tests.operator.conftest import condition, netns_network, wait_condition
from tests.operator.test_workload_process import ON_PROCESS_NODES
from tests.shim.harness import service_account_token

pytestmark = pytest.mark.testbed
__all__ = ["netns_network"]  # the fixture, for this module's tests

Run = Callable[..., subprocess.CompletedProcess[str]]
API = "sparkrun.dev/v1alpha1"
REPO = Path(__file__).resolve().parents[2]
RECIPE = "lc-recipe-small"
WORKLOAD = "lc-chat"
SERVED = "lc-served"


@pytest.fixture(scope="module")
def agg(
    testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Aggregated]:
    with aggregated_daemon(testbed, kube, tmp_path_factory.mktemp("lifecycle-cli")) as running:
        yield running


def _recipe(namespace: str) -> dict[str, Any]:
    recipe: dict[str, Any] = yaml.safe_load((REPO / "examples" / "recipe.yaml").read_text())
    recipe["metadata"] = {"name": RECIPE, "namespace": namespace}
    recipe["spec"]["model"] = "Qwen/Qwen3-0.6B"
    recipe["spec"]["defaults"].update({"served_model_name": SERVED, "max_model_len": 4096})
    return recipe


def _workload(namespace: str, name: str, manager: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "recipe": {"name": RECIPE},
            "engine": {"enableSleepMode": True},
            "scheduling": ON_PROCESS_NODES,
            "manager": manager,
        },
    }


@pytest.mark.usefixtures("netns_network")
def test_sleep_wake_stop(agg: Aggregated, kube: KubeApi, sparkrun_k8s: Run) -> None:
    namespace = agg.namespace
    kube.apply(_recipe(namespace))
    kube.apply(_workload(namespace, WORKLOAD, "daemon"))  # NB: the admin's manager (no SA: the default)
    obj = wait_condition(kube, namespace, WORKLOAD, "Ready", timeout=180)
    url = obj["status"]["endpoints"][0]["url"]

    asleep = sparkrun_k8s("sleep", WORKLOAD, "--daemon", timeout=240)
    assert asleep.returncode == 0, (asleep.stdout, asleep.stderr)
    assert asleep.stdout.startswith(f"{WORKLOAD}: sleeping (level 1) in ")
    found = kube.get(API, "InferenceWorkload", WORKLOAD, namespace=namespace)
    assert condition(found, "Sleeping")["status"] == "True"  # type: ignore[index]
    assert found["status"]["phase"] == "Sleeping"  # type: ignore[index]
    assert httpx.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": True}

    awake = sparkrun_k8s("wake", WORKLOAD, "--daemon", "-o", "json", timeout=240)
    assert awake.returncode == 0, (awake.stdout, awake.stderr)
    report = json.loads(awake.stdout)
    assert report["operation"] == "workloads.wake"
    assert report["state"] == "ready"
    assert report["result"]["state"] == "ready"
    found = kube.get(API, "InferenceWorkload", WORKLOAD, namespace=namespace)
    assert condition(found, "Ready")["status"] == "True"  # type: ignore[index]
    assert condition(found, "Sleeping")["status"] == "False"  # type: ignore[index]
    assert httpx.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": False}

    # by its daemon workload id this time
    workload_id = report["workload_id"]
    stopped = sparkrun_k8s("stop", workload_id, "--daemon", timeout=240)
    assert stopped.returncode == 0, (stopped.stdout, stopped.stderr)
    assert stopped.stdout.startswith(f"{WORKLOAD}: stopped in ")
    assert kube.get(API, "InferenceWorkload", WORKLOAD, namespace=namespace) is None

    missing = sparkrun_k8s("sleep", WORKLOAD, "--daemon")
    assert missing.returncode == 4, (missing.stdout, missing.stderr)
    assert "no workload lc-chat" in missing.stderr


def test_refusals(agg: Aggregated, kube: KubeApi, sparkrun_k8s: Run) -> None:
    namespace = agg.namespace
    kube.apply(_recipe(namespace))
    # another manager's workload (it need not run: the daemon checks ownership first)
    kube.apply(_workload(namespace, "lc-theirs", "someone-else"))
    try:
        refused = sparkrun_k8s("stop", "lc-theirs", "--daemon", timeout=120)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert "Conflict" in refused.stderr
        assert "someone-else" in refused.stderr
        assert kube.get(API, "InferenceWorkload", "lc-theirs", namespace=namespace) is not None
        # the reader may not operate: the daemon refuses the submission (403, exit 5)
        reader = {"KUBECONFIG": str(agg.exec_kubeconfig("reader"))}
        denied = sparkrun_k8s("wake", "lc-theirs", "--daemon", env=reader)
        assert denied.returncode == 5, (denied.stdout, denied.stderr)
        # --no-wait: the job's id, at once
        submitted = sparkrun_k8s("wake", "lc-theirs", "--daemon", "--no-wait", "-o", "json")
        assert submitted.returncode == 0, (submitted.stdout, submitted.stderr)
        assert json.loads(submitted.stdout)["state"] == "submitted"
        assert json.loads(submitted.stdout)["job_id"]
    finally:
        kube.delete(API, "InferenceWorkload", "lc-theirs", namespace=namespace)


# --- the default path: the executors in-process, with the kubeconfig's rights (issue 33, H3b) ---

LOCAL = "lcl-w"  # NB: a workload named unlike its model, its served name and any recipe
LOCAL_SERVED = "lcl-served"
READER = "lcl-reader"
RBAC = "rbac.authorization.k8s.io/v1"


def _reader_kubeconfig(testbed: Testbed, kube: KubeApi, namespace: str, directory: Path) -> Path:
    """A kubeconfig of a ServiceAccount that may read InferenceWorkloads in ``namespace``, not
    change them (a Role, a RoleBinding, a token the TokenRequest API mints)."""
    meta = {"name": READER, "namespace": namespace}
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta})
    rule = {
        "apiGroups": ["sparkrun.dev"],
        "resources": ["inferenceworkloads"],
        "verbs": ["get", "list", "watch"],
    }
    kube.create({"apiVersion": RBAC, "kind": "Role", "metadata": meta, "rules": [rule]})
    kube.create(
        {
            "apiVersion": RBAC,
            "kind": "RoleBinding",
            "metadata": meta,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": READER},
            "subjects": [{"kind": "ServiceAccount", "name": READER, "namespace": namespace}],
        }
    )
    cluster = {
        "server": testbed.server,
        "certificate-authority-data": base64.b64encode(testbed.ca_pem).decode(),
    }
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": cluster}],
        "users": [{"name": READER, "user": {"token": service_account_token(kube, namespace, READER)}}],
        "contexts": [
            {"name": READER, "context": {"cluster": "testbed", "user": READER, "namespace": namespace}}
        ],
        "current-context": READER,
    }
    path = directory / "kubeconfig-reader"
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def _state(kube: KubeApi, namespace: str, name: str) -> Any:
    found = kube.get(API, "InferenceWorkload", name, namespace=namespace)
    assert found is not None
    return found["spec"].get("state")


@pytest.mark.usefixtures("netns_network")
def test_a_workload_run_created_sleeps_wakes_and_stops_in_its_own_namespace(
    kube: KubeApi, namespace: str, operator_factory: Callable[..., Any], sparkrun_k8s: Run
) -> None:
    operator_factory(namespace)
    model = ("Qwen/Qwen3-0.6B", "--name", LOCAL, "--served-name", LOCAL_SERVED, "-n", namespace)
    sleepy = ("--set", "engine.enableSleepMode=true", *RUN_ON_PROCESS_NODES)
    started = sparkrun_k8s("run", *model, *sleepy, "--timeout", "240", timeout=300)
    assert started.returncode == 0, (started.stdout, started.stderr)
    obj = kube.get(API, "InferenceWorkload", LOCAL, namespace=namespace)
    assert obj is not None
    assert "manager" not in obj["spec"]
    assert "recipe" not in obj["spec"]
    url = obj["status"]["endpoints"][0]["url"]

    asleep = sparkrun_k8s("sleep", LOCAL, "-n", namespace, timeout=240)
    assert asleep.returncode == 0, (asleep.stdout, asleep.stderr)
    assert asleep.stdout.startswith(f"{LOCAL}: sleeping (level 1) in "), asleep.stdout
    assert f"InferenceWorkload {LOCAL}: Sleeping" in asleep.stderr  # the executor's progress
    found = kube.get(API, "InferenceWorkload", LOCAL, namespace=namespace)
    assert condition(found, "Sleeping")["status"] == "True"  # type: ignore[index]
    assert httpx.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": True}
    writers = [f for f in found["metadata"]["managedFields"] if f.get("manager") == "sparkrun-k8s"]  # type: ignore[index]
    assert any('"f:state"' in json.dumps(f.get("fieldsV1")) for f in writers), writers

    workload_id = found["status"]["workloadId"]  # type: ignore[index]
    awake = sparkrun_k8s("wake", workload_id, "-n", namespace, "-o", "json", timeout=240)  # by its id
    assert awake.returncode == 0, (awake.stdout, awake.stderr)
    report = json.loads(awake.stdout)
    assert (report["workload"], report["namespace"]) == (LOCAL, namespace)
    assert (report["operation"], report["state"]) == ("workloads.wake", "ready")
    assert "job_id" not in report  # no DaemonJob: this process ran it
    found = kube.get(API, "InferenceWorkload", LOCAL, namespace=namespace)
    assert condition(found, "Ready")["status"] == "True"  # type: ignore[index]
    assert condition(found, "Sleeping")["status"] == "False"  # type: ignore[index]
    assert httpx.get(f"{url}/is_sleeping", timeout=10).json() == {"is_sleeping": False}

    stopped = sparkrun_k8s("stop", LOCAL, "-n", namespace, timeout=240)
    assert stopped.returncode == 0, (stopped.stdout, stopped.stderr)
    assert stopped.stdout.startswith(f"{LOCAL}: stopped in "), stopped.stdout
    assert kube.get(API, "InferenceWorkload", LOCAL, namespace=namespace) is None
    missing = sparkrun_k8s("wake", LOCAL, "-n", namespace)
    assert missing.returncode == 4, (missing.stdout, missing.stderr)
    assert f"InferenceWorkload {LOCAL} not found in namespace {namespace}" in missing.stderr


def test_refusals_on_the_default_path(
    testbed: Testbed, kube: KubeApi, crds: list[str], namespace: str, sparkrun_k8s: Run, tmp_path: Path
) -> None:
    # no operator: the refusals come before any wait (and a wait never ends)
    plain = {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": "lcl-plain", "namespace": namespace},
    }
    kube.apply({**plain, "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}}})
    no_sleep = sparkrun_k8s("sleep", "lcl-plain", "-n", namespace)
    assert no_sleep.returncode == 1, (no_sleep.stdout, no_sleep.stderr)
    assert "Conflict" in no_sleep.stderr
    assert "enableSleepMode" in no_sleep.stderr
    assert _state(kube, namespace, "lcl-plain") == "Running"  # the default, unchanged

    sleepy = {**plain, "metadata": {"name": "lcl-sleepy", "namespace": namespace}}
    kube.apply(
        {**sleepy, "spec": {"model": {"name": "Qwen/Qwen3-0.6B"}, "engine": {"enableSleepMode": True}}}
    )
    reader = {"KUBECONFIG": str(_reader_kubeconfig(testbed, kube, namespace, tmp_path))}
    denied = sparkrun_k8s("sleep", "lcl-sleepy", env=reader)  # NB: the reader's context names the namespace
    assert denied.returncode == 5, (denied.stdout, denied.stderr)
    assert "forbidden" in denied.stderr.lower()
    assert _state(kube, namespace, "lcl-sleepy") == "Running"

    # no operator to make it sleep: --timeout ends the wait, the change stays written
    waited = sparkrun_k8s("sleep", "lcl-sleepy", "-n", namespace, "--timeout", "2")
    assert waited.returncode == 3, (waited.stdout, waited.stderr)
    assert "not done after 2 s; the change is made and goes on" in waited.stderr
    assert _state(kube, namespace, "lcl-sleepy") == "Sleeping"
    # Ctrl-C while it waits: exit 130, and it says the change stays
    interrupted = subprocess.Popen(
        [SPARKRUN_K8S, "wake", "lcl-sleepy", "-n", namespace],
        env={**os.environ, "KUBECONFIG": str(testbed.kubeconfig), "NO_COLOR": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        kube.wait(
            lambda: _state(kube, namespace, "lcl-sleepy") == "Running", timeout=30, what="the wake's write"
        )
        interrupted.send_signal(signal.SIGINT)
        _out, err = interrupted.communicate(timeout=30)
    finally:
        interrupted.kill()
    assert interrupted.returncode == 130, err
    assert "workloads.wake lcl-sleepy: the change is made and goes on" in err
    sparkrun_k8s("sleep", "lcl-sleepy", "-n", namespace, "--no-wait")

    # --no-wait returns once the write returned, even with no status to watch
    woken = sparkrun_k8s("wake", "lcl-sleepy", "-n", namespace, "--no-wait", timeout=30)
    assert woken.returncode == 0, (woken.stdout, woken.stderr)
    assert woken.stdout.startswith("lcl-sleepy: wake requested, not waiting")
    assert _state(kube, namespace, "lcl-sleepy") == "Running"

    usage = sparkrun_k8s("sleep", "lcl-sleepy", "-n", namespace, "--daemon")
    assert usage.returncode == 2, usage.stderr
    assert "-n goes without --daemon" in usage.stderr
    usage = sparkrun_k8s("sleep", "lcl-sleepy", "-n", namespace, "--key", "k1")
    assert usage.returncode == 2, usage.stderr
    assert "--key" in usage.stderr

    # --no-wait: the delete is made, the command returns at once
    gone = sparkrun_k8s("stop", "lcl-plain", "-n", namespace, "--no-wait")
    assert gone.returncode == 0, (gone.stdout, gone.stderr)
    assert gone.stdout == f"lcl-plain: stop requested, not waiting (sparkrun-k8s status -n {namespace})\n"
    kube.wait(
        lambda: kube.get(API, "InferenceWorkload", "lcl-plain", namespace=namespace) is None,
        timeout=30,
        what="lcl-plain gone",
    )
