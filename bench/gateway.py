"""Gateway benchmark: added latency and streamed tokens/s, direct vs gateway vs nginx vs LiteLLM.

``python -m bench.gateway [--quick] [--litellm PATH] [--upstream standin|llmd-sim]
[--loadgen go|python] [--workers 1,2] [--arrivals burst|staggered] [--pin] [--targets a,b]
[--auth keys,kubernetes]``

One upstream serves every target, so the comparison is of the proxies alone. It is the engine
stand-in (``--upstream standin``, the default) or llm-d-inference-sim (``--upstream llmd-sim``,
the Go simulator built by ``hack/llmd-sim-bin.sh``; random mode with ``ignore_eos``, so every
answer has exactly ``OUTPUT_TOKENS`` tokens):

- ``direct``: the upstream itself (the physical limit);
- ``gateway``: ``python -m sparkrun_operator.gateway`` in front of it (``--workers 1,2`` adds a
  target ``gateway-w2``: the gateway with ``--workers 2``; the first value is ``gateway``);
- ``nginx``: a plain streaming reverse proxy (:mod:`bench._nginx`: ``proxy_buffering off``,
  keep-alive upstream, as many worker processes as the first ``--workers`` value), Debian's
  package, installed when missing as root (else skipped, in one line): the proxy-hop floor, one
  well-engineered hop with no model routing. Each row reports the gateway's added TTFT p50 minus
  nginx's (goal: at most 0.2 ms) and the gateway's tokens/s over nginx's (goal at 256 streams: at
  least 0.98);
- ``gateway-keys``, ``gateway-k8s`` (``--auth keys,kubernetes``): the gateway with API keys, and
  with Kubernetes tokens against a loopback TokenReview/SubjectAccessReview API (warm caches;
  :mod:`bench.gateway_auth`); each row adds their TTFT over ``gateway``'s (authentication ``none``);
- ``litellm``: the LiteLLM proxy (``litellm[proxy]`` pinned to ``LITELLM_VERSION`` from PyPI, in
  its own venv; default ``/tmp/litellm-venv/bin/litellm``, ``make bench-gateway`` installs it)
  in front of it, when installed.

Two upstream profiles: ``zero`` (no TTFT, no per-token delay: proxy overhead dominates) and
``realistic`` (50 ms TTFT, 10 ms per token). For each concurrency (1/16/64/256 streams), rounds
of each target run interleaved (A B C, B C A, ...); every round is ``concurrency`` workers each
sending ``per_worker`` streaming chat requests on a keep-alive connection. Reported: time to first
token p50/p99 per target, the gateway's and LiteLLM's added p50/p99 over direct, tokens/s (median
of rounds, with min/max), sample counts, and the CPU seconds of each process (the load generator
shares the machine). JSON goes to ``bench/results/gateway-<time>.json``.

The load generator is the compiled one in ``bench/loadgen`` (Go, built into
``~/.cache/sparkrun-bench``; :mod:`bench._loadgen`) unless ``--loadgen python`` (the asyncio
client of :mod:`bench._common`). Its own CPU seconds are reported per target, and its ceiling
as tokens per CPU second of the generator (measured against the upstream directly, the
``direct`` target): while that ceiling is far above the tokens/s measured, it is not what limits.
Per target the row also has the engine's CPU seconds in that target's rounds and the seconds the
engine's and the proxy's threads spent runnable but waiting for a CPU (``/proc`` schedstat): on
shared cores that wait, not proxy code, is what a proxy adds to time to first token.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sparkrun_testbed import llmdsim

from . import _loadgen, _nginx, gateway_auth
from ._common import Proc, Sample, StreamClient, environment, free_port, median, pct, write_json

# LiteLLM refuses to start without a strong master key; every target gets the same bearer token.
BENCH_KEY = "sk-" + secrets.token_hex(32)
UPSTREAMS = ("standin", "llmd-sim")
OUTPUT_TOKENS = 64
#: The upstream profiles: (seconds to the first token, seconds per further token).
PACING = {"zero": (0.0, 0.0), "realistic": (0.05, 0.01)}
#: The engine stand-in's environment for each profile.
PROFILES = {
    name: {"SPARKRUN_ENGINE_TTFT_SECONDS": f"{ttft:g}", "SPARKRUN_ENGINE_TOKEN_SECONDS": f"{token:g}"}
    for name, (ttft, token) in PACING.items()
}
#: The simulator's flags for the same profiles (llm-d-inference-sim --help).
SIM_PROFILES = {
    name: {"time_to_first_token": f"{ttft * 1e3:g}ms", "inter_token_latency": f"{token * 1e3:g}ms"}
    for name, (ttft, token) in PACING.items()
}
STREAM_SECONDS = {name: ttft + OUTPUT_TOKENS * token for name, (ttft, token) in PACING.items()}
"""How long one answer takes under each profile (both upstreams): ``--arrivals staggered`` spreads
the workers' first requests over it, so requests arrive evenly instead of in waves of
``concurrency`` at once (every answer has the same length, so waves stay waves)."""


class Targets:
    """The upstream and the proxies in front of it, for one profile."""

    def __init__(
        self,
        workdir: Path,
        profile: str,
        litellm: str | None,
        workers: list[int],
        baseline: str | None = None,
        upstream: str = "standin",
        proxy_cpus: set[int] | None = None,
        nginx: str | None = None,
        auth: list[str] | None = None,
    ) -> None:
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        self.workers = workers
        self.baseline = baseline
        #: ``--pin``: the CPUs of the proxies (the upstream and the generator keep this process's)
        self.proxy_cpus = proxy_cpus
        #: the nginx executable of the ``nginx`` target, or ``None`` for no such target
        self.nginx = nginx
        #: ``--auth``: a gateway target per authentication mode (bench/gateway_auth.py)
        self.auth = auth or []
        try:
            self._start(workdir, profile, litellm, upstream)
        except BaseException:
            self.stop()  # NB: nothing may outlive a failed start
            raise

    def _start(self, workdir: Path, profile: str, litellm: str | None, upstream_kind: str) -> None:
        port = free_port()
        self.ports["direct"] = port
        engine = start_upstream(upstream_kind, workdir, profile, port)
        self.procs["direct"] = engine
        engine.wait_http(f"http://127.0.0.1:{port}/health")
        upstream = f"http://127.0.0.1:{port}"

        routes = workdir / "routes.json"
        entry = {"name": "m", "servedName": "m", "endpoints": [upstream]}
        routes.write_text(json.dumps({"workloads": [entry]}))
        for i, workers in enumerate(self.workers):
            name = "gateway" if i == 0 else f"gateway-w{workers}"
            gport = free_port()
            self.ports[name] = gport
            gateway = Proc(
                [
                    *(sys.executable, "-m", "sparkrun_operator.gateway", "--routes", str(routes)),
                    *("--host", "127.0.0.1", "--port", str(gport), "--log-level", "warning"),
                    *("--workers", str(workers)),
                ],
                workdir / f"{name}-{profile}.log",
            )
            self._proxy(name, gateway)
            gateway.wait_http(f"http://127.0.0.1:{gport}/healthz")
        if self.auth:
            gateway_auth.start_targets(self, workdir, routes, BENCH_KEY, self.auth, profile)
        if self.baseline:  # another build of the gateway (e.g. a checkout of main), side by side
            bport = free_port()
            self.ports["baseline"] = bport
            base = Proc(
                [
                    *(self.baseline, "-m", "sparkrun_operator.gateway", "--routes", str(routes)),
                    *("--host", "127.0.0.1", "--port", str(bport), "--log-level", "warning"),
                ],
                workdir / f"baseline-{profile}.log",
            )
            self._proxy("baseline", base)
            base.wait_http(f"http://127.0.0.1:{bport}/healthz")
        if self.nginx:
            nport = free_port()
            self.ports["nginx"] = nport
            hop = _nginx.start(self.nginx, workdir / f"nginx-{profile}", nport, port, self.workers[0])
            self._proxy("nginx", hop)
            hop.wait_http(_nginx.health_url(nport))
            if self.proxy_cpus is not None:  # its workers may have forked before the master moved
                _nginx.pin_tree(hop.proc.pid, self.proxy_cpus)

        if litellm:
            config = workdir / "litellm.yaml"
            config.write_text(
                "model_list:\n  - model_name: m\n    litellm_params:\n      model: openai/m\n"
                f"      api_base: {upstream}/v1\n      api_key: unused\n"
            )
            lport = free_port()
            self.ports["litellm"] = lport
            proxy = Proc(
                [
                    *(litellm, "--config", str(config), "--host", "127.0.0.1", "--port", str(lport)),
                    *("--num_workers", "1"),
                ],
                workdir / f"litellm-{profile}.log",
                env={"LITELLM_TELEMETRY": "False", "LITELLM_LOG": "ERROR", "LITELLM_MASTER_KEY": BENCH_KEY},
            )
            self._proxy("litellm", proxy)
            proxy.wait_http(f"http://127.0.0.1:{lport}/health/liveliness", timeout=180)

    def _proxy(self, name: str, proc: Proc) -> None:
        """Register ``proc`` (a proxy target) and move it onto the proxies' CPUs (``--pin``),
        before it forks workers: they inherit them."""
        self.procs[name] = proc
        if self.proxy_cpus is not None:
            os.sched_setaffinity(proc.proc.pid, self.proxy_cpus)

    def cpu_seconds(self, name: str) -> float:
        """CPU seconds of a target's process and its children (the workers of ``--workers``)."""
        return self.procs[name].cpu_seconds(children=True)

    def usage(self, name: str) -> tuple[float, float, float]:
        """The engine's CPU and run-queue seconds, and the target's run-queue seconds, so far."""
        engine = self.procs["direct"]
        return (
            engine.cpu_seconds(),
            engine.run_queue_seconds(),
            self.procs[name].run_queue_seconds(children=True),
        )

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()


def start_upstream(kind: str, workdir: Path, profile: str, port: int) -> Proc:
    """The upstream every target shares, serving model ``m`` on ``port``."""
    if kind == "llmd-sim":
        binary = llmdsim.locate()
        if not os.access(binary, os.X_OK):
            binary = llmdsim.build()
        pace = SIM_PROFILES[profile]
        options = llmdsim.Options(
            model="m",
            max_num_seqs=4096,
            time_to_first_token=pace["time_to_first_token"],
            inter_token_latency=pace["inter_token_latency"],
        )
        return Proc([str(binary), *options.args(port)], workdir / f"llmd-sim-{profile}.log")
    return Proc(
        [
            *(sys.executable, "-m", "sparkrun_testbed.engine", "serve", "org/bench"),
            *("--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port)),
            *("--max-num-seqs", "4096"),
        ],
        workdir / f"engine-{profile}.log",
        env={**PROFILES[profile], "SPARKRUN_ENGINE_OUTPUT_TOKENS": str(OUTPUT_TOKENS)},
    )


BODY = json.dumps(
    {
        "model": "m",
        "messages": [{"role": "user", "content": "Benchmark the gateway, please."}],
        "max_tokens": OUTPUT_TOKENS,
        "ignore_eos": True,  # vLLM's (and the simulator's) "exactly max_tokens"; the stand-in ignores it
        "stream": True,
    }
).encode()


def measure(
    loadgen: Path | None, port: int, concurrency: int, per_worker: int, stagger: float = 0.0
) -> tuple[list[Sample], int, float, float]:
    """One round with the Go generator (``loadgen``) or the asyncio one: samples, errors, wall s,
    the generator's CPU s. ``stagger``: the workers' first requests spread over that many seconds."""
    if loadgen is not None:
        return _loadgen.run_round(loadgen, port, concurrency, per_worker, BODY, BENCH_KEY, stagger)
    cpu = time.process_time()
    samples, errors, wall = asyncio.run(run_round(port, concurrency, per_worker, stagger))
    return samples, errors, wall, time.process_time() - cpu


async def run_round(
    port: int, concurrency: int, per_worker: int, stagger: float = 0.0
) -> tuple[list[Sample], int, float]:
    """``concurrency`` workers x ``per_worker`` streams; returns samples, errors, wall seconds."""
    body = BODY
    samples: list[Sample] = []
    errors = 0

    async def worker(index: int) -> None:
        nonlocal errors
        await asyncio.sleep(stagger * index / concurrency)
        client = StreamClient(
            "127.0.0.1", port, "/v1/chat/completions", {"authorization": f"Bearer {BENCH_KEY}"}
        )
        try:
            for _ in range(per_worker):
                try:
                    samples.append(await asyncio.wait_for(client.request(body), 120))
                except (OSError, RuntimeError, TimeoutError, asyncio.IncompleteReadError):
                    errors += 1
                    await client.close()
        finally:
            await client.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return samples, errors, time.perf_counter() - start


def summarize(rounds: list[tuple[list[Sample], int, float]]) -> dict[str, Any]:
    samples = [s for r in rounds for s in r[0]]
    rates = [sum(s.tokens for s in r[0]) / r[2] for r in rounds if r[2] > 0]
    return {
        "samples": len(samples),
        "errors": sum(r[1] for r in rounds),
        "ttft_p50_ms": pct([s.ttft for s in samples], 0.5) * 1e3,
        "ttft_p99_ms": pct([s.ttft for s in samples], 0.99) * 1e3,
        "e2e_p50_ms": pct([s.total for s in samples], 0.5) * 1e3,
        "e2e_p99_ms": pct([s.total for s in samples], 0.99) * 1e3,
        "tokens_per_s": median(rates),
        "tokens_per_s_min": min(rates) if rates else float("nan"),
        "tokens_per_s_max": max(rates) if rates else float("nan"),
        "rounds": len(rounds),
        "tokens_per_request": median([s.tokens for s in samples]),
    }


def measure_level(
    targets: Targets,
    names: list[str],
    loadgen: Path | None,
    concurrency: int,
    rounds: int,
    stagger: float = 0.0,
) -> dict[str, Any]:
    """The row of one concurrency: ``rounds`` interleaved rounds of every target, summarized."""
    per_worker = max(2, min(20, 256 // concurrency))
    collected: dict[str, list[tuple[list[Sample], int, float]]] = {n: [] for n in names}
    load_cpu = dict.fromkeys(names, 0.0)
    waits = {n: {"engine_cpu_s": 0.0, "engine_run_queue_s": 0.0, "proxy_run_queue_s": 0.0} for n in names}
    # Warm-up: one small round per target (connections, imports), not recorded.
    for name in names:
        measure(loadgen, targets.ports[name], min(concurrency, 8), 1)
    cpu_before = {n: targets.cpu_seconds(n) for n in names}
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            before = targets.usage(name)
            samples, errors, wall, cpu = measure(
                loadgen, targets.ports[name], concurrency, per_worker, stagger
            )
            after = targets.usage(name)
            collected[name].append((samples, errors, wall))
            load_cpu[name] += cpu
            for i, key in enumerate(("engine_cpu_s", "engine_run_queue_s", "proxy_run_queue_s")):
                waits[name][key] += after[i] - before[i]
    row = {n: summarize(collected[n]) for n in names}
    for n in names:
        r = row[n]
        r["process_cpu_s"] = targets.cpu_seconds(n) - cpu_before[n]
        r["loadgen_cpu_s"] = load_cpu[n]
        r.update(waits[n])  # the engine's CPU and both processes' waits for a CPU in n's rounds
        wall = sum(m[2] for m in collected[n])
        tokens = sum(s.tokens for m in collected[n] for s in m[0])
        r["loadgen_cpu_share"] = load_cpu[n] / wall if wall else float("nan")
        r["loadgen_tokens_per_cpu_s"] = tokens / load_cpu[n] if load_cpu[n] else float("nan")
    row["loadgen_cpu_s"] = sum(load_cpu.values())
    for n in names:
        if n == "direct" or "direct" not in row:
            continue
        row[n]["added_ttft_p50_ms"] = row[n]["ttft_p50_ms"] - row["direct"]["ttft_p50_ms"]
        row[n]["added_ttft_p99_ms"] = row[n]["ttft_p99_ms"] - row["direct"]["ttft_p99_ms"]
        row[n]["tokens_ratio_vs_direct"] = row[n]["tokens_per_s"] / row["direct"]["tokens_per_s"]
    if "litellm" in row and "gateway" in row:
        row["gateway"]["tokens_ratio_vs_litellm"] = (
            row["gateway"]["tokens_per_s"] / row["litellm"]["tokens_per_s"]
        )
    if "nginx" in row and "direct" in row:
        row["floor"] = floor(row)
    return row


#: The proxy-hop goal: the gateway's added TTFT p50 at most this far above nginx's ...
FLOOR_TTFT_MS = 0.2
#: ... and its tokens/s at 256 streams at least this share of nginx's.
FLOOR_TOKENS_RATIO = 0.98


def floor(row: dict[str, Any]) -> dict[str, Any]:
    """Each other proxy target (the gateway's, ``baseline``, ``litellm``) against the nginx floor
    in one row: its added TTFT p50 and p99 minus nginx's (ms; goal for the gateway: p50 at most
    ``FLOOR_TTFT_MS`` above) and its tokens/s over nginx's (goal at 256 streams: at least
    ``FLOOR_TOKENS_RATIO``)."""
    base = row["nginx"]
    out: dict[str, Any] = {}
    for name, r in row.items():
        if not isinstance(r, dict) or name in ("direct", "nginx", "floor") or "added_ttft_p50_ms" not in r:
            continue
        out[name] = {
            "added_ttft_p50_minus_nginx_ms": r["added_ttft_p50_ms"] - base["added_ttft_p50_ms"],
            "added_ttft_p99_minus_nginx_ms": r["added_ttft_p99_ms"] - base["added_ttft_p99_ms"],
            "tokens_ratio_vs_nginx": r["tokens_per_s"] / base["tokens_per_s"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--litellm",
        default=os.environ.get("LITELLM_BIN", ""),
        help="litellm executable of a venv with litellm[proxy] (make bench-gateway installs the pinned one)",
    )
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--profiles", default="zero,realistic")
    parser.add_argument("--upstream", choices=UPSTREAMS, default="standin")
    parser.add_argument("--loadgen", choices=["go", "python"], default="go")
    parser.add_argument(
        "--arrivals",
        choices=["burst", "staggered"],
        default="burst",
        help="burst: every worker starts at once, so requests come in waves of --concurrency (the "
        "worst case); staggered: first requests spread over one answer's duration (a steady state)",
    )
    parser.add_argument("--workers", default="1", help="gateway --workers values, one target each")
    parser.add_argument("--targets", default="", help="only these targets (comma-separated names)")
    parser.add_argument("--auth", default="", help="also the gateway with these auth modes (keys,kubernetes)")
    parser.add_argument(
        "--baseline-python", help="a Python with another gateway build installed: target 'baseline'"
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="the upstream and the load generator on CPU 0, each proxy on the other CPUs (as in a "
        "cluster, where the gateway has cores of its own and the engine runs on a GPU node); "
        "without it, everything shares every CPU",
    )
    args = parser.parse_args(argv)
    proxy_cpus: set[int] | None = None
    if args.pin:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit("--pin needs at least two CPUs")
        os.sched_setaffinity(0, {cpus[0]})  # this process, the upstream and the generator
        proxy_cpus = set(cpus[1:])
    loadgen = _loadgen.binary() if args.loadgen == "go" else None
    workers = [int(w) for w in args.workers.split(",")]
    litellm = args.litellm if args.litellm and Path(args.litellm).exists() else None
    litellm_version = _litellm_version(litellm) if litellm else None
    wanted = set(args.targets.split(",")) if args.targets else None
    nginx = nginx_target(wanted)
    rounds = 1 if args.quick else args.rounds
    levels = [int(c) for c in args.concurrency.split(",")]
    results: dict[str, Any] = {
        "benchmark": "gateway",
        "command": "python -m bench.gateway " + " ".join(argv if argv is not None else sys.argv[1:]),
        "inputs": {
            "profiles": {
                p: (SIM_PROFILES if args.upstream == "llmd-sim" else PROFILES)[p]
                for p in args.profiles.split(",")
            },
            "concurrency": levels,
            "rounds": rounds,
            "output_tokens": OUTPUT_TOKENS,
            "loadgen": args.loadgen,
            "arrivals": args.arrivals,
            "gateway_workers": workers,
            "pinned": {"upstream_and_loadgen": sorted(os.sched_getaffinity(0)), "proxies": sorted(proxy_cpus)}
            if proxy_cpus is not None
            else None,
            "upstream": f"llm-d-inference-sim {llmdsim.VERSION}"
            if args.upstream == "llmd-sim"
            else "standin",
        },
        "environment": environment(),
        "litellm": f"{litellm} ({litellm_version})" if litellm else f"not installed at {args.litellm!r}",
        "nginx": f"{nginx} ({_nginx.version(nginx)})" if nginx else None,
        "goal": {
            "added_ttft_p50_minus_nginx_ms_max": FLOOR_TTFT_MS,
            "tokens_ratio_vs_nginx_min_at_256": FLOOR_TOKENS_RATIO,
        },
        "results": {},
    }
    print(f"litellm: {results['litellm']}\nnginx: {results['nginx']}", flush=True)
    # SIGTERM unwinds like Ctrl-C, so the child processes are stopped by the finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    path: Path | None = None
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        os.chmod(tmp, 0o711)  # nginx's workers (nobody, when run as root) reach their temp paths
        for profile in args.profiles.split(","):
            auth = [m for m in args.auth.split(",") if m]
            targets = Targets(
                Path(tmp),
                profile,
                litellm,
                workers,
                args.baseline_python,
                args.upstream,
                proxy_cpus,
                nginx,
                auth,
            )
            try:
                names = [n for n in targets.ports if wanted is None or n in wanted]
                for concurrency in levels:
                    stagger = STREAM_SECONDS[profile] if args.arrivals == "staggered" else 0.0
                    row = measure_level(targets, names, loadgen, concurrency, rounds, stagger)
                    results["results"].setdefault(profile, {})[str(concurrency)] = row
                    _print_row(profile, concurrency, row)
                    gateway_auth.annotate(row, targets)
                    path = write_json("gateway", results, path)  # after every row: partial runs count
            finally:
                targets.stop()
    print(f"\nwrote {path}")
    return 0


def nginx_target(wanted: set[str] | None) -> str | None:
    """The nginx executable of the ``nginx`` target when ``wanted`` (``None``: every target)
    includes it; ``None`` skips the target: not wanted, or missing and not installable (said in
    one line, the run goes on, as without LiteLLM)."""
    if wanted is not None and "nginx" not in wanted:
        return None
    return _nginx.locate()


# LiteLLM releases that were published compromised (March 2026: a credential stealer); never run.
COMPROMISED_LITELLM = frozenset({"1.82.7", "1.82.8"})


def _litellm_version(executable: str) -> str:
    """The litellm version installed beside ``executable``; refuses a known-compromised one.

    Read from the venv's ``litellm-<version>.dist-info`` name, never by running its Python (a
    compromised release's ``.pth`` file runs at every interpreter start).
    """
    venv = Path(executable).resolve().parent.parent
    found = sorted(venv.glob("lib/python*/site-packages/litellm-*.dist-info"))
    if not found:
        raise SystemExit(f"no litellm installation found beside {executable}")
    version = found[-1].name.removeprefix("litellm-").removesuffix(".dist-info")
    if version in COMPROMISED_LITELLM:
        raise SystemExit(f"refusing LiteLLM {version} at {executable}: a compromised release")
    return version


def _print_row(profile: str, concurrency: int, row: dict[str, Any]) -> None:
    if concurrency == 1 or not hasattr(_print_row, "header"):
        print(
            f"\n{'profile':<10}{'streams':>8} {'target':<11}{'n':>6}{'err':>5}{'ttft p50':>10}{'p99':>9}"
            f"{'+p50':>9}{'+p99':>9}{'tok/s':>10}{'min':>9}{'max':>9}{'x direct':>9}{'cpu s':>8}",
            flush=True,
        )
        _print_row.header = True  # type: ignore[attr-defined]
    for name, r in row.items():
        if not isinstance(r, dict) or name == "floor":
            continue
        added = (
            f"{r.get('added_ttft_p50_ms', 0):>9.2f}{r.get('added_ttft_p99_ms', 0):>9.2f}"
            if name != "direct"
            else f"{'':>9}{'':>9}"
        )
        print(
            f"{profile:<10}{concurrency:>8} {name:<11}{r['samples']:>6}{r['errors']:>5}"
            f"{r['ttft_p50_ms']:>10.2f}{r['ttft_p99_ms']:>9.2f}{added}"
            f"{r['tokens_per_s']:>10.0f}{r['tokens_per_s_min']:>9.0f}{r['tokens_per_s_max']:>9.0f}"
            f"{r.get('tokens_ratio_vs_direct', 1.0):>9.2f}{r['process_cpu_s']:>8.1f}",
            flush=True,
        )
    shares = ", ".join(
        f"{n} {r['loadgen_cpu_s']:.1f}s ({r['loadgen_cpu_share']:.0%} of a core; "
        f"ceiling {r['loadgen_tokens_per_cpu_s']:.0f} tok/cpu-s)"
        for n, r in row.items()
        if isinstance(r, dict) and n != "floor"
    )
    print(f"{'':<18} loadgen cpu: {shares}", flush=True)
    queues = ", ".join(
        f"{n} engine {r['engine_cpu_s']:.1f}s cpu / {r['engine_run_queue_s']:.1f}s waiting"
        + (f", proxy {r['proxy_run_queue_s']:.1f}s waiting" if n != "direct" else "")
        for n, r in row.items()
        if isinstance(r, dict) and n != "floor"
    )
    print(f"{'':<18} in these rounds: {queues}", flush=True)
    for name, f in row.get("floor", {}).items():
        print(
            f"{'':<18} {name} vs nginx: +p50 {f['added_ttft_p50_minus_nginx_ms']:+.2f} ms "
            f"(goal <= {FLOOR_TTFT_MS}), tok/s x{f['tokens_ratio_vs_nginx']:.3f}"
            + (f" (goal >= {FLOOR_TOKENS_RATIO})" if concurrency == 256 else ""),
            flush=True,
        )


if __name__ == "__main__":
    sys.exit(main())
