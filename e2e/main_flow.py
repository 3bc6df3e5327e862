"""The main flow a user goes through, against a target cluster (:class:`~e2e.target.Target`).

Run by ``e2e/test_main_flow.py`` (the local demo testbed or KUBECONFIG) and by
``e2e/test_helm_pods.py`` (the chart installed, its components running as pods).

``kubectl apply`` an InferenceWorkload -> ``kubectl wait`` for Ready -> a chat completion through
the gateway with the real ``openai`` client (by the workload's served name) -> the daemon API
lists it with the project's client -> ``kubectl delete`` -> its JobSets are gone and the gateway
no longer knows the name. Every name carries a random suffix, so the flow can run on a shared
cluster next to other workloads.
"""

from __future__ import annotations

import json
import secrets
import ssl
import time

import yaml
from openai import DefaultHttpxClient, NotFoundError, OpenAI

from e2e.target import Target
from sparkrun_operator.client import Client

READY_TIMEOUT = 600


def resource(kind: str, name: str, spec: dict[str, object]) -> dict[str, object]:
    """A ``sparkrun.dev/v1alpha1`` object of ``kind`` (its namespace: the one applied to)."""
    return {"apiVersion": "sparkrun.dev/v1alpha1", "kind": kind, "metadata": {"name": name}, "spec": spec}


def _workload(name: str, served: str, target: Target) -> dict[str, object]:
    engine: dict[str, object] = {"maxModelLen": 4096}
    if target.image:
        engine["image"] = target.image
    spec: dict[str, object] = {
        "model": {"name": "Qwen/Qwen3-0.6B", "servedName": served},
        "engine": engine,
        "topology": {"nodes": 1, "gpusPerNode": 1, "tensorParallel": 1},
        "replicas": 1,
    }
    if target.scheduling:
        spec["scheduling"] = target.scheduling
    return resource("InferenceWorkload", name, spec)


def _openai(target: Target, timeout: float) -> OpenAI:
    """The ``openai`` client at the target's gateway (through kube-apiserver's Service proxy when
    the target says so: its token authenticates there, its CA verifies the apiserver)."""
    trust = ssl.create_default_context(cafile=target.gateway_ca) if target.gateway_ca else True
    http = DefaultHttpxClient(verify=trust, timeout=timeout)
    return OpenAI(
        base_url=f"{target.gateway_url}/v1",
        api_key=target.gateway_token or "e2e",
        timeout=timeout,
        max_retries=0,
        http_client=http,
    )


def _wait(predicate: object, *, timeout: float, what: str) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} within {timeout:.0f} s")
        time.sleep(1.0)


def apply_ready_chat_list_delete(target: Target) -> None:
    """The flow (see the module docs); raises AssertionError naming the step that failed."""
    suffix = secrets.token_hex(3)
    name, served = f"e2e-{suffix}", f"e2e-model-{suffix}"
    ns = target.namespace
    manifest = yaml.safe_dump(_workload(name, served, target))
    target.kubectl("apply", "--server-side", "-n", ns, "-f", "-", stdin=manifest)
    try:
        target.kubectl("wait", "-n", ns, "--for=condition=Ready", f"iw/{name}", f"--timeout={READY_TIMEOUT}s")
        status = json.loads(target.kubectl("get", "-n", ns, f"iw/{name}", "-o", "json"))["status"]
        assert status["readyReplicas"] == 1
        assert status["workloadId"].startswith("sparkrun_")

        client = _openai(target, 60.0)
        _wait(
            lambda: served in {m.id for m in client.models.list().data},
            timeout=30,
            what=f"the gateway did not list {served}",
        )
        reply = client.chat.completions.create(
            model=served, messages=[{"role": "user", "content": "hello from e2e"}], max_tokens=8
        )
        assert reply.choices[0].message.content
        assert reply.usage is not None
        assert reply.usage.completion_tokens > 0
        client.close()  # NB: its pooled sockets otherwise surface as a ResourceWarning (an error here)

        with Client(target.daemon_url, token=target.token, ca_cert=target.daemon_ca) as daemon:
            listed = daemon.call("workloads.list", {})
        workloads = listed.get("workloads", listed) if isinstance(listed, dict) else listed
        assert status["workloadId"] in {w.get("workload_id") for w in workloads}
    finally:
        target.kubectl("delete", "-n", ns, f"iw/{name}", "--wait=true", "--timeout=120s", check=False)

    selector = f"sparkrun.dev/workload={name}"

    def jobsets() -> list[object]:
        found = json.loads(target.kubectl("get", "jobsets", "-n", ns, "-l", selector, "-o", "json"))
        return list(found["items"])

    _wait(
        lambda: not jobsets(),
        timeout=120,
        what=f"JobSets of {name} were not deleted",
    )
    client = _openai(target, 30.0)

    def unrouted() -> bool:
        try:
            client.chat.completions.create(
                model=served, messages=[{"role": "user", "content": "still there?"}], max_tokens=1
            )
        except NotFoundError:
            return True
        return False

    _wait(unrouted, timeout=30, what=f"the gateway still routes {served} after the delete")
    client.close()
