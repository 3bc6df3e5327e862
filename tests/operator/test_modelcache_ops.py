"""The ten ``model_cache.*`` daemon operations end to end: the daemon API shim and the operator
(its DaemonJob executor) on the testbed, tool Jobs whose pods run the real cache tool and the
real downloader (``huggingface_hub``) as processes on a shared claim, against the local Hub.

One claim (``shared``, a ``hostPath`` PersistentVolume pre-bound to it) holds two ModelCaches of
the tiny model (the tag and ``main``), downloaded by the controller; the tests then list, pin by
ref name, inspect and repair a corrupted blob, adopt a snapshot another tool wrote, resolve and
import a manifest, prune with pins and claims protecting, and delete with its guards. Every
operation is also refused (403) to a principal one scope below the one it documents. The shim and the
operator run with exactly the chart's RBAC (``tests/shim/chart_rbac.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.hfhub import BRANCH, TAG, TINY, TOKEN, Hub, default_repos
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.conftest import Require
from tests.operator.conftest import API, workload
from tests.operator.test_modelcache import MOUNT, ON_PROCESS_NODES, _node_ip, bound_claim
from tests.process.helpers import network_mode
from tests.shim.conftest import Daemon, start_daemon, stop_daemon

CLAIM = "shared"
FOLDER = "models--sparkrun-test--tiny-model"


@dataclass
class Env:
    daemon: Daemon
    hub: Hub
    kube: KubeApi
    root: Path

    @property
    def ns(self) -> str:
        return self.daemon.namespace

    def call(self, who: str, op: str, args: dict[str, Any], *, timeout: float = 180) -> dict[str, Any]:
        """Submit ``op`` as ``who`` and wait for the job; the final job view."""
        job_id = self.daemon.submit(who, op, args)
        job: dict[str, Any] = self.daemon.wait_job(job_id, who, timeout=timeout)
        return job

    def result(self, who: str, op: str, args: dict[str, Any]) -> Any:
        job = self.call(who, op, args)
        assert job["state"] == "succeeded", json.dumps(job)[:3000]
        return job["result"]

    def cache(self, name: str) -> dict[str, Any] | None:
        return self.kube.get(API, "ModelCache", name, namespace=self.ns)

    def snapshot(self, commit: str) -> Path:
        return self.root / "hub" / FOLDER / "snapshots" / commit


def _wait_ready(kube: KubeApi, ns: str, name: str, timeout: float = 150) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        obj = kube.get(API, "ModelCache", name, namespace=ns)
        phase = ((obj or {}).get("status") or {}).get("phase")
        assert phase != "Failed", obj
        return obj if phase == "Ready" else None

    found: dict[str, Any] = kube.wait(ready, timeout=timeout, what=f"ModelCache {name} Ready")
    return found


def _cache(name: str, ns: str, hub: Hub, revision: str) -> dict[str, Any]:
    source = {"repo": TINY, "revision": revision, "endpoint": hub.url}
    return {
        "apiVersion": API,
        "kind": "ModelCache",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "source": {"huggingFace": source},
            "storage": {"claimName": CLAIM},
            "verify": "sha256",
            "download": ON_PROCESS_NODES,
        },
    }


@pytest.fixture(scope="module")
def env(
    testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    Require()(
        network_mode(testbed.run_dir) == "netns",
        "process-node pods run with loopback addresses here (no privilege for network namespaces)",
    )
    workdir = tmp_path_factory.mktemp("mc-ops")
    root = workdir / "pv"
    extra = ("--cache-mount-path", MOUNT, "--cache-tool-scheduling", json.dumps(ON_PROCESS_NODES))
    daemon = start_daemon(testbed, kube, workdir, extra_operator_args=extra, chart_rbac=True)
    pv = f"{daemon.namespace}-{CLAIM}"
    try:
        with Hub(default_repos(lfs_mib=1, tokenizer=False), tokens=[TOKEN], host=_node_ip(kube)) as hub:
            bound_claim(kube, root, daemon.namespace, CLAIM)
            kube.apply(_cache("tiny-tag", daemon.namespace, hub, TAG))
            kube.apply(_cache("tiny-main", daemon.namespace, hub, "main"))
            _wait_ready(kube, daemon.namespace, "tiny-tag")
            _wait_ready(kube, daemon.namespace, "tiny-main")
            yield Env(daemon, hub, kube, root)
    except BaseException:
        print(daemon.runner.logs())
        raise
    finally:
        stop_daemon(daemon)
        kube.delete("v1", "PersistentVolume", pv)


# -- scopes -----------------------------------------------------------------------------------

#: Each operation, its documented scope's principal one below, and valid arguments.
BELOW = {"read": "nobody", "operate": "reader", "admin": "operator"}
OPS: dict[str, tuple[str, dict[str, Any]]] = {
    "model_cache.list": ("read", {"cache_dir": CLAIM}),
    "model_cache.inspect": ("read", {"cache_dir": CLAIM, "model": TINY}),
    "model_cache.resolve": ("read", {"model": TINY}),
    "model_cache.pin": ("operate", {"cache_dir": CLAIM, "model": TINY, "revision": TAG}),
    "model_cache.repair": ("operate", {"cache_dir": CLAIM, "model": TINY, "dry_run": True}),
    "model_cache.import": ("operate", {"cache_dir": CLAIM, "model": TINY, "fetch_manifest": True}),
    "model_cache.prune": ("admin", {"cache_dir": CLAIM}),
    "model_cache.reconcile": (
        "admin",
        {"cache_dir": CLAIM, "model": TINY, "revision": "a" * 40, "claim": "w", "confirm_inactive": True},
    ),
    "model_cache.adopt": ("admin", {"cache_dir": CLAIM, "all_models": True}),
    "model_cache.delete": ("admin", {"cache_dir": CLAIM, "model": TINY}),
}


def test_each_operation_is_refused_one_scope_below_its_own(env: Env) -> None:
    with env.daemon.http("admin") as client:  # NB: /v1/ops lists what the caller may call
        ops = {op["name"]: op for op in client.get("/v1/ops").json()}
    for name, (scope, args) in OPS.items():
        assert ops[name]["scope"] == scope, name
        with env.daemon.http(BELOW[scope]) as client:
            answer = client.post(f"/v1/ops/{name}", json=args)
        # the scope's refusal (detail only), not the typed refusal of a disabled operation
        assert (answer.status_code, answer.json()) == (403, {"detail": "Insufficient permission"}), name


# -- list, pin -------------------------------------------------------------------------------


def test_list_then_pin_by_ref_name(env: Env) -> None:
    repo = env.hub.repo(TINY)
    tag, main = repo.tags[TAG], repo.head
    [report] = env.result("reader", "model_cache.list", {"cache_dir": CLAIM})
    assert report["cache_root"] == CLAIM
    assert report["location"]["key"] == f"pvc/{env.ns}/{CLAIM}"
    assert report["location"]["kind"] == "network"
    entries = {e["revision"]: e for e in report["entries"]}
    assert set(entries) == {tag, main}
    assert all(e["tracked"] and e["present"] for e in entries.values())
    assert entries[tag]["usage"]["model_caches"] == ["tiny-tag"]
    assert entries[tag]["reason_code"] == "retention_age"  # downloaded just now
    assert entries[tag]["logical_bytes"] == sum(m.file.size for m in repo.tree(tag).values())
    assert report["free_bytes"] > 0

    [pinned] = env.result("operator", "model_cache.pin", {"cache_dir": CLAIM, "model": TINY, "revision": TAG})
    row = next(e for e in pinned["entries"] if e["revision"] == tag)
    assert (row["action"], row["pinned"], row["reason_code"]) == ("pin", True, "pinned")
    assert (env.cache("tiny-tag") or {})["spec"]["pinned"] is True
    # a ref the cache does not have and an untracked commit fail with what to do
    job = env.call("operator", "model_cache.pin", {"cache_dir": CLAIM, "model": TINY, "revision": "nope"})
    assert job["state"] == "failed"
    assert "no ref 'nope'" in json.dumps(job["error"])
    # a host path is refused at submission (422, no job); a missing claim needs the cluster
    assert "PersistentVolumeClaim" in env.daemon.refused_at_submission(
        "reader", "model_cache.list", {"cache_dir": "/models/hf"}
    )
    job = env.call("reader", "model_cache.list", {"cache_dir": "missing-claim"})
    assert job["state"] == "failed"
    assert "missing-claim not found" in json.dumps(job["error"])


# -- inspect, repair --------------------------------------------------------------------------


def test_inspect_finds_a_corrupted_blob_and_repair_refetches_only_it(env: Env) -> None:
    commit = env.hub.repo(TINY).head
    args = {"cache_dir": CLAIM, "model": TINY, "revision": "main"}
    weights = (env.snapshot(commit) / "model.safetensors").resolve()
    data = bytearray(weights.read_bytes())
    data[100] ^= 0xFF
    weights.write_bytes(bytes(data))  # same size: only checksums see it
    [quick] = env.result("reader", "model_cache.inspect", args)
    assert (quick["status"], quick["level"], quick["failures"]) == ("complete", "size", [])
    [deep] = env.result("reader", "model_cache.inspect", {**args, "checksums": True})
    assert deep["status"] == "incomplete"
    assert deep["failures"] == [{"path": "model.safetensors", "reason": "invalid"}]
    assert deep["manifest_id"] == f"{TINY}@{commit}"
    assert deep["checked_files"] == len(env.hub.repo(TINY).tree(commit))

    dry = env.result("operator", "model_cache.repair", {**args, "checksums": True, "dry_run": True})
    assert dry["bindings"][0]["report"]["status"] == "incomplete"
    env.hub.reset_stats()
    repaired = env.result("operator", "model_cache.repair", {**args, "checksums": True})
    [binding] = repaired["bindings"]
    assert binding["report"]["status"] == "complete"
    assert binding["report"]["failures"] == []
    assert repaired["manifest"]["revision"] == commit
    assert {f["path"] for f in repaired["manifest"]["files"]} == set(env.hub.repo(TINY).tree(commit))
    fetched = {k for k, s in env.hub.stats().items() if not k.startswith("api:") and s.bytes}
    assert fetched == {f"{TINY}/model.safetensors"}  # only the bad file came again


# -- resolve, import, adopt --------------------------------------------------------------------


def test_resolve_import_and_adopt_a_snapshot_written_by_another_tool(env: Env) -> None:
    repo = env.hub.repo(TINY)
    manifest = env.result(
        "reader", "model_cache.resolve", {"model": TINY, "revision": TAG, "endpoint": env.hub.url}
    )
    assert manifest["revision"] == repo.tags[TAG]
    assert {f["path"]: f["size"] for f in manifest["files"]} == {
        p: m.file.size for p, m in repo.tree(repo.tags[TAG]).items()
    }
    lfs = next(f for f in manifest["files"] if f["path"] == "model.safetensors")
    assert lfs["checksum_algorithm"] == "sha256"
    assert manifest["weight_files"] == ["model.safetensors"]

    # import into an empty directory of the claim: saved, incomplete, nothing downloaded
    env.hub.reset_stats()
    [imported] = env.result(
        "operator",
        "model_cache.import",
        {"cache_dir": f"{CLAIM}:/elsewhere", "model": TINY, "manifest": manifest},
    )
    assert (imported["status"], imported["complete"]) == ("incomplete", False)
    assert {f["reason"] for f in imported["failures"]} == {"missing"}
    assert (
        env.root / "elsewhere" / "sparkrun" / "manifests" / FOLDER / f"{manifest['revision']}.json"
    ).is_file()
    assert env.hub.bytes_served() == 0
    for bad, words in (
        ({"cache_dir": CLAIM, "model": TINY}, "fetch_manifest: true"),
        ({"cache_dir": CLAIM, "model": TINY, "fetch_manifest": True, "offline": True}, "offline: true"),
        ({"cache_dir": CLAIM, "model": "other/model", "manifest": manifest}, "is not model"),
    ):
        # refused at submission (the same check runs in the executor)
        assert words in env.daemon.refused_at_submission("operator", "model_cache.import", bad)

    # a snapshot written by plain huggingface_hub is untracked until adopted
    code = (
        "import huggingface_hub as h, sys;"
        f"print(h.snapshot_download({TINY!r}, revision={BRANCH!r}, cache_dir=sys.argv[1],"
        f" endpoint={env.hub.url!r}))"
    )
    written = subprocess.run(
        [sys.executable, "-c", code, str(env.root / "hub")],
        capture_output=True,
        text=True,
        env={**os.environ, "HF_HUB_DISABLE_XET": "1"},
        check=True,
        timeout=60,
    )
    dev = Path(written.stdout.strip()).name
    assert dev == repo.branches[BRANCH]
    args = {"cache_dir": CLAIM, "model": TINY, "revision": BRANCH, "pinned": True}
    [preview] = env.result("admin", "model_cache.adopt", args)
    assert [(e["revision"], e["action"], e["reason_code"]) for e in preview["entries"]] == [
        (dev, "would_adopt", "adoptable")
    ]
    assert preview["dry_run"] is True
    env.hub.reset_stats()
    [adopted] = env.result("admin", "model_cache.adopt", {**args, "dry_run": False})
    assert [e["action"] for e in adopted["entries"]] == ["adopted"]
    name = f"tiny-model-{dev[:8]}"
    cache = _wait_ready(env.kube, env.ns, name)
    assert cache["status"]["resolvedRevision"] == dev
    assert cache["spec"]["pinned"] is True
    assert env.hub.bytes_served() == 0  # adopted offline: not one file fetched
    [again] = env.result("admin", "model_cache.adopt", args)
    assert [e["reason_code"] for e in again["entries"]] == ["not_adoptable"]  # tracked now


# -- prune, reconcile, delete ------------------------------------------------------------------


def test_prune_and_delete_respect_pins_claims_and_allowed_revisions(env: Env) -> None:
    repo = env.hub.repo(TINY)
    tag, main = repo.tags[TAG], repo.head
    env.kube.apply(workload("user", env.ns, model={"name": TINY, "cacheRef": {"name": "tiny-main"}}))
    env.kube.wait(
        lambda: ((env.cache("tiny-main") or {}).get("status") or {}).get("claims") == ["user"],
        timeout=60,
        what="the workload's claim on tiny-main",
    )
    env.result(
        "operator", "model_cache.pin", {"cache_dir": CLAIM, "model": TINY, "revision": tag, "pinned": True}
    )
    [report] = env.result("admin", "model_cache.prune", {"cache_dir": CLAIM, "min_age_days": 0})
    codes = {e["revision"]: e["reason_code"] for e in report["entries"]}
    assert codes[tag] == "pinned"
    assert codes[main] == "workload_claim"
    assert report["planned_bytes"] == 0
    assert report["dry_run"] is True

    # the live claim cannot be released by reconcile
    job = env.call(
        "admin",
        "model_cache.reconcile",
        {"cache_dir": CLAIM, "model": TINY, "revision": main, "claim": "user", "confirm_inactive": True},
    )
    assert job["state"] == "failed"
    assert "InferenceWorkload user exists" in json.dumps(job["error"])

    env.result(
        "operator", "model_cache.pin", {"cache_dir": CLAIM, "model": TINY, "revision": tag, "pinned": False}
    )
    [preview] = env.result("admin", "model_cache.prune", {"cache_dir": CLAIM, "min_age_days": 0})
    actions = {e["revision"]: e["action"] for e in preview["entries"]}
    assert actions[tag] == "would_remove"
    assert actions[main] is None
    assert preview["planned_bytes"] > 0
    assert env.cache("tiny-tag") is not None
    assert env.snapshot(tag).is_dir()  # a preview changes nothing

    [applied] = env.result(
        "admin", "model_cache.prune", {"cache_dir": CLAIM, "min_age_days": 0, "dry_run": False}
    )
    assert {e["revision"]: e["action"] for e in applied["entries"]}[tag] == "removed"
    assert applied["reclaimed_bytes"] > 0
    assert applied["free_bytes_after_kind"] == "measured"
    assert env.cache("tiny-tag") is None
    assert not env.snapshot(tag).exists()
    assert env.snapshot(main).is_dir()
    assert (
        env.kube.get("v1", "PersistentVolumeClaim", CLAIM, namespace=env.ns) is not None
    )  # the location stays

    # delete: blocked by the claim, then by allowed_revisions, then done with force
    args = {"cache_dir": CLAIM, "model": TINY, "revision": main, "dry_run": False}
    [blocked] = env.result("admin", "model_cache.delete", args)
    assert [(e["reason_code"], e["action"]) for e in blocked["entries"]] == [("workload_claim", None)]
    assert blocked["target_met"] is False
    [guarded] = env.result("admin", "model_cache.delete", {**args, "force": True, "allowed_revisions": []})
    assert [e["reason_code"] for e in guarded["entries"]] == ["selection_changed"]
    assert env.snapshot(main).is_dir()
    [preview] = env.result("admin", "model_cache.delete", {**args, "dry_run": True, "force": True})
    assert [e["action"] for e in preview["entries"]] == ["would_delete"]
    [deleted] = env.result(
        "admin", "model_cache.delete", {**args, "force": True, "allowed_revisions": [main]}
    )
    assert [e["action"] for e in deleted["entries"]] == ["deleted"]
    assert not env.snapshot(main).exists()
    env.kube.wait(lambda: env.cache("tiny-main") is None, timeout=30, what="tiny-main gone")
