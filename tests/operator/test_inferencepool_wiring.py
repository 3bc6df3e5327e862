"""The operator's InferencePool wiring (issue 30): its flags, the discovery decision at start on
the testbed's real apiserver, and which lane a pool's or picker's event pokes.

The whole flow (a pool and a picker per workload, PoolAccepted from a gateway's status, opt-out,
a foreign pool left alone) is ``tests/operator/test_inferencepool.py``.
"""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from sparkrun_operator.cli.operator import _endpoint_picker
from sparkrun_operator.controllers import inferencepools
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.metrics import Metrics
from sparkrun_operator.controllers.workload_pokes import full_key, status_key
from sparkrun_operator.k8s.client import Kube, connect
from sparkrun_operator.k8s.resources import CRDS
from sparkrun_operator.render import keys
from sparkrun_operator.render.inferencepool import PICKER_IMAGE, PickerSettings, PoolSettings
from sparkrun_testbed import plane

REPO = Path(__file__).resolve().parents[2]
VENDORED_CRD = REPO / "helm" / "sparkrun-operator" / "files" / "inferencepool-crd.yaml"


# -- the flags ----------------------------------------------------------------------------------


def test_endpoint_picker_flag_sets_every_setting() -> None:
    raw = (
        '{"image": "example.test/epp:v1.5.0", "clusterRole": "team-endpoint-picker",'
        ' "resources": {"requests": {"cpu": "50m"}}, "nodeSelector": {"pool": "cpu"},'
        ' "tolerations": [{"key": "cpu-only", "operator": "Exists"}]}'
    )
    settings = _endpoint_picker(raw)
    assert settings == PickerSettings(
        image="example.test/epp:v1.5.0",
        cluster_role="team-endpoint-picker",
        resources={"requests": {"cpu": "50m"}},
        node_selector={"pool": "cpu"},
        tolerations=({"key": "cpu-only", "operator": "Exists"},),
    )
    assert _endpoint_picker("{}") == PickerSettings()
    assert PickerSettings().image == PICKER_IMAGE


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("not json", "not JSON"),
        ("[]", "an object"),
        ('{"surprise": 1}', "an object with some of"),
        ('{"image": ""}', "image"),
        ('{"image": 3}', "image"),
        ('{"clusterRole": "' + "r" * 600 + '"}', "clusterRole"),
        ('{"nodeSelector": {"a": 1}}', "nodeSelector"),
        ('{"tolerations": {}}', "tolerations"),
        ('{"resources": {"claims": []}}', "resources"),
    ],
)
def test_endpoint_picker_flag_refuses_malformed(raw: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        _endpoint_picker(raw)


# -- which lane an event pokes -------------------------------------------------------------------


def _memo() -> Memo:
    # NB: never used for a request here: only its triggers
    return Memo(config=Any, kube=Any, http=httpx.AsyncClient(), metrics=Metrics())  # type: ignore[arg-type]


def _pool(*, hash_: str = "h1", owner: str = "u-1", parents: list[Any] | None = None) -> dict[str, Any]:
    return {
        "kind": "InferencePool",
        "metadata": {
            "name": "chat",
            "namespace": "team-a",
            "uid": "pool-1",
            "labels": {keys.LABEL_INFERENCE_POOL: "chat"},
            "annotations": {keys.ANNOTATION_POOL_HASH: hash_},
            "ownerReferences": [{"uid": owner, "controller": True}],
        },
        "status": {"parents": parents or []},
    }


async def test_a_pool_change_pokes_the_full_lane_and_a_status_change_the_status_lane() -> None:
    ctx = _memo()
    full, status = (
        ctx.triggers.register(full_key("team-a", "chat")),
        ctx.triggers.register(status_key("team-a", "chat")),
    )
    seen: dict[Any, Any] = {}
    key = ("team-a", "chat")

    def event(body: dict[str, Any] | None) -> tuple[bool, bool]:
        full.clear()
        status.clear()
        inferencepools.poke(ctx, seen, key, inferencepools.pool_marks(body))
        return full.is_set(), status.is_set()

    assert event(_pool()) == (True, False)  # it appeared
    assert event(_pool()) == (False, False)  # the same again (a resync)
    accepted = [{"parentRef": {"name": "gw"}, "conditions": [{"type": "Accepted", "status": "True"}]}]
    assert event(_pool(parents=accepted)) == (False, True)  # a gateway accepted it
    assert event(_pool(hash_="h2", parents=accepted)) == (True, False)  # edited by someone else
    assert event(_pool(owner="someone", hash_="h2", parents=accepted)) == (True, False)
    assert event(None) == (True, False)  # deleted
    assert seen == {}
    await ctx.http.aclose()


async def test_a_picker_becoming_ready_pokes_the_status_lane() -> None:
    ctx = _memo()
    full, status = (
        ctx.triggers.register(full_key("team-a", "chat")),
        ctx.triggers.register(status_key("team-a", "chat")),
    )
    seen: dict[Any, Any] = {}
    deployment: dict[str, Any] = {
        "kind": "Deployment",
        "metadata": {
            "name": "chat-epp",
            "namespace": "team-a",
            "uid": "d-1",
            "labels": {
                keys.LABEL_INFERENCE_POOL: "chat",
                keys.LABEL_COMPONENT: keys.COMPONENT_ENDPOINT_PICKER,
            },
            "annotations": {keys.ANNOTATION_POOL_HASH: "h"},
        },
        "status": {},
    }
    assert inferencepools.workload_of(deployment) == ("team-a", "chat")
    full.clear()  # NB: a registered trigger starts set (its first pass)
    status.clear()
    inferencepools.poke(ctx, seen, ("team-a", "chat"), inferencepools.picker_marks(deployment), mark_key="d")
    assert full.is_set()
    assert not status.is_set()
    full.clear()
    deployment["status"] = {"readyReplicas": 1, "availableReplicas": 1, "observedGeneration": 1}
    inferencepools.poke(ctx, seen, ("team-a", "chat"), inferencepools.picker_marks(deployment), mark_key="d")
    assert status.is_set()
    assert not full.is_set()
    assert inferencepools.workload_of({"metadata": {"namespace": "x", "labels": {}}}) is None
    await ctx.http.aclose()


# -- the discovery decision on the real apiserver -----------------------------------------------------


@pytest.fixture
async def kube_client(testbed: plane.Testbed) -> AsyncIterator[Kube]:
    kube = Kube(await connect(kubeconfig=str(testbed.kubeconfig)), field_manager="sparkrun-operator")
    yield kube
    await kube.close()


async def test_discovery_follows_what_the_apiserver_serves(kube_client: Kube) -> None:
    """``off`` asks nothing; ``auto`` says served exactly when discovery lists inferencepools in
    ``inference.networking.k8s.io/v1`` (the vendored v1.5.0 CRD, applied here as the chart's
    ``inferencePool.installCRD`` would)."""
    off = await inferencepools.discover(kube_client, PoolSettings(mode="off", served=True))
    assert not off.served
    assert not off.manages
    assert "off" in inferencepools.describe(off)
    # a group the apiserver does not serve at all: a 404 is "not served", not an error
    missing = await kube_client.request("GET", "/apis")
    groups = {g.get("name") for g in missing.get("groups") or []}
    assert "no-such-group.sparkrun.dev" not in groups

    crd = yaml.safe_load(VENDORED_CRD.read_text())
    assert crd["metadata"]["name"] == "inferencepools.inference.networking.k8s.io"
    await kube_client.apply(CRDS, crd)
    for _ in range(100):
        decided = await inferencepools.discover(kube_client, PoolSettings())
        if decided.served:
            break
        await asyncio.sleep(0.2)
    assert decided.served
    assert decided.manages
    assert "one per workload" in inferencepools.describe(decided)
    not_served = PoolSettings(mode="auto", served=False)
    assert inferencepools.HOW_TO_INSTALL in inferencepools.describe(not_served)
