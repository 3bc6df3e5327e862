"""Issue 26, part 1: the gateway knows who is calling, against the testbed's real kube-apiserver.

Two tenant namespaces, each with a ServiceAccount whose token the real TokenRequest API mints and
a RoleBinding to the chart's ``sparkrun-inference`` ClusterRole (rendered from the chart by
``helm template``), and each with InferenceWorkloads: one Running, routed to an engine stand-in
on loopback through an EndpointSlice (as the operator and the EndpointSlice controller would
leave it), one Stopped. The gateway runs as ``sparkrun-k8s gateway --kubernetes`` in each
authentication mode (in ``kubernetes`` mode as its own ServiceAccount with exactly the chart's
``templates/gateway/rbac.yaml`` for that mode, so the chart's grants are proven to suffice;
elsewhere as the testbed's administrator), and tenant A tries everything against tenant B:

- ``kubernetes``: A lists only A's models, chats to A's, gets 404 for B's, cannot wake B's
  Stopped workload (its ``spec.state`` stays ``Stopped``; B's own request does wake it), and
  cannot cancel B's request by its id (B can);
- ``keys``: the same matrix with a key Secret in each namespace;
- ``none``: one caller, as documented: A lists and reaches B's models, and may cancel B's request.

The chat and list calls go through the real ``openai`` client.
"""

from __future__ import annotations

import base64
import functools
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import yaml

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.deploy.chart import CHART, require_helm
from tests.engine.conftest import EngineProc, free_port
from tests.shim.harness import retry, service_account_token

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]

IW = "sparkrun.dev/v1alpha1"
BODY = [{"role": "user", "content": "hi"}]


@dataclass
class Tenant:
    namespace: str
    token: str = ""
    key: str = ""
    running: str = ""  # the served name of its Running workload
    stopped: str = ""  # the served name of its Stopped workload


@dataclass
class Tenants:
    a: Tenant
    b: Tenant
    kube: KubeApi


def _inference_role(suffix: str) -> dict[str, Any]:
    """The chart's ``sparkrun-inference`` ClusterRole, as ``helm template`` renders it, under a
    name of this module's own (``sparkrun-inference-<suffix>``): the chart's name is fixed and
    cluster-wide, and a helm install of the chart elsewhere in the suite must not meet a copy
    it does not own."""
    argv = [require_helm(), "template", "roles", str(CHART), "--show-only", "templates/inference-roles.yaml"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    (role,) = [
        doc for doc in yaml.safe_load_all(out) if doc and doc["metadata"]["name"] == "sparkrun-inference"
    ]
    role["metadata"]["name"] = f"sparkrun-inference-{suffix}"
    return dict(role)


def _workload(namespace: str, name: str, served: str, state: str) -> dict[str, Any]:
    return {
        "apiVersion": IW,
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": {"name": "org/m", "servedName": served}, "state": state},
    }


def _route(kube: KubeApi, namespace: str, name: str, engine: HostEngine) -> None:
    """A selector-less Service and a ready EndpointSlice pointing at ``engine``."""
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"ports": [{"name": "http", "port": 8000}]},
    }
    kube.create(service)
    kube.create(
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": f"{name}-manual",
                "namespace": namespace,
                "labels": {
                    "kubernetes.io/service-name": name,
                    "sparkrun.dev/workload": name,
                    "endpointslice.kubernetes.io/managed-by": "sparkrun-tests",
                },
            },
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": engine.port, "protocol": "TCP"}],
            "endpoints": [{"addresses": [engine.host], "conditions": {"ready": True}}],
        }
    )


def _tenant(kube: KubeApi, label: str, suffix: str, engine: HostEngine) -> Tenant:
    ns = f"t-auth-{label}-{suffix}"
    tenant = Tenant(ns, running=f"model-{label}-{suffix}", stopped=f"stopped-{label}-{suffix}")
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    kube.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "app", "namespace": ns}})
    kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "app-inference", "namespace": ns},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": f"sparkrun-inference-{suffix}",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "app", "namespace": ns}],
        }
    )
    tenant.token = retry(lambda: service_account_token(kube, ns, "app"))
    tenant.key = f"sk-{label}-{secrets.token_hex(16)}"
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {
                "name": "gateway-key",
                "namespace": ns,
                "labels": {"sparkrun.dev/gateway-key": "true"},
            },
            "data": {"key": base64.b64encode(tenant.key.encode()).decode()},
        }
    )
    kube.create(_workload(ns, "serve", tenant.running, "Running"))
    kube.create(_workload(ns, "sleepy", tenant.stopped, "Stopped"))
    _route(kube, ns, "serve", engine)
    return tenant


def _host_address() -> str:
    """A non-loopback IPv4 address of this machine (an EndpointSlice may not hold a loopback one).
    The UDP ``connect`` only picks the outgoing interface; no packet is sent."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))
        address = str(probe.getsockname()[0])
    assert not address.startswith("127."), "no non-loopback IPv4 address to route the engines by"
    return address


@dataclass
class HostEngine(EngineProc):
    """An engine stand-in listening on ``host`` only."""

    host: str = "127.0.0.1"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"


@pytest.fixture(scope="module")
def engines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], HostEngine]]:
    """Slow engine stand-ins (200 tokens, 50 ms apart) on this machine's own address."""
    workdir = tmp_path_factory.mktemp("engines")
    host = _host_address()
    started: list[HostEngine] = []

    def start(served: str) -> HostEngine:
        port = free_port()
        log = workdir / f"{served}.log"
        env = {**os.environ, "SPARKRUN_ENGINE_TOKEN_SECONDS": "0.05", "SPARKRUN_ENGINE_OUTPUT_TOKENS": "200"}
        argv = [
            sys.executable,
            "-m",
            "sparkrun_testbed.engine",
            "serve",
            "org/m",
            "--served-model-name",
            served,
        ]
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [*argv, "--host", host, "--port", str(port)], env=env, stdout=out, stderr=out
            )
        engine = HostEngine(proc, port, log, host=host)
        started.append(engine)
        engine.wait_healthy()
        return engine

    yield start
    for engine in started:
        engine.proc.terminate()
        try:
            engine.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            engine.proc.kill()
            engine.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def tenants(kube: KubeApi, engines: Callable[[str], HostEngine]) -> Iterator[Tenants]:
    suffix = secrets.token_hex(3)
    engine_a, engine_b = engines(f"model-a-{suffix}"), engines(f"model-b-{suffix}")
    role = _inference_role(suffix)
    kube.apply(role)
    made = Tenants(_tenant(kube, "a", suffix, engine_a), _tenant(kube, "b", suffix, engine_b), kube)
    yield made
    for tenant in (made.a, made.b):
        retry(functools.partial(kube.delete, "v1", "Namespace", tenant.namespace))
    kube.delete(role["apiVersion"], "ClusterRole", role["metadata"]["name"])


class GatewayProc:
    """``python -m sparkrun_operator.gateway --kubernetes`` as a child process."""

    def __init__(self, kubeconfig: Path, log: Path, *args: str) -> None:
        self.port = free_port()
        self.log = log
        argv = [
            sys.executable,
            "-m",
            "sparkrun_operator.gateway",
            "--kubernetes",
            "--kubeconfig",
            str(kubeconfig),
        ]
        argv += ["--host", "127.0.0.1", "--port", str(self.port), "--wake-timeout", "2"]
        argv += ["--inference-pools", "off", *args]  # NB: whatever CRD an earlier test installed
        with log.open("ab") as handle:
            self.proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=dict(os.environ))
        self.url = f"http://127.0.0.1:{self.port}"

    def wait_routes(self, names: set[str], headers: dict[str, str], timeout: float = 60.0) -> None:
        """Until the gateway answers and routes ``names`` (the watches synced)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")[-3000:]
            try:
                listed = httpx.get(f"{self.url}/v1/models", headers=headers, timeout=5)
                if listed.status_code == 200 and names <= {m["id"] for m in listed.json()["data"]}:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"gateway never routed {names}: " + self.log.read_text(errors="replace")[-3000:])

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)


@pytest.fixture(scope="module")
def chart_gateway(
    testbed: Testbed, kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """A kubeconfig of the gateway's ServiceAccount with the chart's gateway RBAC for
    ``gateway.auth.mode=kubernetes`` (rendered by ``helm template`` into a namespace of its own)."""
    namespace = f"t-auth-gw-{secrets.token_hex(3)}"
    release = namespace.removeprefix("t-auth-")
    argv = [require_helm(), "template", release, str(CHART), "--namespace", namespace]
    argv += ["--show-only", "templates/gateway/rbac.yaml", "--set", "gateway.auth.mode=kubernetes"]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    docs = [doc for doc in yaml.safe_load_all(out) if doc]
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for doc in docs:
        kube.apply(doc, namespace=namespace)
    (account,) = [d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"]
    token = retry(lambda: service_account_token(kube, namespace, account))
    path = tmp_path_factory.mktemp("gateway") / "kubeconfig"
    path.write_text(yaml.safe_dump(_kubeconfig(testbed, token)))
    path.chmod(0o600)
    yield path
    for doc in docs:
        if doc["kind"].startswith("Cluster"):
            retry(functools.partial(kube.delete, doc["apiVersion"], doc["kind"], doc["metadata"]["name"]))
    retry(functools.partial(kube.delete, "v1", "Namespace", namespace))


def _kubeconfig(testbed: Testbed, token: str) -> dict[str, Any]:
    cluster = {
        "server": testbed.server,
        "certificate-authority-data": base64.b64encode(testbed.ca_pem).decode(),
    }
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "testbed", "cluster": cluster}],
        "users": [{"name": "gateway", "user": {"token": token}}],
        "contexts": [{"name": "gateway", "context": {"cluster": "testbed", "user": "gateway"}}],
        "current-context": "gateway",
    }


@pytest.fixture
def start_gateway(testbed: Testbed, tmp_path: Path) -> Iterator[Callable[..., GatewayProc]]:
    started: list[GatewayProc] = []

    def start(*args: str, kubeconfig: Path | None = None) -> GatewayProc:
        config = kubeconfig or testbed.kubeconfig
        gw = GatewayProc(config, tmp_path / f"gateway-{len(started)}.log", *args)
        started.append(gw)
        return gw

    yield start
    for gw in started:
        gw.stop()


def _client(gw: GatewayProc, credential: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{gw.url}/v1", api_key=credential, max_retries=0, timeout=30)


def _state(kube: KubeApi, tenant: Tenant) -> str:
    found = kube.get(IW, "InferenceWorkload", "sleepy", namespace=tenant.namespace)
    assert found is not None
    return str(found["spec"]["state"])


def _cancel_matrix(gw: GatewayProc, model: str, owner: str, stranger: str, *, stranger_may: bool) -> None:
    """``owner`` streams a slow answer of ``model`` with id ``rid``; ``stranger`` tries to cancel
    it (404 unless ``stranger_may``), then the owner does (200, the stream ends cancelled)."""
    rid = f"rid-{secrets.token_hex(4)}"
    body = {"model": model, "messages": BODY, "max_tokens": 200, "stream": True}
    auth = {"authorization": f"Bearer {owner}"} if owner else {}
    other = {"authorization": f"Bearer {stranger}"} if stranger else {}
    with httpx.stream(
        "POST", f"{gw.url}/v1/chat/completions", json=body, headers={**auth, "x-request-id": rid}, timeout=30
    ) as stream:
        assert stream.status_code == 200
        lines = stream.iter_lines()
        assert next(lines) == f": command_id {rid}"
        tried = httpx.post(f"{gw.url}/v1/cancel/{rid}", headers=other, timeout=10)
        if stranger_may:
            assert tried.status_code == 200
        else:
            assert tried.status_code == 404
            assert httpx.post(f"{gw.url}/v1/cancel/{rid}", headers=auth, timeout=10).status_code == 200
        events = [line for line in lines if line.startswith("data: ")]
    assert any("cancelled" in line for line in events)


def _isolated_matrix(gw: GatewayProc, tenants: Tenants, cred_a: str, cred_b: str) -> None:
    a, b = tenants.a, tenants.b
    gw.wait_routes({a.running, a.stopped}, {"authorization": f"Bearer {cred_a}"})
    client_a, client_b = _client(gw, cred_a), _client(gw, cred_b)
    listed_a = {m.id for m in client_a.models.list().data}
    assert {a.running, a.stopped} <= listed_a
    assert not {b.running, b.stopped} & listed_a
    assert {m.id for m in client_b.models.list().data} >= {b.running, b.stopped}
    answer = client_a.chat.completions.create(model=a.running, messages=BODY, max_tokens=2)  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    for model in (b.running, b.stopped):
        with pytest.raises(openai.NotFoundError, match="No instance found"):
            client_a.chat.completions.create(model=model, messages=BODY, max_tokens=2)  # type: ignore[arg-type]
    tags = httpx.get(f"{gw.url}/api/tags", headers={"authorization": f"Bearer {cred_a}"}).json()
    assert b.running not in {m["name"] for m in tags["models"]}
    # A's requests woke nothing of B's: B's workload stays Stopped (watched for a second).
    until = time.monotonic() + 1.0
    while time.monotonic() < until:
        assert _state(tenants.kube, b) == "Stopped"
        time.sleep(0.1)
    with pytest.raises(openai.AuthenticationError):
        _client(gw, "not-a-credential").models.list()
    # B's own request wakes B's workload (503 while it wakes: no operator here to finish it).
    with pytest.raises(openai.InternalServerError):
        client_b.chat.completions.create(model=b.stopped, messages=BODY, max_tokens=2)  # type: ignore[arg-type]
    assert _state(tenants.kube, b) == "Running"
    tenants.kube.apply({**_workload(b.namespace, "sleepy", b.stopped, "Stopped")})
    _cancel_matrix(gw, b.running, cred_b, cred_a, stranger_may=False)


def test_kubernetes_tokens_see_and_use_only_their_namespace(
    tenants: Tenants, start_gateway: Callable[..., GatewayProc], chart_gateway: Path
) -> None:
    gw = start_gateway("--auth=kubernetes", kubeconfig=chart_gateway)
    _isolated_matrix(gw, tenants, tenants.a.token, tenants.b.token)
    # /metrics on the serving port needs `get` on the non-resource URL /metrics, which tenants lack.
    metrics = httpx.get(f"{gw.url}/metrics", headers={"authorization": f"Bearer {tenants.a.token}"})
    assert metrics.status_code == 403


def test_api_keys_see_and_use_only_their_namespace(
    tenants: Tenants, start_gateway: Callable[..., GatewayProc]
) -> None:
    gw = start_gateway("--auth=keys", "--secret-keys")
    _isolated_matrix(gw, tenants, tenants.a.key, tenants.b.key)


def test_without_authentication_every_caller_is_one_caller(
    tenants: Tenants, start_gateway: Callable[..., GatewayProc]
) -> None:
    a, b = tenants.a, tenants.b
    gw = start_gateway("--auth=none")
    gw.wait_routes({a.running, b.running}, {})
    client = _client(gw, "anything")
    listed = {m.id for m in client.models.list().data}
    assert {a.running, a.stopped, b.running, b.stopped} <= listed  # documented: one team
    answer = client.chat.completions.create(model=b.running, messages=BODY, max_tokens=2)  # type: ignore[arg-type]
    assert answer.choices[0].message.content
    _cancel_matrix(gw, b.running, "", "", stranger_may=True)


def test_an_audience_bound_gateway_takes_only_tokens_minted_for_it(
    tenants: Tenants, start_gateway: Callable[..., GatewayProc]
) -> None:
    a = tenants.a
    gw = start_gateway("--auth=kubernetes", "--auth-audience", "sparkrun-gateway")
    path = f"/api/v1/namespaces/{a.namespace}/serviceaccounts/app/token"
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {"audiences": ["sparkrun-gateway"], "expirationSeconds": 3600},
    }
    minted = str(tenants.kube.request("POST", path, json=request).json()["status"]["token"])
    gw.wait_routes({a.running}, {"authorization": f"Bearer {minted}"})
    with pytest.raises(openai.AuthenticationError):
        _client(gw, a.token).models.list()  # the apiserver's own audience: not for the gateway
    assert a.running in {m.id for m in _client(gw, minted).models.list().data}
