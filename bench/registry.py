"""RecipeRegistry sync (issue 32): a git registry of N recipes made into Recipe objects.

On a fresh testbed, against the real git server of ``tests/gitserver.py`` (smart HTTP through
``git http-backend`` on loopback), a registry repository of N recipes (the vendored 37-recipe
public-registry corpus, each copy with its own model name) plus 4 mods and 2 benchmark
profiles. Three paths, each with a repository of its own (identical content), so that each one
sees exactly the change it is timed on:

- ``operator``: ``sparkrun-k8s operator run`` (a child process, serving the target namespaces);
  first sync = RecipeRegistry created -> ``status.commit`` set (its status is written after every
  object), then the Recipes are counted; no-change resync = ``sparkrun.dev/sync-requested`` set
  -> ``status.syncRequest`` answered; one change = a commit changing one recipe's model, then a
  sync request -> ``status.commit`` at the new commit.
- ``limit`` (the physical limit): ``git clone --depth 1`` by the git CLI + the same N Recipe
  objects (as the operator wrote them) created directly with the project's k8s client at
  ``--parallel`` requests at once; no-change: ``git ls-remote`` (the least that shows nothing
  changed); one change: ``git fetch --depth 1`` in the clone + one PUT of the changed Recipe.
- ``peer``: the reference sparkrun 0.4.2 CLI (``--sparkrun``), in a HOME of its own:
  first = ``sparkrun registry add URL`` (manifest discovery + shallow sparse clone) +
  ``sparkrun list --registry bench`` (reads every recipe); resync = ``sparkrun registry update
  bench`` + the same list. sparkrun accepts only https/ssh/file URLs: it is given
  ``https://bench.invalid/...``, which its git rewrites (``url.insteadOf``, its own
  ``GIT_CONFIG_GLOBAL``) to the same loopback HTTP server. It writes nothing to Kubernetes.

Rounds are interleaved (the order rotates each round). Wall time, CPU seconds of the path's own
process (the operator; the bench process plus its git child for the limit; sparkrun and its git
children for the peer), apiserver writes (``apiserver_request_total``, grouped: the sync's
writes, the registry's status, the Recipe controller's follow-on status writes) and the
operator's peak RSS (``VmHWM``). The git server's CGI processes share the CPUs with all three.

Run: ``python -m bench.registry [--sizes 200,1000] [--rounds 3] [--first-rounds 1]
[--sparkrun PATH]``. The JSON result goes to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

from bench import _common
from bench import _registry as repo_gen
from bench._operator import Operator, call, client, diff_counts, start_testbed, watching, write_counts
from sparkrun_operator.api.resources import RECIPE
from sparkrun_operator.k8s.client import Kube
from sparkrun_operator.k8s.resources import resource_of
from sparkrun_operator.render import keys
from tests.gitserver import GitServer, RepoHandle

API = "sparkrun.dev/v1alpha1"
REGISTRIES = f"/apis/{API}/reciperegistries"
RECIPES_PATH = "/apis/" + API + "/namespaces/{ns}/recipes"
PATHS = ("operator", "limit", "peer")
CASES = ("first", "no-change", "one-change")
DEFAULT_SPARKRUN = Path.home() / ".cache" / "sparkrun-tools" / "sparkrun-0.4.2" / "bin" / "sparkrun"
PATIENCE_S = 600.0


def timed_run(cmd: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> dict[str, Any]:
    """Run ``cmd``; wall seconds and the CPU seconds of it and its reaped children (``wait4``)."""
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    proc.stdout.close()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd[:4]} exited {proc.returncode}: {out[-2000:].decode(errors='replace')}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "out": out.decode(errors="replace")}


def _self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _hwm(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


class Registries:
    """The latest RecipeRegistry objects a watch delivered."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}
        self.changed = asyncio.Event()

    def __call__(self, kind: str, obj: dict[str, Any], when: float) -> None:
        self.seen[obj["metadata"]["name"]] = obj
        self.changed.set()

    async def until(self, name: str, done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.perf_counter() + PATIENCE_S
        while True:
            obj = self.seen.get(name)
            if obj is not None and done(obj.get("status") or {}):
                return obj
            self.changed.clear()
            left = deadline - time.perf_counter()
            if left <= 0:
                raise TimeoutError(f"RecipeRegistry {name}: not done after {PATIENCE_S} s: {obj}")
            try:
                await asyncio.wait_for(self.changed.wait(), min(left, 5.0))
            except TimeoutError:
                continue


def _synced(commit: str) -> Callable[[dict[str, Any]], bool]:
    def done(status: dict[str, Any]) -> bool:
        conditions = {c.get("type"): c.get("status") for c in status.get("conditions") or []}
        return status.get("commit") == commit and conditions.get("Synced") == "True"

    return done


class Bench:
    """One run: the testbed, the git server, the operator, the limit's client and the peer."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.git = GitServer()
        self.repos: dict[tuple[str, int], RepoHandle] = {}
        self.commits: dict[tuple[str, int], str] = {}
        self.revision = 0
        self.registries = Registries()
        #: Size -> the Recipes the operator wrote (round 0), the bodies the limit creates.
        self.limit_objects: dict[int, dict[str, dict[str, Any]]] = {}
        #: Size -> the Recipes the limit created (round 0), the ones its one-change PUT replaces.
        self.limit_created: dict[int, dict[str, dict[str, Any]]] = {}
        self.limit_clones: dict[int, Path] = {}
        self.peer_homes: dict[int, Path] = {}
        self.peer_env: dict[str, str] = {}

    # -- repositories ------------------------------------------------------------------------

    def make_repo(self, path: str, size: int, round_: int) -> tuple[RepoHandle, str]:
        """A repository of ``size`` recipes for ``path``; round 0's is the one resynced later."""
        repo = self.git.create_repo(f"{path}-{size}-{round_}")
        for name, data in repo_gen.repository(size).items():
            repo.write(name, data, executable=name.endswith("run.sh"))
        commit = repo.commit(f"{size} recipes")
        if round_ == 0:
            self.commits[(path, size)], self.repos[(path, size)] = commit, repo
        return repo, commit

    def change_one(self, path: str, size: int) -> tuple[str, bytes]:
        self.revision += 1
        name, data = repo_gen.changed_one(size, self.revision)
        repo = self.repos[(path, size)]
        repo.write(name, data)
        self.commits[(path, size)] = repo.commit(f"change {name}")
        return name, data

    # -- the operator ------------------------------------------------------------------------

    async def op_sample(
        self, http: httpx.AsyncClient, operator: Operator, act: Callable[[], Awaitable[str]], name: str
    ) -> dict[str, Any]:
        before, cpu0, hwm0 = await write_counts(http), operator.cpu_seconds(), _hwm(operator.proc.pid)
        start = time.perf_counter()
        done = await act()
        await self.registries.until(name, lambda s: _done(s, done))
        wall = time.perf_counter() - start
        cpu = operator.cpu_seconds() - cpu0
        at_done = diff_counts(before, await write_counts(http))
        settled = await _settle(http, before)
        groups = repo_gen.who_wrote(at_done)
        return {
            "wall_s": wall,
            "cpu_s": cpu,
            "writes": groups["recipe_writes"] + groups["configmap_writes"],
            "writes_at_done": groups,
            "writes_settled": repo_gen.who_wrote(settled),
            "writes_settled_by_verb": repo_gen.flat(settled),
            "operator_hwm_bytes": _hwm(operator.proc.pid),
            "operator_hwm_grew_bytes": _hwm(operator.proc.pid) - hwm0,
        }

    async def op_first(
        self, http: httpx.AsyncClient, operator: Operator, size: int, round_: int
    ) -> dict[str, Any]:
        repo, commit = self.make_repo("op", size, round_)
        name, namespace = f"bench-{size}-{round_}", f"reg-{size}-{round_}"

        async def act() -> str:
            body = {
                "apiVersion": API,
                "kind": "RecipeRegistry",
                "metadata": {"name": name},
                "spec": {"url": repo.url_http, "subpath": "recipes", "targetNamespace": namespace},
            }
            await call(http, "POST", REGISTRIES, json=body)
            return f"commit={commit}"

        sample = await self.op_sample(http, operator, act, name)
        stored = await _list(http, RECIPES_PATH.format(ns=namespace))
        sample["recipes_written"] = len(stored)
        status = self.registries.seen[name].get("status") or {}
        sample["counts"] = status.get("counts")
        sample["problems"] = [p.get("message", "")[:200] for p in (status.get("problems") or [])[:5]]
        if round_ == 0:
            self.limit_objects[size] = {o["metadata"]["name"]: _copy(o) for o in stored}
        return sample

    async def op_resync(
        self, http: httpx.AsyncClient, operator: Operator, size: int, round_: int, change: bool
    ) -> dict[str, Any]:
        name = f"bench-{size}-0"
        if change:
            self.change_one("op", size)

        async def act() -> str:
            token = secrets.token_hex(6)
            patch = {"metadata": {"annotations": {keys.ANNOTATION_SYNC_REQUESTED: token}}}
            await call(
                http,
                "PATCH",
                f"{REGISTRIES}/{name}",
                json=patch,
                headers={"Content-Type": "application/merge-patch+json"},
            )
            return f"request={token}" + (f" commit={self.commits[('op', size)]}" if change else "")

        return await self.op_sample(http, operator, act, name)

    # -- the physical limit ------------------------------------------------------------------

    async def limit_first(
        self, http: httpx.AsyncClient, kube: Kube, size: int, round_: int
    ) -> dict[str, Any]:
        repo, _ = self.make_repo("limit", size, round_)
        namespace = f"limit-{size}-{round_}"
        await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": namespace}})
        clone = self.workdir / f"limit-clone-{size}-{round_}"
        objects = self.limit_objects[size]
        recipes = resource_of(RECIPE)
        gate = asyncio.Semaphore(self.args.parallel)
        created: dict[str, dict[str, Any]] = {}

        async def create(obj: dict[str, Any]) -> None:
            async with gate:
                created[obj["metadata"]["name"]] = await kube.create(recipes, obj, namespace)

        before, cpu0 = await write_counts(http), _self_cpu()
        start = time.perf_counter()
        git = await asyncio.to_thread(
            timed_run, ["git", "clone", "-q", "--depth", "1", repo.url_http, str(clone)]
        )
        await asyncio.gather(*(create(obj) for obj in objects.values()))
        wall = time.perf_counter() - start
        cpu = _self_cpu() - cpu0 + git["cpu_s"]
        groups = repo_gen.who_wrote(diff_counts(before, await write_counts(http)))
        if round_ == 0:
            self.limit_created[size], self.limit_clones[size] = created, clone
        return {"wall_s": wall, "cpu_s": cpu, "git_s": git["wall_s"], "writes": groups["recipe_writes"]}

    async def limit_resync(
        self, http: httpx.AsyncClient, kube: Kube, size: int, round_: int, change: bool
    ) -> dict[str, Any]:
        repo, clone = self.repos[("limit", size)], self.limit_clones[size]
        changed = self.change_one("limit", size) if change else None
        before, cpu0 = await write_counts(http), _self_cpu()
        start = time.perf_counter()
        if changed is None:
            git = await asyncio.to_thread(timed_run, ["git", "ls-remote", repo.url_http, "refs/heads/main"])
            if self.commits[("limit", size)] not in git["out"]:
                raise RuntimeError(f"ls-remote does not show {self.commits[('limit', size)]}: {git['out']}")
        else:
            git = await asyncio.to_thread(
                timed_run, ["git", "-C", str(clone), "fetch", "-q", "--depth", "1", "origin", "main"]
            )
            await self.limit_put(kube, size, changed[0])
        wall = time.perf_counter() - start
        cpu = _self_cpu() - cpu0 + git["cpu_s"]
        groups = repo_gen.who_wrote(diff_counts(before, await write_counts(http)))
        return {"wall_s": wall, "cpu_s": cpu, "git_s": git["wall_s"], "writes": groups["recipe_writes"]}

    async def limit_put(self, kube: Kube, size: int, path: str) -> None:
        """One PUT: the Recipe the changed file makes, its model changed as the file's was."""
        created = self.limit_created[size]
        match = [
            o
            for o in created.values()
            if o["metadata"]["annotations"].get(keys.ANNOTATION_REGISTRY_PATH) == path
        ]
        if len(match) != 1:
            raise RuntimeError(f"no single Recipe for {path} among the limit's objects")
        obj = match[0]
        obj["spec"]["model"] = repo_gen.model_of((self.revision * 7) % size, self.revision)
        namespace = obj["metadata"]["namespace"]
        stored = await kube.replace(resource_of(RECIPE), obj["metadata"]["name"], obj, namespace)
        created[obj["metadata"]["name"]] = stored

    # -- the peer ----------------------------------------------------------------------------

    def peer_first(self, size: int, round_: int) -> dict[str, Any]:
        self.make_repo("peer", size, round_)
        home = Path(tempfile.mkdtemp(prefix=f"peer-{size}-{round_}-", dir=self.workdir))
        (home / "gitconfig").write_text(
            f'[url "{self.git.base_http}/"]\n\tinsteadOf = https://bench.invalid/\n'
        )
        env = {
            **os.environ,
            "HOME": str(home),
            "XDG_CONFIG_HOME": str(home / ".config"),
            "XDG_CACHE_HOME": str(home / ".cache"),
            "GIT_CONFIG_GLOBAL": str(home / "gitconfig"),
            "GIT_CONFIG_NOSYSTEM": "1",
        }
        url = f"https://bench.invalid/peer-{size}-{round_}.git"
        add = timed_run([str(self.args.sparkrun), "registry", "add", url], env=env)
        listed = timed_run([str(self.args.sparkrun), "list", "--registry", "bench"], env=env)
        if round_ == 0:
            self.peer_homes[size], self.peer_env = home, env
        return _peer_sample(add, listed, size)

    def peer_resync(self, size: int, round_: int, change: bool) -> dict[str, Any]:
        if change:
            self.change_one("peer", size)
        env = {**self.peer_env, **_home_env(self.peer_homes[size])}
        update = timed_run([str(self.args.sparkrun), "registry", "update", "bench"], env=env)
        listed = timed_run([str(self.args.sparkrun), "list", "--registry", "bench"], env=env)
        sample = _peer_sample(update, listed, size)
        if change and repo_gen.model_of((self.revision * 7) % size, self.revision) not in listed["out"]:
            sample["stale"] = True  # NB: reported, not hidden: the peer did not show the change
        return sample

    def close(self) -> None:
        self.git.close()


def _home_env(home: Path) -> dict[str, str]:
    return {
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "GIT_CONFIG_GLOBAL": str(home / "gitconfig"),
    }


def _peer_sample(fetch: dict[str, Any], listed: dict[str, Any], size: int) -> dict[str, Any]:
    shown = sum(1 for line in listed["out"].splitlines() if line.startswith("@bench/"))
    return {
        "wall_s": fetch["wall_s"] + listed["wall_s"],
        "cpu_s": fetch["cpu_s"] + listed["cpu_s"],
        "fetch_s": fetch["wall_s"],
        "list_s": listed["wall_s"],
        "listed": shown,
        "writes": 0.0,
    }


def _done(status: dict[str, Any], want: str) -> bool:
    for part in want.split():
        key, _, value = part.partition("=")
        if key == "commit" and not _synced(value)(status):
            return False
        if key == "request" and status.get("syncRequest") != value:
            return False
    return True


def _copy(obj: dict[str, Any]) -> dict[str, Any]:
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "metadata": {
            "name": meta["name"],
            "labels": dict(meta.get("labels") or {}),
            "annotations": {
                k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith("sparkrun.dev/")
            },
            "ownerReferences": meta.get("ownerReferences") or [],
        },
        "spec": obj["spec"],
    }


async def _list(http: httpx.AsyncClient, path: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    token = None
    while True:
        page = await call(http, "GET", path, params={"limit": 500, **({"continue": token} if token else {})})
        items += page.get("items") or []
        token = (page.get("metadata") or {}).get("continue")
        if not token:
            return items


async def _settle(
    http: httpx.AsyncClient, before: dict[tuple[str, str, str], float]
) -> dict[tuple[str, str, str], float]:
    """The writes since ``before`` once they have stopped growing for 2 s (at most 60 s)."""
    last, quiet, deadline = None, 0.0, time.perf_counter() + 60
    while time.perf_counter() < deadline and quiet < 2.0:
        now = diff_counts(before, await write_counts(http))
        quiet = quiet + 0.5 if now == last else 0.0
        last = now
        await asyncio.sleep(0.5)
    return last or {}


async def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    tb = start_testbed(workdir, nodes=1)
    bench = Bench(args, workdir)
    operator: Operator | None = None
    samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
    peer = args.sparkrun is not None
    paths = PATHS if peer else PATHS[:2]
    try:
        async with client(tb.kubeconfig) as http:
            kube = await Kube.connect(field_manager="bench-limit", kubeconfig=str(tb.kubeconfig))
            served = [f"reg-{n}-{r}" for n in args.sizes for r in range(args.first_rounds)]
            for ns in served:
                await call(http, "POST", "/api/v1/namespaces", json={"metadata": {"name": ns}})
            extra = [a for ns in served for a in ("-n", ns)] + ["--inference-pools", "off"]
            operator = Operator(tb.kubeconfig, workdir / "operator.log", *extra)
            await asyncio.sleep(5)  # the operator's imports and watches (not counted)

            async def one(case: str, path: str, size: int, r: int) -> dict[str, Any]:
                assert operator is not None
                change = case == "one-change"
                if path == "operator":
                    if case == "first":
                        return await bench.op_first(http, operator, size, r)
                    return await bench.op_resync(http, operator, size, r, change)
                if path == "limit":
                    if case == "first":
                        return await bench.limit_first(http, kube, size, r)
                    return await bench.limit_resync(http, kube, size, r, change)
                if case == "first":
                    return await asyncio.to_thread(bench.peer_first, size, r)
                return await asyncio.to_thread(bench.peer_resync, size, r, change)

            async with watching(http, [REGISTRIES], bench.registries):
                for size in args.sizes:
                    for case in CASES:
                        got: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
                        for r in range(args.first_rounds if case == "first" else args.rounds):
                            # NB: the first sync: the operator first (the limit creates what it wrote)
                            turn = 0 if case == "first" else r % len(paths)
                            for path in paths[turn:] + paths[:turn]:
                                await asyncio.sleep(1.0)  # the previous sample's follow-on writes
                                got[path].append(await one(case, path, size, r))
                                _progress(case, size, path, got[path][-1])
                        samples[f"{case}/{size}"] = got
            await kube.close()
    finally:
        if operator is not None:
            operator.stop()
        bench.close()
        tb.stop()
    return {"samples": samples, "paths": list(paths)}


def _progress(case: str, size: int, path: str, sample: dict[str, Any]) -> None:
    print(
        f"{case:10s} N={size:5d} {path:8s} {sample['wall_s']:7.2f} s  writes {sample['writes']:5.0f}",
        flush=True,
    )


def _table(rows: list[dict[str, Any]], summary: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"\n{'case':10s} {'N':>5s} {'path':8s} {'n':>2s}", end="")
    print("".join(f" {h:>7s}" for h in ("p50 s", "p99 s", "min s", "max s", "writes", "cpu s")))
    for r in rows:
        print(f"{r['case']:10s} {r['n_recipes']:5d} {r['path']:8s} {r['samples']:2d}", end="")
        print("".join(f" {r[k]:7.2f}" for k in ("p50_s", "p99_s", "min_s", "max_s")), end="")
        print(f" {r['writes_p50']:7.0f} {r['cpu_s_p50']:7.2f}")
    for case_size, by in summary.items():
        text = "  ".join(f"{k} x{v['median']:.2f} ({v['min']:.2f}-{v['max']:.2f})" for k, v in by.items())
        print(f"{case_size:16s} {text}")


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.registry", description=__doc__)
    parser.add_argument("--sizes", default="200,1000", help="recipes in the registry, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved rounds of each resync case")
    parser.add_argument("--first-rounds", type=int, default=1, help="interleaved rounds of the first sync")
    parser.add_argument("--parallel", type=int, default=64, help="the limit's requests at once")
    parser.add_argument("--sparkrun", type=Path, default=DEFAULT_SPARKRUN, help="the reference sparkrun CLI")
    args = parser.parse_args()
    args.sizes = [int(n) for n in args.sizes.split(",") if n.strip()]
    if args.sparkrun is not None and not os.access(args.sparkrun, os.X_OK):
        print(f"peer: skipped, no sparkrun CLI at {args.sparkrun} (make bench-registry installs 0.4.2)")
        args.sparkrun = None
    if shutil.which("git") is None:
        raise SystemExit("git is needed (Debian's git): the registry server and the limit's clone")
    load_before = os.getloadavg()
    workdir = Path(tempfile.mkdtemp(prefix="bench-registry-"))
    started = time.perf_counter()
    result = asyncio.run(run(args, workdir))
    rows: list[dict[str, Any]] = []
    summary: dict[str, dict[str, dict[str, float]]] = {}
    for case_size, by_path in result["samples"].items():
        case, size = case_size.split("/")
        for path, got in by_path.items():
            rows.append(repo_gen.row(case, int(size), path, got))
        ours = by_path["operator"]
        summary[case_size] = {
            f"operator/{p}": repo_gen.ratios(ours, by_path[p]) for p in by_path if p != "operator"
        }
    _table(rows, summary)
    env = _common.environment(["dulwich", "kopf", "kubernetes_asyncio"])
    env["load_average_before"] = load_before
    env["git"] = subprocess.run(
        ["git", "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    inputs = {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()}
    path = _common.write_json(
        "registry",
        {
            "inputs": inputs,
            "environment": env,
            "duration_s": time.perf_counter() - started,
            "rows": rows,
            "summary": summary,
            "raw": result,
        },
    )
    print(
        f"load average before {load_before}, after {os.getloadavg()}; {time.perf_counter() - started:.0f} s"
    )
    print(f"wrote {path}")
    print(json.dumps(summary))
    shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
