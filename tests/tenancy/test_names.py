"""Issue 26, "a tenant cannot take another's name", on the testbed's real kube-apiserver.

- The chart's admission policy (``templates/workload-names-admission.yaml``, rendered by the
  pinned helm with ``tenancy.names.prefixes`` naming this test's namespaces, bound to them only)
  refuses a workload whose spec names a model outside its namespace's prefixes, with a message
  naming the name, the namespace and the prefixes; it admits names inside, a name it cannot see
  (a Recipe's), and updates of a workload admitted before the map that keep its names.
- The squatting scenario: tenant B creates, first, a Stopped workload claiming A's name through
  a Recipe's ``served_model_name`` (which admission cannot read). The operator (``--name-prefixes``)
  gives it ``Routable=False``, ``NameNotAllowed``; A's later workload serving that name is
  ``NamesAccepted``; a gateway over the testbed (``KubeRoutingSource``, ``name_policy``) routes
  the name to A, A's request is answered by A's engine, and B's workload is never woken.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_operator.api import namepolicy
from sparkrun_operator.gateway.kube import KubeConnection, KubeRoutingSource
from sparkrun_operator.ops.executors import proxy
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.render import keys
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from tests.conftest import Kubectl
from tests.deploy.chart import render, require_helm
from tests.gateway.conftest import StartGateway, start_gateway
from tests.operator.admission import bound_to, first_refusal, refused
from tests.operator.conftest import (
    API,
    OperatorProcess,
    get_workload,
    netns_network,
    operator_factory,
    wait_condition,
    workload,
)
from tests.operator.test_served_names import _columns
from tests.operator.test_workload_process import ON_PROCESS_NODES

__all__ = ["netns_network", "operator_factory", "start_gateway"]  # fixtures of their own areas

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]

Factory = Callable[..., OperatorProcess]
MODEL = "Qwen/Qwen3-0.6B"


@pytest.fixture
def second_namespace(kube: KubeApi, namespace: str) -> Iterator[str]:
    """Another tenant's namespace beside ``namespace``."""
    other = f"{namespace}-q"
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": other}})
    kube.wait(lambda: kube.get("v1", "ServiceAccount", "default", namespace=other), timeout=30, what="SA")
    yield other
    kube.delete("v1", "Namespace", other)


@contextlib.contextmanager
def names_admission(kube: KubeApi, tmp: Path, prefixes: dict[str, list[str]]) -> Iterator[None]:
    """The chart's name policy for ``prefixes``, bound to each namespace the map lists."""
    rendered = render(require_helm(), tmp, {"tenancy": {"names": {"prefixes": prefixes}}})
    docs = [
        d
        for d in rendered.docs
        if d["kind"].startswith("ValidatingAdmissionPolicy")
        and d["metadata"]["name"].endswith("-workload-names")
    ]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    with contextlib.ExitStack() as stack:
        for ns in prefixes:
            if ns != "*":
                stack.enter_context(bound_to(kube, ns, [docs]))
        yield


def _recipe(name: str, namespace: str, served: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "Recipe",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"model": MODEL, "runtime": "vllm", "defaults": {"served_model_name": served}},
    }


def _merge(kube: KubeApi, namespace: str, name: str, spec: dict[str, Any]) -> None:
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=name),
        json={"spec": spec},
        headers={"Content-Type": "application/merge-patch+json"},
    )


def test_admission_refuses_a_spec_name_outside_the_prefixes(
    kube: KubeApi, namespace: str, tmp_path: Path
) -> None:
    # admitted before the map is set: it keeps its name through later updates
    kube.create(workload("legacy", namespace, model={"name": MODEL, "servedName": "pre-policy-name"}))
    with names_admission(kube, tmp_path, {namespace: ["nx-", "shared/"]}):
        error = first_refusal(
            lambda name: kube.create(
                workload(name, namespace, model={"name": MODEL, "servedName": "grab-this"})
            ),
            lambda name: kube.delete(API, "InferenceWorkload", name, namespace=namespace),
            "a served name outside the namespace's prefixes",
        )
        assert error.status == 403, error
        assert '"grab-this" may not be claimed from namespace ' + namespace in error.message
        assert '["nx-","shared/"]' in error.message
        # an alias, and the model's name when it is the served name, are spec names too
        alias = refused(
            lambda: kube.create(
                workload(
                    "by-alias", namespace, model={"name": MODEL, "servedName": "nx-a", "aliases": ["off-x"]}
                )
            )
        )
        assert '"off-x"' in alias.message
        derived = refused(
            lambda: kube.create(workload("by-model", namespace, model={"name": "org/off-model"}))
        )
        assert '"org/off-model"' in derived.message
        # names inside are admitted; so is a name admission cannot see (a Recipe's)
        kube.create(
            workload(
                "inside", namespace, model={"name": MODEL, "servedName": "nx-chat", "aliases": ["shared/x"]}
            )
        )
        kube.apply(_recipe("unseen", namespace, "anything-at-all"))
        kube.create(workload("from-recipe", namespace, model=None, recipe={"name": "unseen"}))
        # a workload from before the map: an update keeping its names is admitted, a new one is not
        _merge(kube, namespace, "legacy", {"state": "Stopped", "replicas": 1})
        renamed = refused(lambda: _merge(kube, namespace, "legacy", {"model": {"aliases": ["new-outside"]}}))
        assert '"new-outside"' in renamed.message
        stored = get_workload(kube, namespace, "legacy")
        assert stored is not None
        assert stored["spec"]["state"] == "Stopped"
        assert "aliases" not in stored["spec"]["model"]
    # the policy gone, the same name is admitted again
    kube.wait(
        lambda: _admitted(
            kube, workload("after", namespace, model={"name": MODEL, "servedName": "grab-this"})
        ),
        timeout=30,
        what="admission without the policy",
    )


def _admitted(kube: KubeApi, manifest: dict[str, Any]) -> bool | None:
    try:
        kube.create(manifest)
    except ApiError:
        time.sleep(0.5)
        return None
    return True


class _ClosingSource(KubeRoutingSource):
    """The gateway's Kubernetes source, closing its connection with it (on the gateway's loop)."""

    def __init__(self, conn: KubeConnection, **options: Any) -> None:
        super().__init__(conn, **options)
        self.conn = conn

    async def close(self) -> None:
        await super().close()
        await self.conn.close()


def test_a_squatter_does_not_receive_the_victims_traffic(
    kube: KubeApi,
    kubectl: Kubectl,
    testbed: plane.Testbed,
    namespace: str,
    second_namespace: str,
    operator_factory: Factory,
    start_gateway: StartGateway,
    netns_network: None,
    tmp_path: Path,
) -> None:
    victim_ns, squatter_ns = namespace, second_namespace
    wanted = "vp-assistant"
    prefixes = {victim_ns: ["vp-"], squatter_ns: ["sq-"]}
    policy = namepolicy.parse(prefixes)
    with names_admission(kube, tmp_path, prefixes):
        # B, first: a Stopped workload claiming A's name through its Recipe (no GPU, no pod)
        # the spec route is closed: B may not name A's model in its spec
        spec_squat = first_refusal(
            lambda name: kube.create(
                workload(name, squatter_ns, model={"name": MODEL, "servedName": wanted})
            ),
            lambda name: kube.delete(API, "InferenceWorkload", name, namespace=squatter_ns),
            "A's name in B's spec",
        )
        assert f'"{wanted}" may not be claimed from namespace {squatter_ns}' in spec_squat.message
        # a Recipe's name admission cannot read: admitted
        kube.apply(_recipe("lure", squatter_ns, wanted))
        kube.create(workload("early-bird", squatter_ns, model=None, recipe={"name": "lure"}, state="Stopped"))
        operator_factory(victim_ns, "-n", squatter_ns, "--name-prefixes", json.dumps(prefixes))
        held = wait_condition(kube, squatter_ns, "early-bird", "Routable", "False", reason="NameNotAllowed")
        message = next(c["message"] for c in held["status"]["conditions"] if c["type"] == "Routable")
        assert f"'{wanted}' may not be claimed from namespace {squatter_ns}" in message
        assert "names starting with 'sq-'" in message
        assert held["status"]["model"]["servedName"] == wanted  # what its engine would serve
        # kubectl says so beside the name: served by its engine, not routed to it
        shown = _columns(kubectl, squatter_ns, "early-bird")
        assert (shown["SERVED"], shown["ROUTABLE"]) == (wanted, "False")

        # A, later: its workload serving the name is routed, the older squatter notwithstanding
        time.sleep(1.1)  # creationTimestamp has one-second resolution
        kube.create(
            workload(
                "assistant",
                victim_ns,
                model={"name": MODEL, "servedName": wanted},
                scheduling=ON_PROCESS_NODES,
            )
        )
        wait_condition(kube, victim_ns, "assistant", "Routable", reason="NamesAccepted", timeout=60)
        ready = wait_condition(kube, victim_ns, "assistant", "Ready", timeout=120)
        endpoint = ready["status"]["endpoints"][0]["url"].rstrip("/")

        source = _ClosingSource(
            KubeConnection(kubeconfig=str(testbed.kubeconfig)),
            namespace=[victim_ns, squatter_ns],
            name_policy=policy,
        )
        gw = start_gateway([], source=source)
        deadline = time.monotonic() + 30
        while (entry := source.snapshot().lookup(wanted)) is None or not entry.routable:
            assert time.monotonic() < deadline, f"{wanted} not routed: {source.snapshot()}"
            time.sleep(0.1)
        assert entry.key == f"{victim_ns}/assistant"
        assert entry.endpoints == (endpoint,)
        # the squatter is in the table (its namespace synced), with no name routed to it
        squatter_key, deadline = f"{squatter_ns}/early-bird", time.monotonic() + 30
        while not any(w.key == squatter_key for w in source.snapshot().workloads):
            assert time.monotonic() < deadline, f"{squatter_key} not listed: {source.snapshot()}"
            time.sleep(0.1)
        squatter = next(w for w in source.snapshot().workloads if w.key == squatter_key)
        assert squatter.names == (), squatter
        assert all(w.names == () for w in source.snapshot().workloads if w.namespace == squatter_ns)

        answer = httpx.post(
            f"{gw.url}/v1/chat/completions",
            json={
                "model": wanted,
                "messages": [{"role": "user", "content": "Who answers?"}],
                "max_tokens": 8,
            },
            timeout=30,
        )
        assert answer.status_code == 200, answer.text
        assert answer.json()["model"] == wanted
        assert answer.json()["choices"][0]["message"]["content"]
        # the squatter was neither woken nor routed
        squatter = get_workload(kube, squatter_ns, "early-bird")
        assert squatter is not None
        assert squatter["spec"]["state"] == "Stopped"
        wait_condition(
            kube, squatter_ns, "early-bird", "Routable", "False", reason="NameNotAllowed", timeout=10
        )


async def test_the_daemon_api_lists_only_the_names_the_gateway_routes(
    kube: KubeApi, testbed: plane.Testbed, namespace: str
) -> None:
    """``proxy.models`` (the daemon API's view of what the gateway serves) leaves out a name the
    policy withholds, as the gateway does, and keeps the allowed ones; imperative aliases too."""
    policy = namepolicy.parse({namespace: ["dx-"]})
    for workload_name, recipe, served in (("lured", "lure-d", "elsewhere-d"), ("kept", "fine-d", "dx-fine")):
        kube.apply(_recipe(recipe, namespace, served))
        kube.create(workload(workload_name, namespace, model=None, recipe={"name": recipe}))
        kube.request(
            "PATCH",
            kube.resource_path(API, "InferenceWorkload", namespace=namespace, name=workload_name) + "/status",
            json={
                "status": {
                    "model": {"name": MODEL, "servedName": served},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "Ready",
                            "message": "",
                            "lastTransitionTime": "2026-12-06T00:00:00Z",
                        }
                    ],
                }
            },
            headers={"Content-Type": "application/merge-patch+json"},
        )
    kube.apply(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": keys.GATEWAY_ALIASES_CONFIG_MAP, "namespace": namespace},
            "data": {"aliases.json": json.dumps({"dx-alias": "dx-fine", "other-alias": "dx-fine"})},
        }
    )
    conn = KubeConnection(kubeconfig=str(testbed.kubeconfig))
    try:
        rest = await conn.kube()
        listed: dict[str, set[str]] = {}
        for label, settings in (
            ("policy", Settings(namespace=namespace, name_policy=policy)),
            ("open", Settings(namespace=namespace)),
        ):
            ctx = OperationContext(rest=rest, settings=settings, principal="tenancy-test")
            rows = await proxy.models(ctx, {})
            listed[label] = {row["model_name"] for row in rows}
    finally:
        await conn.close()
    assert listed["policy"] == {"dx-fine", "dx-alias"}
    assert listed["open"] == {"dx-fine", "elsewhere-d", "dx-alias", "other-alias"}
