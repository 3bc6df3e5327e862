"""The project's Kubernetes client (``k8s/client.py``) against the testbed's apiserver.

Tested: server-side apply as ``sparkrun-operator`` with an owner reference (and idempotence),
typed errors with the cause chained (NotFound, AlreadyExists, Invalid, Unavailable for a closed
port, on calls, watches and streams; Gone is in ``test_informer.py``), deletes with a UID
precondition refusing a recreated object, merge patches of the status subresource, listing
with a label selector and across pages, the field manager on every kind of write, and
``status_patch`` nulling fields that disappeared.
"""

from __future__ import annotations

import socket
from typing import Any

import aiohttp
import pytest

from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.api.workload import InferenceWorkloadStatus
from sparkrun_operator.controllers.status import status_patch
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube, connect
from sparkrun_operator.k8s.resources import CONFIG_MAPS, SERVICES, resource_of
from sparkrun_testbed import plane

WORKLOADS = resource_of(INFERENCE_WORKLOAD)


def _service(namespace: str, name: str = "svc") -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace, "labels": {"sparkrun.dev/workload": "w"}},
        "spec": {"selector": {"a": "b"}, "ports": [{"name": "http", "port": 8000, "targetPort": 8000}]},
    }


async def _kube(testbed: plane.Testbed) -> Kube:
    return Kube(await connect(kubeconfig=str(testbed.kubeconfig)), field_manager="sparkrun-operator")


async def test_apply_owner_and_typed_errors(testbed: plane.Testbed, crds: list[str], namespace: str) -> None:
    kube = await _kube(testbed)
    try:
        owner_doc = await kube.create(
            WORKLOADS,
            {
                "apiVersion": INFERENCE_WORKLOAD.api_version,
                "kind": "InferenceWorkload",
                "metadata": {"name": "owner", "namespace": namespace},
                "spec": {"model": {"name": "m/m"}},
            },
        )
        owner = {
            "apiVersion": INFERENCE_WORKLOAD.api_version,
            "kind": "InferenceWorkload",
            "name": "owner",
            "uid": owner_doc["metadata"]["uid"],
            "controller": True,
        }
        applied = await kube.apply(SERVICES, _service(namespace), owner=owner)
        assert applied["metadata"]["ownerReferences"][0]["uid"] == owner["uid"]
        managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
        assert "sparkrun-operator" in managers
        again = await kube.apply(SERVICES, _service(namespace), owner=owner)
        assert again["metadata"]["resourceVersion"] == applied["metadata"]["resourceVersion"]  # no-op

        assert await kube.get(SERVICES, "absent", namespace) is None
        with pytest.raises(errors.KubeNotFound) as missing:
            await kube.merge_patch(SERVICES, "absent", {"metadata": {"labels": {"x": "y"}}}, namespace)
        assert missing.value.status == 404
        with pytest.raises(errors.KubeAlreadyExists):
            await kube.create(SERVICES, _service(namespace))
        bad = _service(namespace, "bad")
        bad["spec"] = {"ports": [{"port": 99999}]}
        with pytest.raises(errors.KubeInvalid) as invalid:
            await kube.apply(SERVICES, bad)
        assert "99999" in invalid.value.message

        listed = await kube.list(SERVICES, namespace, label_selector="sparkrun.dev/workload=w")
        assert [s["metadata"]["name"] for s in listed] == ["svc"]

        # the status subresource, and a status patch that removes a field
        status = InferenceWorkloadStatus(phase="Running", revision="abc")
        await kube.merge_patch(
            WORKLOADS, "owner", {"status": status_patch(None, status)}, namespace, subresource="status"
        )
        current = (await kube.get(WORKLOADS, "owner", namespace) or {})["status"]
        assert current["phase"] == "Running"
        patch = status_patch(current, InferenceWorkloadStatus(phase="Running"))
        assert patch is not None
        assert patch["revision"] is None
        await kube.merge_patch(WORKLOADS, "owner", {"status": patch}, namespace, subresource="status")
        current = (await kube.get(WORKLOADS, "owner", namespace) or {})["status"]
        assert "revision" not in current
        assert status_patch(current, InferenceWorkloadStatus(phase="Running")) is None
    finally:
        await kube.close()


async def test_delete_with_uid_precondition(testbed: plane.Testbed, namespace: str) -> None:
    kube = await _kube(testbed)
    try:
        first = await kube.apply(SERVICES, _service(namespace))
        old_uid = first["metadata"]["uid"]
        assert await kube.delete(SERVICES, "svc", namespace, uid=old_uid, propagation="Background")
        await kube.create(SERVICES, _service(namespace))  # a new object reuses the name
        with pytest.raises(errors.KubeConflict):
            await kube.delete(SERVICES, "svc", namespace, uid=old_uid, propagation="Foreground")
        assert await kube.get(SERVICES, "svc", namespace) is not None
        assert not await kube.delete(SERVICES, "never-was", namespace, propagation="Background")
    finally:
        await kube.close()


async def test_unreachable_apiserver_chains_the_cause(testbed: plane.Testbed) -> None:
    kube = await _kube(testbed)
    try:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        kube.api.configuration.host = f"https://127.0.0.1:{port}"
        with pytest.raises(errors.KubeUnavailable) as down:
            await kube.get(SERVICES, "svc", "default")
        assert isinstance(down.value.__cause__, aiohttp.ClientError)
        assert down.value.method == "GET"
        assert down.value.status == 0
        with pytest.raises(errors.KubeUnavailable) as listing:
            await kube.list(SERVICES, "default")
        assert isinstance(listing.value.__cause__, aiohttp.ClientError)
        with pytest.raises(errors.KubeUnavailable) as watching:
            async for _ in kube.watch(SERVICES, "default"):
                pass
        assert isinstance(watching.value.__cause__, aiohttp.ClientError)
        with pytest.raises(errors.KubeUnavailable) as streaming:
            async for _ in kube.stream_lines("/api/v1/namespaces/default/pods/p/log"):
                pass
        assert isinstance(streaming.value.__cause__, aiohttp.ClientError)
    finally:
        await kube.close()


async def test_lists_are_paginated(testbed: plane.Testbed, namespace: str) -> None:
    kube = await _kube(testbed)
    try:
        names = [f"cm-{i:03d}" for i in range(120)]
        for name in names:
            await kube.create(
                CONFIG_MAPS,
                {
                    "apiVersion": "v1",
                    "kind": "ConfigMap",
                    "metadata": {"name": name, "labels": {"page": "test"}},
                    "data": {"i": name},
                },
                namespace,
            )
        pages: list[str | None] = []
        original = kube.request

        async def counting(method: str, path: str, **kwargs: object) -> object:
            query = kwargs.get("query") or {}
            assert isinstance(query, dict)
            pages.append(query.get("continue"))
            return await original(method, path, **kwargs)  # type: ignore[arg-type]

        kube.request = counting  # type: ignore[method-assign]
        listing = await kube.list_versioned(CONFIG_MAPS, namespace, label_selector="page=test", limit=50)
        assert sorted(o["metadata"]["name"] for o in listing.items) == names
        assert len(pages) == 3  # 50 + 50 + 20
        assert pages[0] is None
        assert all(pages[1:])
        assert listing.resource_version
    finally:
        await kube.close()


def _without_managed(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj["metadata"].items() if k != "managedFields"}


async def test_every_write_names_the_field_manager(testbed: plane.Testbed, namespace: str) -> None:
    raw = await connect(kubeconfig=str(testbed.kubeconfig))
    kube = Kube(raw, field_manager="sparkrun-daemon-api")
    try:
        created = await kube.create(
            CONFIG_MAPS,
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "fm"}, "data": {"x": "0"}},
            namespace,
        )
        patched = await kube.merge_patch(CONFIG_MAPS, "fm", {"data": {"a": "1"}}, namespace)
        replaced = await kube.as_manager("sparkrun-gateway").replace(
            CONFIG_MAPS,
            "fm",
            {**patched, "metadata": _without_managed(patched), "data": {**patched["data"], "b": "2"}},
            namespace,
        )
        applied = await kube.as_manager("sparkrun-operator").apply(
            CONFIG_MAPS, {"metadata": {"name": "fm", "namespace": namespace}, "data": {"c": "3"}}
        )
        for obj in (created, patched, replaced, applied):
            managers = {m["manager"] for m in obj["metadata"]["managedFields"]}
            assert managers <= {"sparkrun-daemon-api", "sparkrun-gateway", "sparkrun-operator"}, managers
        final = {m["manager"]: m["operation"] for m in applied["metadata"]["managedFields"]}
        assert final["sparkrun-operator"] == "Apply"
        assert final["sparkrun-gateway"] == "Update"
        assert final["sparkrun-daemon-api"] == "Update"
        with pytest.raises(ValueError, match="field manager"):
            Kube(raw, field_manager="")
    finally:
        await kube.close()


def test_errors_from_responses() -> None:
    body = b'{"kind":"Status","reason":"AlreadyExists","message":"exists"}'
    error = errors.from_response(status=409, body=body, method="POST", path="/x")
    assert isinstance(error, errors.KubeAlreadyExists)
    assert str(error) == "POST /x: 409 AlreadyExists: exists"
    assert isinstance(
        errors.from_response(status=409, body=b"{}", method="DELETE", path="/x"), errors.KubeConflict
    )
    assert isinstance(
        errors.from_response(status=503, body=b"busy", method="GET", path="/x"), errors.KubeUnavailable
    )
    busy = errors.from_response(status=429, body=None, method="GET", path="/x", retry_after="3")
    assert isinstance(busy, errors.KubeTooManyRequests)
    assert isinstance(busy, errors.KubeUnavailable)
    assert busy.retry_after == 3.0
    assert isinstance(errors.from_response(status=410, body=b"{}", method="GET", path="/x"), errors.KubeGone)
    refused = errors.from_response(status=403, body=b"{}", method="GET", path="/x")
    assert isinstance(refused, errors.KubeForbidden)
    bad = errors.from_response(status=400, body=b"not json", method="GET", path="/x")
    assert type(bad) is errors.KubeBadRequest
    assert bad.message == "not json"
    plain = errors.from_response(status=405, body=b"{}", method="GET", path="/x")
    assert type(plain) is errors.KubeError
