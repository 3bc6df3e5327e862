"""Where the operator's Hub token goes (issue 23, ADR 0040): only to the endpoints the
administrator allows (``--credential-endpoints``, chart value ``operator.credentials.allowedEndpoints``;
default the public Hub only); every other endpoint gets anonymous requests.

The shim and the operator run on the testbed with the chart's RBAC and ``--hub-token-secret``
(its Secret holds the local Hub's token); tool Jobs run the real downloader as processes in the
pods' network namespaces. A recording server on the process nodes' ``InternalIP`` (the host
address pods reach, where the local Hub listens too) stands in for a caller's own server: it
records every request and its ``Authorization`` header and answers 404.

- a read-scope caller's ``model_cache.resolve`` with ``endpoint`` at its own server;
- an operate-scope caller's ``model_cache.import`` of a manifest that names its own server as the
  origin, then ``model_cache.repair`` (no ``endpoint``: the downloader takes the manifest's);
- with the local Hub on the allowlist, its private repository still resolves (with the token).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.hfhub import PRIVATE, TINY, TOKEN, Hub, default_repos
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.canned import Answer, CannedServer, Seen
from tests.conftest import Require
from tests.operator.test_modelcache import MOUNT, ON_PROCESS_NODES, _node_ip, bound_claim
from tests.process.helpers import network_mode
from tests.shim.conftest import Daemon, start_daemon, stop_daemon

CLAIM = "creds"
SECRET = "hub-token"
COMMIT = "c0ffee" * 6 + "c0ff"

#: What the recording server answers: the Hub's "no such repository".
NO_REPOSITORY = Answer(
    404,
    b'{"error":"Repository not found"}',
    {"Content-Type": "application/json", "X-Error-Code": "RepoNotFound"},
)


def with_token(server: CannedServer) -> list[Seen]:
    """The requests that carried the operator's Hub token."""
    return [s for s in server.requests() if TOKEN in s.authorization]


@dataclass
class Servers:
    hub: Hub
    recorder: CannedServer


@pytest.fixture(scope="module")
def servers(testbed: Testbed, crds: list[str], kube: KubeApi) -> Iterator[Servers]:
    Require()(
        network_mode(testbed.run_dir) == "netns",
        "process-node pods run with loopback addresses here (no privilege for network namespaces)",
    )
    host = _node_ip(kube)
    with (
        CannedServer(host, NO_REPOSITORY) as recorder,
        Hub(default_repos(lfs_mib=1, tokenizer=False), tokens=[TOKEN], host=host) as hub,
    ):
        yield Servers(hub, recorder)


def _daemon(testbed: Testbed, kube: KubeApi, workdir: Path, *extra: str) -> Daemon:
    args = (
        "--cache-mount-path",
        MOUNT,
        "--cache-tool-scheduling",
        json.dumps(ON_PROCESS_NODES),
        "--hub-token-secret",
        SECRET,
        *extra,
    )
    daemon = start_daemon(testbed, kube, workdir, extra_operator_args=args, chart_rbac=True)
    kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": SECRET, "namespace": daemon.namespace},
            "stringData": {"token": TOKEN},
        }
    )
    return daemon


@pytest.fixture(scope="module")
def default_daemon(
    testbed: Testbed, kube: KubeApi, servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    """The operator as installed by default: a hub token, and no allowlist flag (the public Hub)."""
    workdir = tmp_path_factory.mktemp("creds-default")
    daemon = _daemon(testbed, kube, workdir)
    pv = None
    try:
        pv = bound_claim(kube, workdir / "pv", daemon.namespace, CLAIM)
        yield daemon
    except BaseException:
        print(daemon.runner.logs())
        raise
    finally:
        stop_daemon(daemon)
        if pv is not None:
            kube.delete("v1", "PersistentVolume", pv)


def _finished(daemon: Daemon, who: str, op: str, args: dict[str, Any]) -> dict[str, Any]:
    job: dict[str, Any] = daemon.wait_job(daemon.submit(who, op, args), who, timeout=180)
    return job


def test_a_read_caller_cannot_send_the_operator_token_to_its_own_server(
    default_daemon: Daemon, servers: Servers
) -> None:
    recorder = servers.recorder
    before = len(recorder.requests())
    job = _finished(
        default_daemon, "reader", "model_cache.resolve", {"model": TINY, "endpoint": recorder.url}
    )
    assert job["state"] == "failed", json.dumps(job)[:2000]  # the recorder has no repository
    arrived = recorder.requests()[before:]
    assert arrived, "the tool Job never reached the recording server"
    assert [s for s in arrived if s.path.startswith(f"/api/models/{TINY}")], arrived
    assert with_token(recorder) == [], "the operator's Hub token reached the caller's server"
    assert all(s.authorization == "" for s in arrived), arrived


def test_an_imported_origin_does_not_take_the_token_to_repair(
    default_daemon: Daemon, servers: Servers
) -> None:
    recorder = servers.recorder
    manifest = {
        "repo": TINY,
        "revision": COMMIT,
        "endpoint": recorder.url,
        "files": [
            {"path": "config.json", "size": 12, "checksum_algorithm": "git-sha1", "checksum": "0" * 40}
        ],
    }
    imported = _finished(
        default_daemon,
        "operator",
        "model_cache.import",
        {"cache_dir": CLAIM, "model": TINY, "revision": COMMIT, "manifest": manifest},
    )
    assert imported["state"] == "succeeded", json.dumps(imported)[:2000]
    assert imported["result"][0]["complete"] is False
    before = len(recorder.requests())
    repaired = _finished(
        default_daemon,
        "operator",
        "model_cache.repair",
        {"cache_dir": CLAIM, "model": TINY, "revision": COMMIT},
    )
    assert repaired["state"] == "failed", json.dumps(repaired)[:2000]  # nothing to fetch there
    arrived = recorder.requests()[before:]
    assert [s for s in arrived if f"/{TINY}/resolve/{COMMIT}/config.json" in s.path], arrived
    assert with_token(recorder) == [], "the operator's Hub token followed the imported manifest's origin"


def test_the_allowed_hub_still_gets_the_token(
    testbed: Testbed, kube: KubeApi, servers: Servers, tmp_path_factory: pytest.TempPathFactory
) -> None:
    allowed = json.dumps({"huggingFace": [servers.hub.url]})
    daemon = _daemon(
        testbed, kube, tmp_path_factory.mktemp("creds-allowed"), "--credential-endpoints", allowed
    )
    try:
        job = _finished(
            daemon, "reader", "model_cache.resolve", {"model": PRIVATE, "endpoint": servers.hub.url}
        )
        assert job["state"] == "succeeded", json.dumps(job)[:2000]  # private: found only with the token
        assert job["result"]["repo"] == PRIVATE
        assert {f["path"] for f in job["result"]["files"]} >= {"config.json", "model.safetensors"}
        # the same operator still keeps it from anywhere else
        before = len(servers.recorder.requests())
        other = _finished(
            daemon, "reader", "model_cache.resolve", {"model": PRIVATE, "endpoint": servers.recorder.url}
        )
        assert other["state"] == "failed"
        assert servers.recorder.requests()[before:], "the tool Job never reached the recording server"
        assert with_token(servers.recorder) == []
    except BaseException:
        print(daemon.runner.logs())
        raise
    finally:
        stop_daemon(daemon)
