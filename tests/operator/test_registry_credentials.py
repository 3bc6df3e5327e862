"""A RecipeRegistry's ``credentialsSecret`` against real git servers on loopback that demand HTTP
basic authentication (``tests/gitserver.py``): the Secret is read from the operator's namespace
only, sent only to the registry's URL, and its values appear nowhere the operator writes.

One registry walks through: ``username`` + ``password`` syncs; ``token`` syncs (sent as the
password of user ``x-access-token``, the only user the second server takes); a Secret that does
not exist and one with neither pair -> ``Synced=False``, ``CredentialsInvalid``, naming the
Secret; a wrong password -> ``FetchFailed``, ``auth``. Then no secret value is in the registry
(status included), in any event about it, or in the operator's log.
"""

from __future__ import annotations

import base64
import json
import secrets
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from sparkrun_operator.render import keys
from sparkrun_testbed.kubeapi import KubeApi
from tests.conftest import Require
from tests.gitserver import GitServer
from tests.operator.conftest import API, OperatorProcess, condition

RECIPE = """\
model: Qwen/Qwen3-0.6B
runtime: vllm
container: vllm/vllm-openai:v0.33.0
defaults:
  port: 8000
  served_model_name: {served}
command: vllm serve {{model}} --port {{port}}
"""
USER = "registry-reader"
PASSWORD = "pw-" + secrets.token_hex(12)
TOKEN = "tok-" + secrets.token_hex(12)
WRONG = "wrong-" + secrets.token_hex(12)
MERGE = {"Content-Type": "application/merge-patch+json"}


@pytest.fixture
def servers(require: Require) -> Iterator[tuple[GitServer, GitServer]]:
    """A git server taking ``USER``/``PASSWORD`` and one taking only the token's user."""
    require(shutil.which("git") is not None, "git (Debian's git)")
    with GitServer(auth=(USER, PASSWORD)) as basic, GitServer(auth=("x-access-token", TOKEN)) as token:
        yield basic, token


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _secret(kube: KubeApi, namespace: str, name: str, data: dict[str, str]) -> None:
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": data,
        }
    )


def _patch(kube: KubeApi, name: str, spec: dict[str, Any]) -> int:
    """Patch the registry's spec; its new generation."""
    path = kube.resource_path(API, "RecipeRegistry", name=name)
    patched = kube.request("PATCH", path, json={"spec": spec}, headers=MERGE).json()
    return int(patched["metadata"]["generation"])


def _synced(kube: KubeApi, name: str, generation: int, reason: str) -> dict[str, Any]:
    """The registry once its ``Synced`` condition answers ``generation`` with ``reason``."""

    def probe() -> dict[str, Any] | None:
        obj = kube.get(API, "RecipeRegistry", name)
        cond = condition(obj, "Synced")
        if obj is None or cond is None or cond.get("observedGeneration") != generation:
            return None
        return obj if cond["reason"] == reason else None

    return kube.wait(probe, timeout=90, what=f"RecipeRegistry {name} generation {generation}: {reason}")


@pytest.fixture
def registry_name(kube: KubeApi) -> Iterator[str]:
    name = f"cred-{secrets.token_hex(4)}"
    yield name
    kube.delete(API, "RecipeRegistry", name)


def test_registry_credentials(
    kube: KubeApi,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    servers: tuple[GitServer, GitServer],
    registry_name: str,
) -> None:
    basic_server, token_server = servers
    basic = basic_server.create_repo("basic")
    basic.write("recipes/qwen.yaml", RECIPE.format(served="basic"))
    basic_commit = basic.commit("basic")
    token = token_server.create_repo("token")
    token.write("recipes/qwen.yaml", RECIPE.format(served="token"))
    token_commit = token.commit("token")
    # NB: the operator's namespace (its executor namespace: the first it serves)
    _secret(kube, namespace, "git-basic", {"username": USER, "password": PASSWORD})
    _secret(kube, namespace, "git-token", {"token": TOKEN})
    _secret(kube, namespace, "git-odd", {"user": USER, "pass": PASSWORD})
    _secret(kube, namespace, "git-wrong", {"username": USER, "password": WRONG})
    operator = operator_factory(namespace)
    kube.create(
        {
            "apiVersion": API,
            "kind": "RecipeRegistry",
            "metadata": {"name": registry_name},
            "spec": {
                "url": basic.url_http,
                "subpath": "recipes",
                "targetNamespace": namespace,
                "credentialsSecret": {"name": "git-basic"},
            },
        }
    )

    # username + password: synced, the Recipe written
    first = _synced(kube, registry_name, 1, "Synced")
    assert first["status"]["commit"] == basic_commit
    [recipe] = kube.list_items(
        API, "Recipe", namespace=namespace, label_selector=f"{keys.LABEL_REGISTRY}={registry_name}"
    )
    assert recipe["metadata"]["annotations"][keys.ANNOTATION_REGISTRY_COMMIT] == basic_commit
    sent = {s.authorization for s in basic_server.seen}
    assert sent >= {"Basic " + _b64(f"{USER}:{PASSWORD}")}

    # token: sent as the password of x-access-token (the only user the second server takes)
    generation = _patch(
        kube, registry_name, {"url": token.url_http, "credentialsSecret": {"name": "git-token"}}
    )
    assert _synced(kube, registry_name, generation, "Synced")["status"]["commit"] == token_commit
    assert "Basic " + _b64(f"x-access-token:{TOKEN}") in {s.authorization for s in token_server.seen}
    # neither credential went to the other server
    assert _b64(f"x-access-token:{TOKEN}") not in " ".join(s.authorization for s in basic_server.seen)
    assert _b64(f"{USER}:{PASSWORD}") not in " ".join(s.authorization for s in token_server.seen)

    # a Secret that does not exist, and one with neither pair: CredentialsInvalid, naming it
    for secret, why in (
        ("git-absent", f"Secret {namespace}/git-absent does not exist"),
        ("git-odd", f"Secret {namespace}/git-odd has neither username and password nor token"),
    ):
        generation = _patch(kube, registry_name, {"credentialsSecret": {"name": secret}})
        failed = _synced(kube, registry_name, generation, "CredentialsInvalid")
        cond = condition(failed, "Synced")
        assert cond is not None
        assert cond["status"] == "False"
        assert why in cond["message"], cond
        assert failed["status"]["commit"] == token_commit  # what was written stays

    # a wrong password: FetchFailed (auth), without the password
    generation = _patch(
        kube, registry_name, {"url": basic.url_http, "credentialsSecret": {"name": "git-wrong"}}
    )
    refused = _synced(kube, registry_name, generation, "FetchFailed")
    cond = condition(refused, "Synced")
    assert cond is not None
    assert cond["status"] == "False"
    assert "fetch failed (auth)" in cond["message"], cond
    assert "Basic " + _b64(f"{USER}:{WRONG}") in {s.authorization for s in basic_server.seen}

    # no secret value anywhere the operator writes: the registry, its events, the operator's log
    events = kube.list_items("v1", "Event", namespace=None)
    about = [e for e in events if (e.get("involvedObject") or {}).get("name") == registry_name]
    written = json.dumps([kube.get(API, "RecipeRegistry", registry_name), about]) + operator.output()
    for value in (PASSWORD, TOKEN, WRONG, _b64(f"{USER}:{PASSWORD}"), _b64(f"x-access-token:{TOKEN}")):
        assert value not in written
