"""The gateway's OpenAI surface with the official ``openai`` client, against engine stand-ins.

Covers pass-through (streaming and not, byte for byte apart from ids), the catalog, the
admission errors of docs/gateway.md, bad input, request ids, API keys, metrics, cancellation and disconnects.
"""

from __future__ import annotations

import json
import re
import socket
import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from sparkrun_operator.gateway import GatewaySettings, StaticKeySource
from tests.engine.test_openai_surface import metric

from .conftest import Engines, GatewayThread, StartGateway, assert_stream_passed_through, workload

_clients: dict[tuple[str, str], openai.OpenAI] = {}


def client(base: str, key: str = "unused") -> openai.OpenAI:
    """A client per (base URL, key), closed when the module's tests are done."""
    if (base, key) not in _clients:
        _clients[base, key] = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=20)
    return _clients[base, key]


@pytest.fixture(scope="module", autouse=True)
def _close_clients() -> Iterator[None]:
    yield
    for c in _clients.values():
        c.close()
    _clients.clear()


@pytest.fixture
def gw(engines: Engines, start_gateway: StartGateway) -> GatewayThread:
    return start_gateway(
        [
            engines.chat_workload(),
            engines.embed_workload(),
            workload("asleep", "sleepy-model", [], state="Sleeping"),
            workload("starting", "starting-model", [], state="Running"),
        ]
    )


def test_models_lists_every_known_name(gw: GatewayThread) -> None:
    models = {m.id: m for m in client(gw.url).models.list().data}
    assert set(models) == {"chat-model", "chat", "embed-model", "sleepy-model", "starting-model"}
    raw = {m["id"]: m for m in httpx.get(f"{gw.url}/v1/models").json()["data"]}
    assert raw["chat"]["parent"] == "chat-model"
    assert raw["chat"]["capabilities"] == ["text-generation"]
    assert raw["embed-model"]["capabilities"] == ["embedding"]
    assert raw["sleepy-model"]["state"] == "Sleeping"
    assert raw["sleepy-model"]["ready"] is False
    assert raw["starting-model"]["ready"] is False
    assert raw["chat-model"]["ready"] is True
    assert httpx.get(f"{gw.url}/models").json() == httpx.get(f"{gw.url}/v1/models").json()


def test_chat_matches_direct(gw: GatewayThread, engines: Engines) -> None:
    messages = [{"role": "user", "content": "Route me"}]
    via = client(gw.url).chat.completions.create(model="chat", messages=messages, max_tokens=7)
    direct = client(engines.chat[0].url).chat.completions.create(
        model="chat-model", messages=messages, max_tokens=7
    )
    assert via.choices[0].message.content == direct.choices[0].message.content
    assert via.usage == direct.usage


def test_chat_stream_is_passed_through(gw: GatewayThread, engines: Engines) -> None:
    body = {
        "model": "chat-model",
        "messages": [{"role": "user", "content": "stream"}],
        "max_tokens": 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    assert_stream_passed_through(gw.url, engines.chat[0].url, body)

    chunks = list(client(gw.url).chat.completions.create(**body))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage is not None


def test_completions_embeddings_responses(gw: GatewayThread) -> None:
    c = client(gw.url)
    whole = c.completions.create(model="chat-model", prompt="Once", max_tokens=3)
    streamed = list(c.completions.create(model="chat-model", prompt="Once", max_tokens=3, stream=True))
    assert "".join(ch.choices[0].text for ch in streamed) == whole.choices[0].text
    emb = c.embeddings.create(model="embed-model", input=["a", "b"])
    assert len(emb.data) == 2
    assert len(emb.data[0].embedding) == 32
    resp = c.responses.create(model="chat", input="hello")
    assert resp.status == "completed"
    with c.responses.stream(model="chat", input="hello") as stream:
        text = "".join(ev.delta for ev in stream if ev.type == "response.output_text.delta")
    assert text == resp.output_text


def test_unknown_and_unready_models_are_404(gw: GatewayThread) -> None:
    c = client(gw.url)
    for model in ("no-such-model", "starting-model"):
        with pytest.raises(openai.NotFoundError) as err:
            c.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}])
        assert err.value.body["message"] == f"No instance found for model {model}"  # type: ignore[index]
        assert err.value.body["type"] == "not_found_error"  # type: ignore[index]


def test_capability_mismatch_is_400(gw: GatewayThread) -> None:
    c = client(gw.url)
    with pytest.raises(openai.BadRequestError) as err:
        c.chat.completions.create(model="embed-model", messages=[{"role": "user", "content": "x"}])
    assert "does not support TextGeneration" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        c.embeddings.create(model="chat-model", input="x")
    assert "does not support TextEmbedding" in err.value.message


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        (b"{oops", "Invalid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "Invalid JSON"),  # deeper than the decoder recurses
        (b"[1, 2]", "JSON object"),
        (b'{"messages": [{"role": "user", "content": "x"}]}', "'model' is required"),
        (b'{"model": "chat", "messages": []}', "'messages' must be a non-empty array"),
        (b'{"model": "chat", "messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens"),
        (b"", "empty"),
    ],
)
def test_bad_input_is_400(gw: GatewayThread, body: bytes, needle: str) -> None:
    resp = httpx.post(f"{gw.url}/v1/chat/completions", content=body)
    assert resp.status_code == 400
    assert needle in resp.json()["error"]["message"]
    assert resp.json()["error"]["type"] == "invalid_request_error"
    assert resp.headers["x-request-id"]


def test_embedding_rules_from_seed_004(gw: GatewayThread) -> None:
    for body in (
        {"model": "embed-model", "input": []},
        {"model": "embed-model", "input": "x", "dimensions": 8},
    ):
        assert httpx.post(f"{gw.url}/v1/embeddings", json=body).status_code == 400


def test_body_limit_is_413(engines: Engines, start_gateway: StartGateway) -> None:
    gw = start_gateway([engines.chat_workload()], settings=GatewaySettings(max_body_bytes=1024))
    big = {"model": "chat", "messages": [{"role": "user", "content": "x" * 2000}]}
    resp = httpx.post(f"{gw.url}/v1/chat/completions", json=big)
    assert resp.status_code == 413
    assert "exceeds the limit of 1024 bytes" in resp.json()["error"]["message"]

    def chunks():  # no Content-Length: the limit is enforced while reading
        yield b'{"model": "chat", "messages": [{"role": "user", "content": "'
        yield b"x" * 2000
        yield b'"}]}'

    resp = httpx.post(f"{gw.url}/v1/chat/completions", content=chunks())
    assert resp.status_code == 413


def test_slow_request_head_is_cut_off(engines: Engines, start_gateway: StartGateway) -> None:
    gw = start_gateway([engines.chat_workload()], settings=GatewaySettings(header_timeout=0.5))
    with socket.create_connection(("127.0.0.1", gw.port), timeout=5) as sock:
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")  # never finishes
        started = time.monotonic()
        data = b""
        while chunk := sock.recv(4096):
            data += chunk
        elapsed = time.monotonic() - started
    assert data.startswith(b"HTTP/1.1 408")
    assert 0.3 < elapsed < 4


def test_request_ids(gw: GatewayThread) -> None:
    given = httpx.get(f"{gw.url}/v1/models", headers={"x-request-id": "abc-123"})
    assert given.headers["x-request-id"] == "abc-123"
    for resp in (
        httpx.get(f"{gw.url}/v1/models"),
        httpx.get(f"{gw.url}/nothing"),
        httpx.get(f"{gw.url}/metrics"),
        httpx.post(f"{gw.url}/v1/chat/completions", json={"model": "nope", "messages": [{"role": "user"}]}),
    ):
        assert re.fullmatch(r"[0-9a-f]{32}", resp.headers["x-request-id"])
    assert httpx.get(f"{gw.url}/nothing").status_code == 404
    assert httpx.get(f"{gw.url}/v1/chat/completions").status_code == 405


def test_api_keys(engines: Engines, start_gateway: StartGateway) -> None:
    keys = StaticKeySource.from_mapping({"sk-all": ["*"], "sk-embed": ["embed-model"]})
    gw = start_gateway([engines.chat_workload(), engines.embed_workload()], keys=keys)
    messages = [{"role": "user", "content": "x"}]
    with pytest.raises(openai.AuthenticationError) as err:
        client(gw.url, "sk-wrong").chat.completions.create(model="chat", messages=messages)
    assert err.value.body["message"] == "Invalid API key"  # type: ignore[index]
    assert httpx.get(f"{gw.url}/v1/models").status_code == 401
    assert client(gw.url, "sk-all").chat.completions.create(model="chat", messages=messages).choices
    with pytest.raises(openai.NotFoundError):
        client(gw.url, "sk-embed").chat.completions.create(model="chat", messages=messages)
    assert [m.id for m in client(gw.url, "sk-embed").models.list().data] == ["embed-model"]
    anthropic_style = httpx.get(f"{gw.url}/v1/models", headers={"x-api-key": "sk-all"})
    assert anthropic_style.status_code == 200


def test_probe_and_metrics_paths_stay_public_with_api_keys(
    engines: Engines, start_gateway: StartGateway
) -> None:
    """The chart's probes (/readyz, /healthz) need no key; on the serving port /metrics needs an
    administrator key (the chart's ServiceMonitor scrapes the metrics listener instead)."""
    keys = StaticKeySource.from_mapping({"sk-all": ["*"]})
    gw = start_gateway([engines.chat_workload()], keys=keys)
    assert httpx.get(f"{gw.url}/v1/models").status_code == 401
    for path in ("/readyz", "/healthz"):
        answer = httpx.get(f"{gw.url}{path}")
        assert answer.status_code == 200, path
        assert answer.json() == {"status": "ok"}
    assert httpx.get(f"{gw.url}/metrics").status_code == 401


def test_metrics_count_requests_and_tokens(gw: GatewayThread) -> None:
    client(gw.url).chat.completions.create(
        model="chat", messages=[{"role": "user", "content": "count"}], max_tokens=4
    )
    text = httpx.get(f"{gw.url}/metrics").text
    assert 'sparkrun_gateway_requests_total{code="200",model="chat",route="chat/completions"}' in text
    out = re.search(r'sparkrun_gateway_tokens_total\{direction="out",model="chat"\} (\S+)', text)
    assert out is not None
    assert float(out.group(1)) >= 4
    assert "sparkrun_gateway_time_to_first_byte_seconds_bucket" in text
    assert "sparkrun_gateway_in_flight{backend=" in text


def test_cancel_by_command_id(start_gateway: StartGateway, engines: Engines) -> None:
    slow = engines.launcher(
        "org/slow",
        "--served-model-name",
        "slow",
        env={"SPARKRUN_ENGINE_TOKEN_SECONDS": "0.05", "SPARKRUN_ENGINE_OUTPUT_TOKENS": "400"},
    )
    gw = start_gateway([workload("slow", "slow", [slow.url])])
    body = {
        "model": "slow",
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": 400,
        "stream": True,
    }
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as resp:
        rid = resp.headers["x-request-id"]
        lines = resp.iter_lines()
        assert next(lines) == f": command_id {rid}"
        answer = httpx.post(f"{gw.url}/v1/cancel/{rid}")
        assert answer.json() == {"message": "Command cancelled.", "command_id": rid}
        rest = list(lines)
    events = [line for line in rest if line.startswith("data: ")]
    assert events[-1] == "data: [DONE]"
    error = json.loads(events[-2].removeprefix("data: "))
    assert "cancelled" in error["error"]["message"]
    again = httpx.post(f"{gw.url}/v1/cancel/{rid}")
    assert again.status_code == 404
    assert again.json()["error"]["message"] == "Command not found or already completed"
    _wait_idle(slow)


def test_client_disconnect_cancels_upstream(start_gateway: StartGateway, engines: Engines) -> None:
    slow = engines.launcher(
        "org/slow",
        "--served-model-name",
        "slow",
        env={"SPARKRUN_ENGINE_TOKEN_SECONDS": "0.05", "SPARKRUN_ENGINE_OUTPUT_TOKENS": "400"},
    )
    gw = start_gateway([workload("slow", "slow", [slow.url])])
    body = {
        "model": "slow",
        "messages": [{"role": "user", "content": "go"}],
        "max_tokens": 400,
        "stream": True,
    }
    with httpx.stream("POST", f"{gw.url}/v1/chat/completions", json=body) as resp:
        lines = resp.iter_lines()
        next(lines)
        next(lines)
        assert metric(slow, "vllm:num_requests_running") == 1
    _wait_idle(slow)
    assert metric(slow, "vllm:request_success_total", finished_reason="abort") == 1
    assert metric(slow, "vllm:generation_tokens_total") < 400


def _wait_idle(engine) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 5
    while metric(engine, "vllm:num_requests_running") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metric(engine, "vllm:num_requests_running") == 0
