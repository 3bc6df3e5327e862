"""Issue 15, isolation between tenants, on loopback: keys limited to a namespace see and use only
its models, ``/metrics`` needs an administrator key (or the key-less ``--metrics-port``
listener), and ``/v1/cancel/{id}`` reaches only the caller's own requests."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import httpx
import uvicorn

from sparkrun_operator.gateway.auth import Grant, MergedKeySource, StaticKeySource
from sparkrun_operator.gateway.server import MetricsListener, build, listen, uvicorn_config
from tests.engine.conftest import free_port

from .conftest import Engines, StartGateway, workload, write_routes

ADMIN = Grant("admin", None)


def _keys() -> StaticKeySource:
    return StaticKeySource(
        {
            "sk-admin": ADMIN,
            "sk-ml": Grant("ml", None, namespace="ml"),
            "sk-ml-2": Grant("ml-2", None, namespace="ml"),
            "sk-other": Grant("other", None, namespace="other"),
        }
    )


def _auth(key: str) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"}


def test_a_namespace_key_sees_and_uses_only_its_namespace(
    engines: Engines, start_gateway: StartGateway
) -> None:
    chat = engines.chat_workload()  # namespace ml
    embed = {**engines.embed_workload(), "namespace": "other"}
    gw = start_gateway([chat, embed], keys=_keys())
    listed = httpx.get(f"{gw.url}/v1/models", headers=_auth("sk-ml")).json()
    assert sorted(m["id"] for m in listed["data"]) == ["chat", "chat-model"]
    tags = httpx.get(f"{gw.url}/api/tags", headers=_auth("sk-other")).json()
    assert [m["name"] for m in tags["models"]] == ["embed-model"]
    ps = httpx.get(f"{gw.url}/api/ps", headers=_auth("sk-other")).json()
    assert all(m["name"] == "embed-model" for m in ps["models"])
    everything = httpx.get(f"{gw.url}/v1/models", headers=_auth("sk-admin")).json()
    assert len(everything["data"]) == 3
    assert httpx.get(f"{gw.url}/v1/models").status_code == 401
    # Another namespace's model is absent for the key (404, as if unknown).
    body = {"model": "embed-model", "input": "x"}
    assert httpx.post(f"{gw.url}/v1/embeddings", json=body, headers=_auth("sk-ml")).status_code == 404
    assert httpx.post(f"{gw.url}/v1/embeddings", json=body, headers=_auth("sk-other")).status_code == 200
    show = httpx.post(f"{gw.url}/api/show", json={"name": "chat"}, headers=_auth("sk-other"))
    assert show.status_code == 404


def test_metrics_need_an_administrator_key(engines: Engines, start_gateway: StartGateway) -> None:
    gw = start_gateway([engines.chat_workload()], keys=_keys())
    assert httpx.get(f"{gw.url}/metrics").status_code == 401
    assert httpx.get(f"{gw.url}/metrics", headers=_auth("sk-ml")).status_code == 403
    ok = httpx.get(f"{gw.url}/metrics", headers=_auth("sk-admin"))
    assert ok.status_code == 200
    assert "sparkrun_gateway_" in ok.text
    for path in ("/health", "/healthz", "/readyz"):  # probes stay public
        assert httpx.get(f"{gw.url}{path}").status_code == 200


def test_the_metrics_port_serves_metrics_without_a_key(tmp_path: Path, engines: Engines) -> None:
    routes, keys = tmp_path / "routes.json", tmp_path / "keys.yaml"
    write_routes(routes, [engines.chat_workload()])
    keys.write_text("keys:\n  - {key: sk-ml, namespace: ml}\n")
    port, metrics_port = free_port(), free_port()
    argv = ["--routes", str(routes), "--keys", str(keys), "--metrics-port", str(metrics_port)]
    gateway, ns = build([*argv, "--host", "127.0.0.1", "--port", str(port)])
    app = MetricsListener(gateway, ns.metrics_port)
    server = uvicorn.Server(uvicorn_config(app, host="127.0.0.1", port=port, log_level="warning"))
    sockets = [listen("127.0.0.1", port), listen("127.0.0.1", metrics_port)]
    thread = threading.Thread(target=server.run, kwargs={"sockets": sockets}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while not server.started:
            assert time.monotonic() < deadline, "gateway did not start"
            time.sleep(0.02)
        main, ops = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}"
        scraped = httpx.get(f"{ops}/metrics")
        assert scraped.status_code == 200
        assert "sparkrun_gateway_" in scraped.text
        assert httpx.get(f"{ops}/health").status_code == 200
        assert httpx.get(f"{ops}/v1/models").status_code == 404  # nothing else on that port
        assert httpx.get(f"{main}/metrics").status_code == 401
        assert httpx.get(f"{main}/v1/models", headers=_auth("sk-ml")).status_code == 200
    finally:
        server.should_exit = True
        thread.join(15)


def test_static_and_secret_keys_are_merged(tmp_path: Path) -> None:
    keys = tmp_path / "keys.yaml"
    keys.write_text("keys:\n  - {key: sk-file}\n")
    argv = ["--kubernetes", "--secret-keys", "--keys", str(keys), "--admin-key-namespace", "ops"]
    gateway, _ = build([*argv, "--inference-pools", "off"])
    assert isinstance(gateway.keys, MergedKeySource)
    assert len(gateway.keys.sources) == 2  # before: the static keys were dropped
    assert gateway.keys.lookup("sk-file") is not None
    assert gateway.keys.sources[1].admin_namespaces == {"ops"}  # type: ignore[attr-defined]


def test_cancel_reaches_only_the_callers_own_request(engines: Engines, start_gateway: StartGateway) -> None:
    slow = engines.launcher(
        "org/slow",
        "--served-model-name",
        "slow",
        env={"SPARKRUN_ENGINE_TOKEN_SECONDS": "0.05", "SPARKRUN_ENGINE_OUTPUT_TOKENS": "200"},
    )
    gw = start_gateway([workload("slow", "slow", [slow.url])], keys=_keys())
    body = {
        "model": "slow",
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": 200,
        "stream": True,
    }
    rid = {"x-request-id": "my-own-id"}
    url = f"{gw.url}/v1/chat/completions"
    with (
        httpx.stream("POST", url, json=body, headers={**_auth("sk-ml"), **rid}, timeout=30) as mine,
        httpx.stream("POST", url, json=body, headers={**_auth("sk-ml-2"), **rid}, timeout=30) as theirs,
    ):
        # The same client-chosen id, two callers: two requests, neither shadows the other.
        assert mine.headers["x-request-id"] == theirs.headers["x-request-id"] == "my-own-id"
        mine_lines, theirs_lines = mine.iter_lines(), theirs.iter_lines()
        assert next(mine_lines) == next(theirs_lines) == ": command_id my-own-id"
        stranger = httpx.post(f"{gw.url}/v1/cancel/my-own-id", headers=_auth("sk-other"))
        assert stranger.status_code == 404
        assert httpx.post(f"{gw.url}/v1/cancel/my-own-id").status_code == 401
        cancelled = httpx.post(f"{gw.url}/v1/cancel/my-own-id", headers=_auth("sk-ml"))
        assert cancelled.status_code == 200
        mine_events = [line for line in mine_lines if line.startswith("data: ")]
        theirs_events = [line for line in theirs_lines if line.startswith("data: ")]
    assert "cancelled" in json.loads(mine_events[-2].removeprefix("data: "))["error"]["message"]
    # The other caller's request with the same id ran to completion.
    assert theirs_events[-1] == "data: [DONE]"
    assert not any('"error"' in line for line in theirs_events)
    assert len(theirs_events) > 100
