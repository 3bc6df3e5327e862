"""Every name a user sees answers (issue 24), against the session's target (``conftest.py``).

The workloads: every example that serves (``examples/inferenceworkload*.yaml``, with the Recipe
of ``examples/recipe.yaml``), a Recipe served under a name unlike its workload's
(``defaults.served_model_name: served-x-…``, the workload ``wl-x-…`` names only the recipe), a
Recipe whose command says ``--task embed``, and a recipe-based workload in a second namespace
(it overrides the recipe's model and adds an alias, and keeps the recipe's served name). They are
applied once for the module and every request is made once all of them are Ready:

- the gateway's ``/v1/models`` lists, for each workload, exactly the names it is expected to
  answer to (its served name and aliases: the naming rule of docs/concepts.md, written out here
  from the manifests), and nothing under any other name of it;
- each listed name answers through the OpenAI routes (chat and text completions: the engine
  reports its served name), the Anthropic route (messages) and the Ollama routes (chat and
  generate), each with its official client library; the embedding model answers on
  ``/v1/embeddings`` and is refused on chat with the gateway's 400, and a text model is refused on
  embeddings the same way;
- a name that is not listed (the workload's own ``metadata.name`` where it differs) answers 404
  from the gateway ("No instance found"), not from an engine ("does not exist");
- the engine is started with the listed served name (the leader pod's ``--served-model-name``);
- ``kubectl get iw`` shows it (``SERVED``, ``MODEL`` columns) and the daemon API's
  ``workloads.endpoints`` names the same (for the namespace it serves).

On the local testbed the demo has already applied some examples; applying them again changes
nothing. What this module creates (the examples the cluster did not have included) it deletes.
On a cluster given by ``SPARKRUN_E2E_KUBECONFIG`` only the examples already there are checked
(the multi-node one alone asks for 32 GPUs); the other workloads are created there as well.
"""

from __future__ import annotations

import json
import secrets
import ssl
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anthropic
import ollama
import openai
import pytest
import yaml

from e2e.main_flow import _openai, resource
from e2e.target import Target
from sparkrun_operator.client import Client

pytestmark = [pytest.mark.testbed, pytest.mark.timeout(900)]

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
READY_TIMEOUT = 420
LISTED_TIMEOUT = 60
HELLO = [{"role": "user", "content": "Who are you?"}]


@dataclass(frozen=True)
class Expected:
    """A workload and the names it must answer to (worked out from its manifests)."""

    namespace: str
    name: str
    model: str
    served: str
    aliases: tuple[str, ...] = ()
    embedding: bool = False

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def names(self) -> tuple[str, ...]:
        return (self.served, *self.aliases)


@dataclass(frozen=True)
class World:
    """The applied workloads, once all are Ready and the gateway lists them."""

    target: Target
    expected: tuple[Expected, ...]
    listed: dict[str, dict[str, Any]]  # /v1/models: id -> entry


def _expected(workload: dict[str, Any], recipe: dict[str, Any] | None, namespace: str) -> Expected:
    """The naming rule (docs/concepts.md), on the manifests: the served name is
    ``spec.model.servedName``, else the recipe's ``defaults.served_model_name``, else the model."""
    spec = workload["spec"]
    model = spec.get("model") or {}
    recipe_spec = (recipe or {}).get("spec") or {}
    loaded = model.get("name") or recipe_spec.get("model")
    served = model.get("servedName") or (recipe_spec.get("defaults") or {}).get("served_model_name") or loaded
    args = [*(spec.get("engine") or {}).get("args", []), *str(recipe_spec.get("command") or "").split()]
    return Expected(
        namespace=namespace,
        name=workload["metadata"]["name"],
        model=str(loaded),
        served=str(served),
        aliases=tuple(a for a in model.get("aliases") or [] if a != served),
        embedding="--task embed" in " ".join(args),
    )


def _extras(suffix: str, namespace: str, second: str, target: Target) -> list[tuple[dict[str, Any], str]]:
    """Recipes and workloads beside the examples: (document, namespace)."""

    def recipe(name: str, served: str, command: str | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "recipeVersion": "2",
            "model": "Qwen/Qwen3-8B",
            "runtime": "vllm",
            "defaults": {"served_model_name": served, "max_model_len": 4096},
        }
        if command:
            spec["command"] = command
        if target.image:
            spec["container"] = target.image
        return resource("Recipe", name, spec)

    def workload(name: str, recipe_name: str, model: dict[str, Any] | None = None) -> dict[str, Any]:
        spec: dict[str, Any] = {"recipe": {"name": recipe_name}}
        if model:
            spec["model"] = model
        if target.scheduling:
            spec["scheduling"] = target.scheduling
        return resource("InferenceWorkload", name, spec)

    embed = "vllm serve {model} --served-model-name {served_model_name} --port {port} --task embed"
    return [
        (recipe(f"names-x-{suffix}", f"served-x-{suffix}"), namespace),
        (workload(f"wl-x-{suffix}", f"names-x-{suffix}"), namespace),
        (recipe(f"names-embed-{suffix}", f"embed-x-{suffix}", embed), namespace),
        (workload(f"wl-embed-{suffix}", f"names-embed-{suffix}"), namespace),
        (recipe(f"names-ns2-{suffix}", f"served-ns2-{suffix}"), second),
        (
            workload(
                f"wl-ns2-{suffix}",
                f"names-ns2-{suffix}",
                {"name": "Qwen/Qwen3-0.6B", "aliases": [f"alias-ns2-{suffix}"]},
            ),
            second,
        ),
    ]


def _exists(target: Target, namespace: str, kind: str, name: str) -> bool:
    out = target.kubectl("get", "-n", namespace, kind, name, "--ignore-not-found", "-o", "name")
    return bool(out.strip())


def _apply(target: Target, doc: dict[str, Any], namespace: str) -> None:
    target.kubectl("apply", "--server-side", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(doc))


def _wait_ready(target: Target, e: Expected) -> None:
    ready = [
        "wait",
        "-n",
        e.namespace,
        "--for=condition=Ready",
        f"iw/{e.name}",
        f"--timeout={READY_TIMEOUT}s",
    ]
    try:
        target.kubectl(*ready)
    except AssertionError as error:
        found = target.kubectl("get", "-n", e.namespace, f"iw/{e.name}", "-o", "json", check=False)
        conditions = (json.loads(found or "{}").get("status") or {}).get("conditions")
        raise AssertionError(f"{e.key} not Ready: {conditions}") from error


def _listed(target: Target) -> dict[str, dict[str, Any]]:
    with _openai(target, 30.0) as client:
        page = client.models.list()
    return {m.id: m.model_dump() for m in page.data}


@pytest.fixture(scope="module")
def world(target: Target) -> Iterator[World]:
    suffix = secrets.token_hex(3)
    ns, second = target.namespace, f"e2e-names-{suffix}"
    local = target.demo_output is not None
    recipe = yaml.safe_load((EXAMPLES / "recipe.yaml").read_text())
    recipes = {recipe["metadata"]["name"]: recipe}
    examples = [yaml.safe_load(p.read_text()) for p in sorted(EXAMPLES.glob("inferenceworkload*.yaml"))]
    created: list[tuple[str, str, str]] = []  # (namespace, kind, name) to delete afterwards
    expected: list[Expected] = []
    try:
        for doc in [*recipes.values(), *examples]:
            name = doc["metadata"]["name"]
            if _exists(target, ns, doc["kind"], name):
                if local:
                    _apply(target, doc, ns)  # the demo applied it: the same document, no change
            elif local:
                _apply(target, doc, ns)
                created.append((ns, doc["kind"], name))
            else:
                continue
            if doc["kind"] == "InferenceWorkload":
                ref = (doc["spec"].get("recipe") or {}).get("name")
                expected.append(_expected(doc, recipes.get(ref) if ref else None, ns))
        target.kubectl("create", "namespace", second)
        created.append(("", "namespace", second))
        extras = _extras(suffix, ns, second, target)
        by_name = {d["metadata"]["name"]: d for d, _ in extras if d["kind"] == "Recipe"}
        for doc, where in extras:
            _apply(target, doc, where)
            if where == ns:
                created.append((ns, doc["kind"], doc["metadata"]["name"]))
            if doc["kind"] == "InferenceWorkload":
                expected.append(_expected(doc, by_name[doc["spec"]["recipe"]["name"]], where))
        for e in expected:
            _wait_ready(target, e)
        if local:  # every example that serves is among them (a check that cannot pass vacuously)
            assert {(ns, d["metadata"]["name"]) for d in examples} <= {
                (e.namespace, e.name) for e in expected
            }
        names = {n for e in expected for n in e.names}
        deadline = time.monotonic() + LISTED_TIMEOUT
        listed = _listed(target)
        while not names <= set(listed):
            if time.monotonic() > deadline:
                shown = {
                    e.key: sorted(n for n, m in listed.items() if m.get("workload") == e.key)
                    for e in expected
                }
                raise AssertionError(
                    f"the gateway does not list {sorted(names - set(listed))}; it lists {shown}"
                )
            time.sleep(1.0)
            listed = _listed(target)
        yield World(target=target, expected=tuple(expected), listed=listed)
    finally:
        for namespace, kind, name in reversed(created):
            where = ["-n", namespace] if namespace else []
            target.kubectl("delete", *where, kind, name, "--wait=false", check=False)


def _anthropic(target: Target) -> anthropic.Anthropic:
    trust = ssl.create_default_context(cafile=target.gateway_ca) if target.gateway_ca else True
    http = anthropic.DefaultHttpxClient(verify=trust, timeout=60.0)
    if target.gateway_token:
        return anthropic.Anthropic(
            base_url=target.gateway_url, auth_token=target.gateway_token, max_retries=0, http_client=http
        )
    return anthropic.Anthropic(base_url=target.gateway_url, api_key="e2e", max_retries=0, http_client=http)


def _ollama(target: Target) -> ollama.Client:
    trust = ssl.create_default_context(cafile=target.gateway_ca) if target.gateway_ca else True
    headers = {"Authorization": f"Bearer {target.gateway_token}"} if target.gateway_token else None
    return ollama.Client(host=target.gateway_url, headers=headers, verify=trust, timeout=60.0)


def test_the_gateway_lists_exactly_the_names_of_each_workload(world: World) -> None:
    for e in world.expected:
        mine = {name: m for name, m in world.listed.items() if m.get("workload") == e.key}
        assert set(mine) == set(e.names), (e.key, sorted(mine))
        for m in mine.values():
            assert m["root"] == e.served, m
            assert ("embedding" in m["capabilities"]) == e.embedding, m
    # the scenario of issue 24: the workload is listed by its recipe's served name, not its own
    wl_x = next(e for e in world.expected if e.name.startswith("wl-x-"))
    assert wl_x.served.startswith("served-x-")
    assert wl_x.name not in world.listed


def test_every_listed_text_name_answers_on_the_openai_routes(world: World) -> None:
    with _openai(world.target, 60.0) as client:
        for e in world.expected:
            if e.embedding:
                continue
            for name in e.names:
                chat = client.chat.completions.create(model=name, messages=HELLO, max_tokens=4)
                assert chat.choices[0].message.content, name
                assert chat.model == e.served, (name, chat.model)  # the engine answered as its served name
                text = client.completions.create(model=name, prompt="Who are you?", max_tokens=4)
                assert text.choices[0].text, name


def test_every_listed_text_name_answers_on_the_anthropic_route(world: World) -> None:
    with _anthropic(world.target) as claude:
        for e in world.expected:
            if e.embedding:
                continue
            for name in e.names:
                msg = claude.messages.create(model=name, max_tokens=4, messages=HELLO)
                assert msg.model == name
                assert msg.content, name


def test_every_listed_text_name_answers_on_the_ollama_routes(world: World) -> None:
    client = _ollama(world.target)
    try:
        for e in world.expected:
            if e.embedding:
                continue
            for name in e.names:
                chat = client.chat(model=name, messages=HELLO, options={"num_predict": 4})
                assert chat.message.content, name
                generated = client.generate(model=name, prompt="Who are you?", options={"num_predict": 4})
                assert generated.response, name
    finally:
        client.close()


def test_the_embedding_model_embeds_and_refuses_chat(world: World) -> None:
    embedders = [e for e in world.expected if e.embedding]
    assert embedders, "no embedding workload among the expected ones"
    text = next(e for e in world.expected if not e.embedding)
    with _openai(world.target, 60.0) as client:
        for e in embedders:
            for name in e.names:
                vectors = client.embeddings.create(model=name, input=["one", "two"])
                assert [len(d.embedding) > 0 for d in vectors.data] == [True, True], name
                with pytest.raises(openai.BadRequestError) as refused:
                    client.chat.completions.create(model=name, messages=HELLO, max_tokens=4)
                assert refused.value.status_code == 400
                assert refused.value.code == "model_capability_mismatch", refused.value.body
        with pytest.raises(openai.BadRequestError) as refused:
            client.embeddings.create(model=text.served, input="one")
        assert refused.value.code == "model_capability_mismatch", refused.value.body


def test_a_name_not_listed_answers_404_from_the_gateway(world: World) -> None:
    unlisted = [e.name for e in world.expected if e.name not in e.names and e.name not in world.listed]
    assert any(n.startswith("wl-x-") for n in unlisted), unlisted
    gone = "No instance found for model"  # the gateway's words; an engine says "does not exist"
    with _openai(world.target, 60.0) as client, _anthropic(world.target) as claude:
        for name in unlisted:
            with pytest.raises(openai.NotFoundError) as missing:
                client.chat.completions.create(model=name, messages=HELLO, max_tokens=4)
            assert missing.value.code == "model_not_found", missing.value.body
            assert f"{gone} {name}" in missing.value.message
            with pytest.raises(anthropic.NotFoundError, match=gone):
                claude.messages.create(model=name, max_tokens=4, messages=HELLO)
    client = _ollama(world.target)
    try:
        for name in unlisted:
            with pytest.raises(ollama.ResponseError, match=gone) as refused:
                client.chat(model=name, messages=HELLO)
            assert refused.value.status_code == 404
    finally:
        client.close()


def _leader_args(target: Target, e: Expected) -> list[str]:
    selector = f"sparkrun.dev/workload={e.name},sparkrun.dev/role=leader"
    pods = json.loads(target.kubectl("get", "pods", "-n", e.namespace, "-l", selector, "-o", "json"))["items"]
    assert pods, f"no leader pod of {e.key}"
    args: list[str] = pods[0]["spec"]["containers"][0]["args"]
    return args


def _table(text: str) -> list[dict[str, str]]:
    """``kubectl get`` table output as rows keyed by column header (cells may be empty)."""
    header, *lines = text.splitlines()
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = [*starts[1:], None]
    columns = [header[s:b].strip() for s, b in zip(starts, bounds, strict=True)]
    return [
        {c: line[s:b].strip() for c, s, b in zip(columns, starts, bounds, strict=True)}
        for line in lines
        if line.strip()
    ]


def test_the_engine_kubectl_and_the_daemon_api_agree_with_the_gateway(world: World) -> None:
    target = world.target
    rows = {(r["NAMESPACE"], r["NAME"]): r for r in _table(target.kubectl("get", "iw", "-A", "-o", "wide"))}
    with Client(target.daemon_url, token=target.token, ca_cert=target.daemon_ca) as daemon:
        swept = daemon.call("workloads.endpoints", {}, timeout=60)
    endpoints = {row["workload_id"]: row for row in swept["endpoints"]}
    for e in world.expected:
        args = _leader_args(target, e)
        assert args[args.index("--served-model-name") + 1] == e.served, (e.key, args)
        assert args[0] == e.model, (e.key, args)

        row = rows[(e.namespace, e.name)]
        assert (row.get("SERVED"), row.get("MODEL")) == (e.served, e.model), row

        status = json.loads(target.kubectl("get", "-n", e.namespace, f"iw/{e.name}", "-o", "json"))["status"]
        assert status["model"]["servedName"] == e.served
        assert status["model"]["aliases"] == list(e.aliases)
        entry = endpoints.get(status["workloadId"])
        if e.namespace != target.namespace:
            assert entry is None, entry  # the daemon API serves its own namespace only
            continue
        assert entry is not None, f"workloads.endpoints has no row for {e.key}"
        assert entry["served_model_name"] == e.served
        assert entry["actual_models"] == list(e.names)
        assert entry["model"] == e.model
        assert ("embedding" in entry["capabilities"]) == e.embedding, entry
