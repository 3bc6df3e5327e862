"""``sparkrun-k8s upgrade --check`` over hostile stored objects, against a loopback apiserver
(review of issue 28, item 5).

A loopback HTTP server plays the apiserver's list endpoints of the six kinds. The check lists in
small pages (a page of the largest objects etcd keeps, decoded, must fit the hook pod's memory
limit with room for the evaluator), and an object the client cannot decode (nested beyond
Python's recursion) fails the check naming its kind: a finding and exit 5, never a traceback.
"""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from aiohttp import web

from sparkrun_operator.api.resources import KINDS
from sparkrun_operator.api.upgradecheck import crds_of
from sparkrun_operator.cli.common import EXIT_REFUSED
from sparkrun_operator.cli.main import build_parser
from sparkrun_operator.cli.upgrade import PAGE, chart_files, check_cluster
from sparkrun_operator.k8s.resources import resource_of
from tests.corpus import VALID

CHART = Path(__file__).resolve().parents[2] / "helm" / "sparkrun-operator"
#: etcd's default request limit: the largest object the apiserver stores.
ETCD_MAX_OBJECT = 3 << 19  # 1.5 MiB
MIB = 1 << 20


@dataclass
class Server:
    url: str = ""
    limits: list[str] = field(default_factory=list)
    #: plural -> the pages it answers (raw JSON bodies), in order
    pages: dict[str, list[bytes]] = field(default_factory=dict)


def _list(items: list[Any], token: str | None = None) -> bytes:
    meta = {"continue": token} if token else {}
    return json.dumps({"kind": "List", "metadata": meta, "items": items}).encode()


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    found = Server()

    async def listing(request: web.Request) -> web.Response:
        found.limits.append(request.query.get("limit", ""))
        pages = found.pages.get(request.match_info["plural"], [_list([])])
        index = int(request.query.get("continue") or 0)
        return web.Response(body=pages[index], content_type="application/json")

    app = web.Application()
    app.router.add_get("/apis/sparkrun.dev/v1alpha1/{plural}", listing)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    found.url = f"http://127.0.0.1:{runner.addresses[0][1]}"
    try:
        yield found
    finally:
        await runner.cleanup()


def _kubeconfig(tmp_path: Path, url: str) -> str:
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return str(path)


async def test_an_object_nested_beyond_decoding_fails_the_check_naming_its_kind(
    tmp_path: Path, server: Server
) -> None:
    job = json.loads(json.dumps(next(d for d in VALID if d["kind"] == "DaemonJob")))
    job["metadata"]["namespace"] = "team-a"
    deep = b'{"kind": "List", "metadata": {}, "items": [{"spec": {"arguments": {"x": ' + b"[" * 5000
    deep += b"]" * 5000 + b"}}}]}"
    server.pages["daemonjobs"] = [_list([job], token="1"), deep]
    args = build_parser(only="upgrade").parse_args(
        ["upgrade", "--check", "--chart", str(CHART), "--kubeconfig", _kubeconfig(tmp_path, server.url)]
    )
    report = await check_cluster(args, crds_of(chart_files(CHART)))
    assert report.exit_code() == EXIT_REFUSED
    [finding] = report.findings
    assert (finding.kind, finding.problem) == ("DaemonJob", "unreadable")
    assert "nested too deeply" in finding.message
    assert report.checked["DaemonJob"] == 1
    assert len(server.limits) == len(KINDS) + 1
    assert set(server.limits) == {str(PAGE)}


def _memory_limit() -> int:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    limit = values["upgradeCheck"]["resources"]["limits"]["memory"]
    assert limit.endswith("Mi")
    return int(limit.removesuffix("Mi")) * MIB


def test_a_page_of_the_largest_objects_fits_the_hooks_memory_limit() -> None:
    """The costliest JSON to decode is small containers (an empty list: 2 bytes of JSON, 56 of
    Python); a page of such objects at etcd's limit, decoded, takes at most half of the hook
    pod's memory limit (the rest: the interpreter, the CRD schemas, one object's evaluation)."""
    plural = resource_of(KINDS[0]).plural
    one = b'{"spec": {"arguments": {"x": [' + b",".join([b"[]"] * (ETCD_MAX_OBJECT // 3 - 20)) + b"]}}}"
    assert len(one) <= ETCD_MAX_OBJECT
    page = b'{"kind": "List", "items": [' + b",".join([one] * PAGE) + b"]}"
    tracemalloc.start()
    try:
        decoded = json.loads(page)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(decoded["items"]) == PAGE, plural
    assert peak <= _memory_limit() // 2, (peak // MIB, PAGE)
