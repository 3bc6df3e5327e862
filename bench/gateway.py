"""Gateway benchmark: added latency and streamed tokens/s, direct vs gateway vs LiteLLM proxy.

``python -m bench.gateway [--quick] [--litellm PATH]``

One engine stand-in is the upstream of every target, so the comparison is of the proxies alone:

- ``direct``: the stand-in itself (the physical limit);
- ``gateway``: ``python -m sparkrun_operator.gateway`` in front of it;
- ``litellm``: the LiteLLM proxy (``litellm[proxy]`` from PyPI, in its own venv; default
  ``/tmp/litellm-venv/bin/litellm``) in front of it, when installed.

Two upstream profiles: ``zero`` (no TTFT, no per-token delay: proxy overhead dominates) and
``realistic`` (50 ms TTFT, 10 ms per token). For each concurrency (1/16/64/256 streams), rounds
of each target run interleaved (A B C, B C A, ...); every round is ``concurrency`` workers each
sending ``per_worker`` streaming chat requests on a keep-alive connection. Reported: time to first
token p50/p99 per target, the gateway's and LiteLLM's added p50/p99 over direct, tokens/s (median
of rounds, with min/max), sample counts, and the CPU seconds of each process (the load generator
shares the machine). JSON goes to ``bench/results/gateway-<time>.json``.
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

from ._common import Proc, Sample, StreamClient, environment, free_port, median, pct, write_json

# LiteLLM refuses to start without a strong master key; every target gets the same bearer token.
BENCH_KEY = "sk-" + secrets.token_hex(32)
PROFILES = {
    "zero": {"SPARKRUN_ENGINE_TTFT_SECONDS": "0", "SPARKRUN_ENGINE_TOKEN_SECONDS": "0"},
    "realistic": {"SPARKRUN_ENGINE_TTFT_SECONDS": "0.05", "SPARKRUN_ENGINE_TOKEN_SECONDS": "0.01"},
}
OUTPUT_TOKENS = 64


class Targets:
    """The upstream and the proxies in front of it, for one profile."""

    def __init__(self, workdir: Path, profile: str, litellm: str | None) -> None:
        self.procs: dict[str, Proc] = {}
        self.ports: dict[str, int] = {}
        try:
            self._start(workdir, profile, litellm)
        except BaseException:
            self.stop()  # NB: nothing may outlive a failed start
            raise

    def _start(self, workdir: Path, profile: str, litellm: str | None) -> None:
        port = free_port()
        self.ports["direct"] = port
        engine = Proc(
            [
                *(sys.executable, "-m", "sparkrun_testbed.engine", "serve", "org/bench"),
                *("--served-model-name", "m", "--host", "127.0.0.1", "--port", str(port)),
                *("--max-num-seqs", "4096"),
            ],
            workdir / f"engine-{profile}.log",
            env={**PROFILES[profile], "SPARKRUN_ENGINE_OUTPUT_TOKENS": str(OUTPUT_TOKENS)},
        )
        self.procs["direct"] = engine
        engine.wait_http(f"http://127.0.0.1:{port}/health")
        upstream = f"http://127.0.0.1:{port}"

        routes = workdir / "routes.json"
        entry = {"name": "m", "servedName": "m", "endpoints": [upstream]}
        routes.write_text(json.dumps({"workloads": [entry]}))
        gport = free_port()
        self.ports["gateway"] = gport
        gateway = Proc(
            [
                *(sys.executable, "-m", "sparkrun_operator.gateway", "--routes", str(routes)),
                *("--host", "127.0.0.1", "--port", str(gport), "--log-level", "warning"),
            ],
            workdir / f"gateway-{profile}.log",
        )
        self.procs["gateway"] = gateway
        gateway.wait_http(f"http://127.0.0.1:{gport}/healthz")

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
            self.procs["litellm"] = proxy
            proxy.wait_http(f"http://127.0.0.1:{lport}/health/liveliness", timeout=180)

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.stop()


async def run_round(port: int, concurrency: int, per_worker: int) -> tuple[list[Sample], int, float]:
    """``concurrency`` workers x ``per_worker`` streams; returns samples, errors, wall seconds."""
    body = json.dumps(
        {
            "model": "m",
            "messages": [{"role": "user", "content": "Benchmark the gateway, please."}],
            "max_tokens": OUTPUT_TOKENS,
            "stream": True,
        }
    ).encode()
    samples: list[Sample] = []
    errors = 0

    async def worker() -> None:
        nonlocal errors
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
    await asyncio.gather(*(worker() for _ in range(concurrency)))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway")
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--litellm", default=os.environ.get("LITELLM_BIN", "/tmp/litellm-venv/bin/litellm"))
    parser.add_argument("--concurrency", default="1,16,64,256")
    parser.add_argument("--profiles", default="zero,realistic")
    args = parser.parse_args(argv)
    litellm = args.litellm if Path(args.litellm).exists() else None
    rounds = 1 if args.quick else args.rounds
    levels = [int(c) for c in args.concurrency.split(",")]
    results: dict[str, Any] = {
        "benchmark": "gateway",
        "command": "python -m bench.gateway " + " ".join(argv if argv is not None else sys.argv[1:]),
        "inputs": {
            "profiles": {p: PROFILES[p] for p in args.profiles.split(",")},
            "concurrency": levels,
            "rounds": rounds,
            "output_tokens": OUTPUT_TOKENS,
        },
        "environment": environment(),
        "litellm": litellm or f"not installed at {args.litellm}",
        "results": {},
    }
    print(f"litellm: {results['litellm']}", flush=True)
    # SIGTERM unwinds like Ctrl-C, so the child processes are stopped by the finally blocks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    path: Path | None = None
    with tempfile.TemporaryDirectory(prefix="bench-gateway-") as tmp:
        for profile in args.profiles.split(","):
            targets = Targets(Path(tmp), profile, litellm)
            try:
                names = list(targets.ports)
                for concurrency in levels:
                    per_worker = max(2, min(20, 256 // concurrency))
                    collected: dict[str, list[tuple[list[Sample], int, float]]] = {n: [] for n in names}
                    cpu_before = {n: targets.procs[n].cpu_seconds() for n in names}
                    load_cpu = time.process_time()
                    # Warm-up: one small round per target (connections, imports), not recorded.
                    for name in names:
                        asyncio.run(run_round(targets.ports[name], min(concurrency, 8), 1))
                    for r in range(rounds):
                        order = names[r % len(names) :] + names[: r % len(names)]
                        for name in order:
                            measured = asyncio.run(run_round(targets.ports[name], concurrency, per_worker))
                            collected[name].append(measured)
                    row = {n: summarize(collected[n]) for n in names}
                    for n in names:
                        row[n]["process_cpu_s"] = targets.procs[n].cpu_seconds() - cpu_before[n]
                    row["loadgen_cpu_s"] = time.process_time() - load_cpu
                    for n in names:
                        if n == "direct":
                            continue
                        row[n]["added_ttft_p50_ms"] = row[n]["ttft_p50_ms"] - row["direct"]["ttft_p50_ms"]
                        row[n]["added_ttft_p99_ms"] = row[n]["ttft_p99_ms"] - row["direct"]["ttft_p99_ms"]
                        ratio = row[n]["tokens_per_s"] / row["direct"]["tokens_per_s"]
                        row[n]["tokens_ratio_vs_direct"] = ratio
                    if "litellm" in row:
                        row["gateway"]["tokens_ratio_vs_litellm"] = (
                            row["gateway"]["tokens_per_s"] / row["litellm"]["tokens_per_s"]
                        )
                    results["results"].setdefault(profile, {})[str(concurrency)] = row
                    _print_row(profile, concurrency, row)
                    path = write_json("gateway", results, path)  # after every row: partial runs count
            finally:
                targets.stop()
    print(f"\nwrote {path}")
    return 0


def _print_row(profile: str, concurrency: int, row: dict[str, Any]) -> None:
    if concurrency == 1 or not hasattr(_print_row, "header"):
        print(
            f"\n{'profile':<10}{'streams':>8} {'target':<8}{'n':>6}{'err':>5}{'ttft p50':>10}{'p99':>9}"
            f"{'+p50':>9}{'+p99':>9}{'tok/s':>10}{'min':>9}{'max':>9}{'x direct':>9}{'cpu s':>8}",
            flush=True,
        )
        _print_row.header = True  # type: ignore[attr-defined]
    for name, r in row.items():
        if not isinstance(r, dict):
            continue
        added = (
            f"{r.get('added_ttft_p50_ms', 0):>9.2f}{r.get('added_ttft_p99_ms', 0):>9.2f}"
            if name != "direct"
            else f"{'':>9}{'':>9}"
        )
        print(
            f"{profile:<10}{concurrency:>8} {name:<8}{r['samples']:>6}{r['errors']:>5}"
            f"{r['ttft_p50_ms']:>10.2f}{r['ttft_p99_ms']:>9.2f}{added}"
            f"{r['tokens_per_s']:>10.0f}{r['tokens_per_s_min']:>9.0f}{r['tokens_per_s_max']:>9.0f}"
            f"{r.get('tokens_ratio_vs_direct', 1.0):>9.2f}{r['process_cpu_s']:>8.1f}",
            flush=True,
        )
    print(f"{'':<18} loadgen cpu {row['loadgen_cpu_s']:.1f}s", flush=True)


if __name__ == "__main__":
    sys.exit(main())
