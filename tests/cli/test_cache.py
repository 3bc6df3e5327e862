"""``sparkrun-k8s cache`` as a user runs it, against the testbed with the real operator and the
daemon API shim: ModelCaches downloaded by real download Jobs (the real downloader on process
nodes) from the local Hub.

- ``ls``, ``ls -A``, ``-o json``: every cache with its model, resolved revision, phase, size,
  progress, pin and the workload using it; ``inspect``: files, storage, the user, conditions;
  an unknown name is exit 4; TAB completes a cache's name from the cluster;
- ``pin`` / ``pin --unpin`` round-trip ``spec.pinned`` (and say so when nothing changes);
- ``prune --dry-run`` (the daemon's ``model_cache.prune`` over the shim's own listener, a token
  from a file) lists the unused revision it would remove and why it keeps the one in use,
  removing nothing; ``inspect --files --verify`` lists each file with the digest the Hub serves
  and the check of the files on the volume;
- in a real terminal (tmux), ``cache ls --watch`` shows a progress bar that advances while a
  slowed download runs, a rate and ETA once sampled, 100% at Ready, and Ctrl-C ends it (130).
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sparkrun_testbed.hfhub import TAG, TINY, Hub, default_repos
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.cli.aggregated import private_file
from tests.cli.conftest import SPARKRUN_K8S
from tests.cli.tmux import Terminal
from tests.conftest import Require
from tests.operator.conftest import API, OperatorProcess, netns_network, workload  # noqa: F401
from tests.operator.test_modelcache import MOUNT, ON_PROCESS_NODES, _cache, _node_ip, bound_claim, host_volume
from tests.operator.test_modelcache_ops import CLAIM, _wait_ready
from tests.operator.test_modelcache_ops import _cache as shared_cache
from tests.process.helpers import network_mode
from tests.shim.conftest import Daemon, start_daemon, stop_daemon
from tests.unit.test_cli_cache import complete

pytestmark = pytest.mark.testbed

Run = Callable[..., subprocess.CompletedProcess[str]]
TAG_CACHE = "cli-tag-cache"
MAIN_CACHE = "cli-main-cache"
USER = "cli-cache-user"


@dataclass
class Env:
    daemon: Daemon
    hub: Hub
    kube: KubeApi
    root: Path
    workdir: Path

    @property
    def ns(self) -> str:
        return self.daemon.namespace

    def daemon_args(self, who: str) -> list[str]:
        token = private_file(self.workdir / f"token-{who}", self.daemon.token(who) + "\n")
        return ["--url", self.daemon.url, "--ca-cert", self.daemon.runner.ca_file, "--token-file", str(token)]


@pytest.fixture(scope="module")
def env(
    testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Env]:
    Require()(
        network_mode(testbed.run_dir) == "netns",
        "process-node pods run with loopback addresses here (no privilege for network namespaces)",
    )
    workdir = tmp_path_factory.mktemp("cli-cache")
    root = workdir / "pv"
    extra = ("--cache-mount-path", MOUNT, "--cache-tool-scheduling", json.dumps(ON_PROCESS_NODES))
    daemon = start_daemon(testbed, kube, workdir, extra_operator_args=extra, chart_rbac=True)
    pv = f"{daemon.namespace}-{CLAIM}"
    try:
        with Hub(default_repos(lfs_mib=1, tokenizer=False), host=_node_ip(kube)) as hub:
            bound_claim(kube, root, daemon.namespace, CLAIM)
            kube.apply(shared_cache(TAG_CACHE, daemon.namespace, hub, TAG))
            kube.apply(shared_cache(MAIN_CACHE, daemon.namespace, hub, "main"))
            _wait_ready(kube, daemon.namespace, TAG_CACHE)
            _wait_ready(kube, daemon.namespace, MAIN_CACHE)
            # a workload naming the tag's cache: its user (it need not serve for that)
            kube.apply(
                workload(
                    USER,
                    daemon.namespace,
                    model={"name": TINY, "servedName": "cli-cache-served", "cacheRef": {"name": TAG_CACHE}},
                    scheduling=ON_PROCESS_NODES,
                )
            )
            kube.wait(
                lambda: _claims(kube, daemon.namespace) == [USER] or None,
                timeout=60,
                what=f"{USER} listed as the cache's user",
            )
            yield Env(daemon, hub, kube, root, workdir)
    except BaseException:
        print(daemon.runner.logs())
        raise
    finally:
        stop_daemon(daemon)
        kube.delete("v1", "PersistentVolume", pv)


def _claims(kube: KubeApi, namespace: str) -> Any:
    return ((kube.get(API, "ModelCache", TAG_CACHE, namespace=namespace) or {}).get("status") or {}).get(
        "claims"
    )


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (done.stdout, done.stderr)
    return done.stdout


def test_ls_and_inspect(env: Env, sparkrun_k8s: Run, testbed: Testbed) -> None:
    repo = env.hub.repo(TINY)
    tag = repo.tags[TAG]
    table = _ok(sparkrun_k8s("cache", "ls", "-n", env.ns))
    print(table)
    header, *lines = table.splitlines()
    assert header.split()[:6] == ["NAME", "MODEL", "REVISION", "PHASE", "SIZE", "PROGRESS"]
    rows = {line.split()[0]: line for line in lines}
    assert set(rows) == {MAIN_CACHE, TAG_CACHE}
    assert f"{TAG} ({tag[:12]})" in rows[TAG_CACHE]
    assert TINY in rows[TAG_CACHE]
    assert "Ready" in rows[TAG_CACHE]
    assert "100%" in rows[TAG_CACHE]
    assert rows[TAG_CACHE].endswith(USER)
    assert rows[MAIN_CACHE].endswith("-")

    listed = json.loads(_ok(sparkrun_k8s("cache", "ls", "-n", env.ns, "-o", "json")))
    by_name = {c["name"]: c for c in listed["caches"]}
    size = sum(m.file.size for m in repo.tree(tag).values())
    assert by_name[TAG_CACHE]["resolved_revision"] == tag
    assert by_name[TAG_CACHE]["size_bytes"] == size
    assert by_name[TAG_CACHE]["used_by"] == [USER]
    assert by_name[MAIN_CACHE]["resolved_revision"] == repo.head

    wide = _ok(sparkrun_k8s("cache", "ls", "-A"))
    assert wide.splitlines()[0].startswith("NAMESPACE")
    assert any(line.startswith(env.ns) and TAG_CACHE in line for line in wide.splitlines())

    text = _ok(sparkrun_k8s("cache", "inspect", TAG_CACHE, "-n", env.ns))
    print(text)
    assert text.startswith(f"ModelCache {env.ns}/{TAG_CACHE}\n")
    assert f"Files:         {len(repo.tree(tag))}," in text
    assert f"Used by:       {USER}" in text
    assert f"claim {CLAIM}, path /" in text
    assert re.search(r"Ready\s+True", text), text

    # completion of names from the cluster (the namespace on the line)
    line = f"sparkrun-k8s cache inspect -n {env.ns} cli-t"
    assert complete(line, env.workdir, KUBECONFIG=str(testbed.kubeconfig)) == [TAG_CACHE]

    missing = sparkrun_k8s("cache", "inspect", "no-such-cache", "-n", env.ns)
    assert missing.returncode == 4
    assert "no-such-cache not found" in missing.stderr


def test_pin_and_unpin_round_trip(env: Env, sparkrun_k8s: Run) -> None:
    def pinned() -> bool:
        return bool(
            (env.kube.get(API, "ModelCache", MAIN_CACHE, namespace=env.ns) or {})["spec"].get("pinned")
        )

    out = _ok(sparkrun_k8s("cache", "pin", MAIN_CACHE, "-n", env.ns))
    assert out.startswith(f"ModelCache {env.ns}/{MAIN_CACHE}: pinned")
    assert pinned()
    assert "already pinned" in _ok(sparkrun_k8s("cache", "pin", MAIN_CACHE, "-n", env.ns))
    assert json.loads(
        _ok(sparkrun_k8s("cache", "pin", MAIN_CACHE, "-n", env.ns, "--unpin", "-o", "json"))
    ) == {
        "changed": True,
        "name": MAIN_CACHE,
        "namespace": env.ns,
        "pinned": False,
    }
    assert not pinned()
    # and the text of an unpin, for people
    _ok(sparkrun_k8s("cache", "pin", MAIN_CACHE, "-n", env.ns))
    unpinned = _ok(sparkrun_k8s("cache", "pin", MAIN_CACHE, "-n", env.ns, "--unpin"))
    print(out, unpinned)
    assert unpinned.startswith(f"ModelCache {env.ns}/{MAIN_CACHE}: unpinned")
    assert not pinned()
    table = _ok(sparkrun_k8s("cache", "ls", "-n", env.ns))
    assert "no" in next(line for line in table.splitlines() if line.startswith(MAIN_CACHE)).split()


def test_prune_dry_run_and_files_through_the_daemon(env: Env, sparkrun_k8s: Run) -> None:
    repo = env.hub.repo(TINY)
    tag, main = repo.tags[TAG], repo.head
    admin = env.daemon_args("admin")
    done = sparkrun_k8s(
        "cache", "prune", "-n", env.ns, "--dry-run", "--min-age-days", "0", *admin, timeout=240
    )
    out = _ok(done)
    print(out)
    assert out.splitlines()[0] == f"would remove 1 revision(s) at PersistentVolumeClaim {env.ns}/{CLAIM}"
    assert f"{TINY}@{main[:12]}" in out
    assert f"(ModelCache {MAIN_CACHE})" in out
    assert f"kept {TINY}@{tag[:12]}: used by InferenceWorkloads {USER}" in out
    assert "apply it:" in out
    snapshots = env.root / "hub" / "models--sparkrun-test--tiny-model" / "snapshots"
    assert (snapshots / main).is_dir()
    assert (snapshots / tag).is_dir()

    reader = env.daemon_args("reader")
    done = sparkrun_k8s(
        "cache", "inspect", TAG_CACHE, "-n", env.ns, "--files", "--verify", *reader, timeout=300
    )
    text = _ok(done)
    print(text)
    for path, entry in repo.tree(tag).items():
        digest = entry.etag
        algorithm = "sha256" if entry.file.lfs else "git-sha1"
        assert re.search(rf"{re.escape(path)}\s+\S+ \S+\s+{algorithm}:{digest}", text), (path, text)
    files = len(repo.tree(tag))
    assert f"Verified on the volume: {files} files checked at sha256: all present and valid" in text
    # the reader may not prune (admin scope): the daemon's refusal, exit 5
    refused = sparkrun_k8s("cache", "prune", "-n", env.ns, "--dry-run", *reader, timeout=60)
    assert refused.returncode == 5, (refused.stdout, refused.stderr)


# -- a download in a real terminal ------------------------------------------------------------

SLOW_CACHE = "cli-slow-cache"
SLOW_MIB = 2
SLOW_RATE = 160 * 1024  # bytes/s: about 13 s for the weights


@pytest.fixture
def slow_hub(kube: KubeApi, netns_network: None) -> Iterator[Hub]:  # noqa: F811
    with Hub(default_repos(lfs_mib=SLOW_MIB, tokenizer=False), host=_node_ip(kube)) as hub:
        hub.slow(f"{TINY}/model.safetensors", rate=SLOW_RATE, times=None)
        yield hub


def _percents(screen: str) -> list[int]:
    return [int(p) for p in re.findall(rf"{SLOW_CACHE}\s+Downloading\s+[█░]+\s+(\d+)%", screen)]


def test_watch_shows_a_progress_bar_advancing(
    kube: KubeApi,
    namespace: str,
    operator_factory: Callable[..., OperatorProcess],
    slow_hub: Hub,
    terminal: Terminal,
    testbed: Testbed,
    tmp_path: Path,
) -> None:
    operator_factory(namespace, "--cache-mount-path", MOUNT)
    volume = host_volume(kube, tmp_path / "pv", namespace, SLOW_CACHE)
    try:
        terminal.start(
            f"{SPARKRUN_K8S} cache ls --watch -n {namespace}",
            # NB: the test process's COLUMNS (80) would leak into the pane: the pane's own width
            env={"KUBECONFIG": str(testbed.kubeconfig), "COLUMNS": str(terminal.width)},
        )
        terminal.wait_for("no ModelCaches (yet)", timeout=30)
        kube.apply(_cache(SLOW_CACHE, namespace, slow_hub, TINY, TAG))
        seen: list[int] = []
        rated = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            screen = terminal.screen()
            seen += _percents(screen)
            if "/s  ETA " in screen:
                rated = screen
            if re.search(rf"{SLOW_CACHE}\s+Ready\s+█+ 100%", screen):
                break
            time.sleep(0.5)
        else:
            raise AssertionError(f"never Ready; the terminal shows:\n{terminal.screen()}")
        print(rated or screen)
        progress = sorted(set(seen))
        assert len(progress) >= 2, seen
        assert progress[0] < progress[-1] < 100, seen  # it advanced
        assert rated, f"no rate and ETA while downloading: {seen}"
        assert re.search(r"\d+(?:\.\d+)? KiB/s  ETA \d+s", rated), rated  # rate.format_rate's form
        assert "0.0 " not in rated.split(SLOW_CACHE)[1].split("\n")[0]  # never a rate of nothing
        terminal.keys("C-c")
        assert terminal.exit_code(timeout=20) == 130
        assert "interrupted" in terminal.history()
    finally:
        kube.delete(API, "ModelCache", SLOW_CACHE, namespace=namespace)
        kube.delete("v1", "PersistentVolume", volume)
