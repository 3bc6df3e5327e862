"""Every name the gateway lists answers, for workloads routed from their InferenceWorkload objects.

The routing table is built from raw InferenceWorkload objects and EndpointSlices by the same code
as the Kubernetes source (``gateway/kube.py`` ``build_entries``), without the watches; the
upstreams are engine stand-ins started with ``--served-model-name`` as the operator starts vLLM,
so an engine answers 404 "The model `X` does not exist." to any other name, as vLLM does. The
clients are the official openai, anthropic and ollama libraries.

The scenario of issue 24: a workload ``wl-x`` serving a recipe whose
``defaults.served_model_name`` is ``served-x`` is routed by ``served-x`` (its ``status.model``,
written by the operator), never by ``wl-x``.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest

from sparkrun_operator.gateway.kube import build_entries
from sparkrun_operator.gateway.routing import RoutingTable, TablePublisher
from tests.engine.conftest import EngineProc, Launcher

from .conftest import GatewayThread, StartGateway


class ObjectSource:
    """A routing source over fixed Kubernetes objects: ``KubeRoutingSource`` without watches."""

    def __init__(self, workloads: Iterable[dict[str, Any]], slices: Iterable[dict[str, Any]]) -> None:
        self._publisher = TablePublisher()
        self._publisher.publish(build_entries(list(workloads), list(slices)))

    def snapshot(self) -> RoutingTable:
        return self._publisher.snapshot()

    async def wait_changed(self, version: int) -> RoutingTable:
        return await self._publisher.wait_changed(version)

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None


def _workload(name: str, *, spec: dict[str, Any], model: dict[str, Any] | None = None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Running"}
    if model is not None:
        status["model"] = model
    return {"metadata": {"namespace": "ml", "name": name}, "spec": spec, "status": status}


def _slice(service: str, engine: EngineProc) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "ml",
            "name": f"{service}-1",
            "labels": {"kubernetes.io/service-name": service},
        },
        "ports": [{"name": "http", "port": engine.port}],
        "endpoints": [{"addresses": ["127.0.0.1"], "conditions": {"ready": True}}],
    }


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, EngineProc]]:
    """Engines started as the operator starts them: a recipe's served name, an embedding
    recipe, and a plain workload (no --served-model-name: vLLM serves the model's own id)."""
    launcher = Launcher(tmp_path_factory.mktemp("served"))
    engines = {
        "wl-x": launcher("org/m", "--served-model-name", "served-x", wait=False),
        "wl-e": launcher("org/e", "--served-model-name", "served-e", "--task", "embed", wait=False),
        "plain": launcher("org/p", wait=False),
    }
    for engine in engines.values():
        engine.wait_healthy()
    yield engines
    launcher.close()


@pytest.fixture
def gw(served: dict[str, EngineProc], start_gateway: StartGateway) -> GatewayThread:
    workloads = [
        # a recipe served under its own name, with an alias
        _workload(
            "wl-x",
            spec={"recipe": {"name": "r-x"}, "model": {"name": "org/m", "aliases": ["x-alias"]}},
            model={"name": "org/m", "servedName": "served-x", "aliases": ["x-alias"], "capabilities": []},
        ),
        # a recipe whose args say --task embed (the operator derived the capability)
        _workload(
            "wl-e",
            spec={"recipe": {"name": "r-e"}},
            model={"name": "org/e", "servedName": "served-e", "aliases": [], "capabilities": ["embedding"]},
        ),
        # no recipe and no status.model yet: the rule on its spec
        _workload("plain", spec={"model": {"name": "org/p"}}),
        # a recipe the operator has not resolved yet: no names, not routed
        _workload("wl-pending", spec={"recipe": {"name": "r-x"}}),
    ]
    slices = [_slice(name, engine) for name, engine in served.items()]
    return start_gateway([], source=ObjectSource(workloads, slices))


@pytest.fixture
def oai(gw: GatewayThread) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{gw.url}/v1", api_key="unused", max_retries=0, timeout=20) as c:
        yield c


def test_the_engine_answers_only_its_served_name(served: dict[str, EngineProc]) -> None:
    # The premise: the stand-in, like vLLM, refuses any name it was not started with.
    with (
        openai.OpenAI(base_url=f"{served['wl-x'].url}/v1", api_key="x", max_retries=0) as direct,
        pytest.raises(openai.NotFoundError, match="The model `wl-x` does not exist"),
    ):
        direct.chat.completions.create(model="wl-x", messages=[{"role": "user", "content": "hi"}])


def test_models_lists_the_served_names(oai: openai.OpenAI) -> None:
    listed = {m.id for m in oai.models.list().data}
    assert listed == {"served-x", "x-alias", "served-e", "org/p"}


def test_every_listed_name_answers_on_the_openai_routes(oai: openai.OpenAI) -> None:
    raw = {m.id: m.model_dump() for m in oai.models.list().data}
    assert raw["served-e"]["capabilities"] == ["embedding"]
    assert raw["served-x"]["capabilities"] == ["text-generation"]
    for name, item in raw.items():
        if item["capabilities"] == ["embedding"]:
            emb = oai.embeddings.create(model=name, input="a sentence")
            assert emb.data
            assert emb.data[0].embedding
        else:
            chat = oai.chat.completions.create(
                model=name, messages=[{"role": "user", "content": "hi"}], max_tokens=4
            )
            assert chat.choices[0].message.content
            text = oai.completions.create(model=name, prompt="hi", max_tokens=4)
            assert text.choices[0].text


def test_the_workload_name_is_not_a_model_name(oai: openai.OpenAI) -> None:
    for name in ("wl-x", "wl-e", "wl-pending"):
        with pytest.raises(openai.NotFoundError, match="No instance found"):
            oai.chat.completions.create(model=name, messages=[{"role": "user", "content": "hi"}])


def test_an_embedding_recipe_refuses_chat(oai: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="does not support TextGeneration"):
        oai.chat.completions.create(model="served-e", messages=[{"role": "user", "content": "hi"}])


def test_messages_and_ollama_reach_the_served_name(gw: GatewayThread) -> None:
    # The translated routes rewrite the client's name (here an alias) to status.model.servedName.
    with anthropic.Anthropic(base_url=gw.url, api_key="unused", max_retries=0, timeout=20) as claude:
        msg = claude.messages.create(
            model="x-alias", max_tokens=4, messages=[{"role": "user", "content": "hi"}]
        )
    assert msg.model == "x-alias"
    assert msg.content
    client = ollama.Client(host=gw.url, timeout=20)
    try:
        answer = client.chat(model="served-x", messages=[{"role": "user", "content": "hi"}])
        assert answer.message.content
        assert {m.model for m in client.list().models} == {"served-x", "x-alias", "served-e", "org/p"}
        assert client.show("served-e").capabilities == ["embedding"]
    finally:
        client.close()
