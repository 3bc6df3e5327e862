"""``X-Gateway-Model-Name`` (the Gateway API Inference Extension's model header) at our gateway.

The header names the model when the body names none (absent, ``null`` or ``""``), and must
equal the body's ``model`` when both are given (400 in the route's family otherwise). The name
used is what the caller's rights and the routing table see, and the engine always gets a body
naming its served name (spliced into a body without ``model``, re-encoded otherwise). The real
``openai``, ``anthropic`` and ``ollama`` clients send it as an extra header; raw ``httpx`` sends
what a client library would not (no ``model`` at all, the header twice, bytes that are no name).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import ollama
import openai
import pytest

from sparkrun_operator.gateway import StaticKeySource
from sparkrun_operator.gateway.openai_api import with_model
from sparkrun_operator.render.keys import HEADER_GATEWAY_MODEL_NAME

from .conftest import Engines, GatewayThread, StartGateway

HEADER = "X-Gateway-Model-Name"
MESSAGES: Any = [{"role": "user", "content": "Route me by header"}]


def test_the_header_name_is_the_conventions() -> None:
    assert HEADER.lower() == HEADER_GATEWAY_MODEL_NAME


@pytest.fixture
def gw(engines: Engines, start_gateway: StartGateway) -> GatewayThread:
    return start_gateway([engines.chat_workload(), engines.embed_workload()])


@pytest.fixture
def oai(gw: GatewayThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=20) as c:
        yield c


def test_openai_client_header_equal_to_the_body(oai: openai.OpenAI) -> None:
    answer = oai.chat.completions.create(
        model="chat-model", messages=MESSAGES, max_tokens=5, extra_headers={HEADER: "chat-model"}
    )
    assert answer.model == "chat-model"
    assert answer.choices[0].message.content


def test_openai_client_empty_model_takes_the_header_alias(oai: openai.OpenAI) -> None:
    # The body's "model" is "" and the header names an alias: the engine gets its served name.
    answer = oai.chat.completions.create(
        model="", messages=MESSAGES, max_tokens=5, extra_headers={HEADER: "chat"}
    )
    assert answer.model == "chat-model"
    stream = oai.chat.completions.create(
        model="", messages=MESSAGES, max_tokens=5, stream=True, extra_headers={HEADER: "chat"}
    )
    chunks = list(stream)
    assert chunks
    assert {getattr(c, "model", None) for c in chunks} == {"chat-model"}
    vectors = oai.embeddings.create(model="", input="hello", extra_headers={HEADER: "embed-model"})
    assert vectors.data[0].embedding


def test_openai_client_mismatch_is_400(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        oai.chat.completions.create(model="chat", messages=MESSAGES, extra_headers={HEADER: "embed-model"})
    message = err.value.body["message"]  # type: ignore[index]
    assert "'chat'" in message
    assert "'embed-model'" in message
    assert err.value.body["param"] == "model"  # type: ignore[index]


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions"])
def test_a_body_without_model_gets_the_header_name_spliced_in(gw: GatewayThread, path: str) -> None:
    body = {"messages": MESSAGES} if path.endswith("chat/completions") else {"prompt": "hi"}
    raw = json.dumps({**body, "max_tokens": 4}).encode()
    for name in ("chat", "chat-model"):  # an alias and the served name: both reach the engine as it
        answer = httpx.post(gw.url + path, content=b"  \n" + raw, headers={HEADER: name})
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == "chat-model"


def test_neither_body_nor_header_is_still_400(gw: GatewayThread) -> None:
    answer = httpx.post(f"{gw.url}/v1/chat/completions", json={"messages": MESSAGES})
    assert answer.status_code == 400
    assert "'model' is required" in answer.json()["error"]["message"]


@pytest.mark.parametrize(
    ("headers", "needle"),
    [
        ([(HEADER, "chat"), (HEADER, "chat")], "must be sent once"),
        ([(HEADER, "x" * 1100)], "more than 1024 bytes"),
        ([(HEADER.encode(), b"\xff\xfe")], "not UTF-8"),
        ([(HEADER.encode(), "chat\u202e".encode())], "control or format"),
        ([(HEADER, "a" * 300)], "more than 256"),
    ],
)
def test_a_hostile_header_is_400(gw: GatewayThread, headers: Any, needle: str) -> None:
    answer = httpx.post(f"{gw.url}/v1/chat/completions", json={"messages": MESSAGES}, headers=headers)
    assert answer.status_code == 400, answer.text
    assert needle in answer.json()["error"]["message"]


def test_anthropic_client(gw: GatewayThread) -> None:
    with anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0, timeout=20) as claude:
        answer = claude.messages.create(
            model="chat",
            max_tokens=5,
            messages=[{"role": "user", "content": "hi"}],
            extra_headers={HEADER: "chat"},
        )
        assert answer.model == "chat"
        assert answer.content
        with pytest.raises(anthropic.BadRequestError) as err:
            claude.messages.create(
                model="chat",
                max_tokens=5,
                messages=[{"role": "user", "content": "hi"}],
                extra_headers={HEADER: "chat-model"},
            )
        assert err.value.body["type"] == "error"  # type: ignore[index]
        assert "X-Gateway-Model-Name" in err.value.body["error"]["message"]  # type: ignore[index]
    # A body without "model" (the SDK always sends one): the header names it.
    raw = {"max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]}
    plain = httpx.post(f"{gw.url}/v1/messages", json=raw, headers={HEADER: "chat"})
    assert plain.status_code == 200, plain.text
    assert plain.json()["model"] == "chat"


def test_ollama_client(gw: GatewayThread) -> None:
    llama = ollama.Client(host=gw.url, timeout=20, headers={HEADER: "chat"})
    try:
        answer = llama.chat(model="chat", messages=[{"role": "user", "content": "hi"}], stream=False)
        assert answer.message.content
        assert answer.model == "chat"
        generated = llama.generate(model="chat", prompt="hello", stream=False)
        assert generated.model == "chat"
        assert generated.response
        with pytest.raises(ollama.ResponseError) as err:
            llama.chat(model="chat-model", messages=[{"role": "user", "content": "hi"}], stream=False)
        assert err.value.status_code == 400
        assert "X-Gateway-Model-Name" in err.value.error
    finally:
        llama.close()
    raw = httpx.post(
        f"{gw.url}/api/generate", json={"prompt": "hi", "stream": False}, headers={HEADER: "chat"}
    )
    assert raw.status_code == 200, raw.text
    assert raw.json()["model"] == "chat"


def test_the_callers_rights_apply_to_the_name_used(engines: Engines, start_gateway: StartGateway) -> None:
    keys = StaticKeySource.from_mapping({"sk-alias": ["chat"]})
    gw = start_gateway([engines.chat_workload()], keys=keys)
    auth = {"Authorization": "Bearer sk-alias"}
    body = {"messages": MESSAGES, "max_tokens": 3}
    allowed = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={**auth, HEADER: "chat"})
    assert allowed.status_code == 200, allowed.text
    denied = httpx.post(f"{gw.url}/v1/chat/completions", json=body, headers={**auth, HEADER: "chat-model"})
    assert denied.status_code == 404  # a name the key does not grant is absent, header or body


def test_with_model_splices_or_reencodes() -> None:
    assert json.loads(with_model(b' {"a": 1}', {"a": 1}, "m\u00e9")) == {"model": "m\u00e9", "a": 1}
    assert with_model(b"{}", {}, "m") == b'{"model":"m"}'
    assert json.loads(with_model(b'{"model": null}', {"model": None}, "m")) == {"model": "m"}
