"""InferenceBenchmark's runner: is the framework the bottleneck?

Side by side in one run, against one engine stand-in with zero delays on loopback (the stand-in
at its fastest, so any shortfall is the measuring side's): per concurrency level, rounds
interleave

- ``runner``: ``python -m sparkrun_operator.runtime.bench`` driving llama-benchy 0.4 (tokenizer and
  corpus from the local Hub), ``requests`` measured requests of ``--tokens`` output tokens; the
  figures are the runner's own (``outputTokensPerSecond``, ``requestsPerSecond`` over the measured
  span) and its CPU (the runner and llama-benchy, children included) per measured request;
- ``plain``: the same number of streaming chat completions of the same length and concurrency
  sent by ``bench._common.StreamClient`` (a minimal keep-alive client), tokens/s over the span.

The ratio runner/plain of output tokens/s says how much of what the engine serves the framework
can measure. llama-benchy also sends warmup requests and a latency probe per run; its CPU per
request counts them against the measured requests (what a user pays per measured request).

Run: ``python -m bench.benchmark [--concurrency 1 8 32 --requests 64 --tokens 64 --rounds 3]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench import _common
from sparkrun_testbed.hfhub import Hub, default_repos
from sparkrun_testbed.hfhub.fixtures import CORPUS_FILE, TOKENIZER

MODEL = "Qwen/Qwen3-0.6B"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_runner(
    url: str, hub: Hub, concurrency: int, requests: int, tokens: int, home: Path
) -> dict[str, Any]:
    plan = {
        "framework": "llama-benchy",
        "benchArgs": {
            "book_url": f"{hub.url}/{TOKENIZER}/resolve/main/{CORPUS_FILE}",
            "skip_coherence": True,
        },
        "scenario": {
            "name": f"c{concurrency}",
            "concurrency": concurrency,
            "requests": requests,
            "inputTokens": 64,
            "outputTokens": tokens,
        },
        "baseUrl": f"{url}/v1",
        "model": "tiny",
        "modelId": MODEL,
        "tokenizer": TOKENIZER,
        "hfEndpoint": hub.url,
    }
    before = _children_cpu()
    proc = subprocess.run(
        [sys.executable, "-m", "sparkrun_operator.runtime.bench", "--plan", json.dumps(plan)],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(home)},
        check=False,
    )
    cpu = _children_cpu() - before
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    if last.get("event") != "result":
        raise RuntimeError(f"the runner failed: {last}")
    result = last["result"]
    return {
        "tokens_per_s": result["outputTokensPerSecond"],
        "requests_per_s": result["requestsPerSecond"],
        "requests": result["requests"],
        "cpu_s": cpu,
        "cpu_ms_per_request": 1000 * cpu / max(1, result["requests"]),
        "ttft_p50_ms": result["ttft"]["p50"],
    }


async def _plain(port: int, concurrency: int, requests: int, tokens: int) -> dict[str, Any]:
    body = json.dumps(
        {
            "model": "tiny",
            "messages": [{"role": "user", "content": "w1 w2 w3 " * 20}],
            "max_tokens": tokens,
            "stream": True,
        }
    ).encode()
    queue = list(range(requests))
    samples: list[_common.Sample] = []

    async def worker() -> None:
        client = _common.StreamClient("127.0.0.1", port, "/v1/chat/completions")
        try:
            while queue:
                queue.pop()
                samples.append(await client.request(body))
        finally:
            await client.close()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    span = time.perf_counter() - start
    total = sum(s.tokens for s in samples)
    return {"tokens_per_s": total / span, "requests_per_s": len(samples) / span, "requests": len(samples)}


def run_plain(port: int, concurrency: int, requests: int, tokens: int) -> dict[str, Any]:
    before = time.process_time()
    out = asyncio.run(_plain(port, concurrency, requests, tokens))
    cpu = time.process_time() - before
    out["cpu_s"] = cpu
    out["cpu_ms_per_request"] = 1000 * cpu / max(1, out["requests"])
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-benchmark-"))
    port = _common.free_port()
    engine_env = {"SPARKRUN_ENGINE_OUTPUT_TOKENS": str(args.tokens * 4)}
    cmd = [sys.executable, "-m", "sparkrun_testbed.engine", "serve", MODEL, "--served-model-name", "tiny"]
    cmd += ["--host", "127.0.0.1", "--port", str(port), "--max-model-len", "32768", "--max-num-seqs", "256"]
    engine = _common.Proc(cmd, work / "engine.log", env=engine_env)
    rows: list[dict[str, Any]] = []
    try:
        engine.wait_http(f"http://127.0.0.1:{port}/health")
        with Hub(default_repos(lfs_mib=0.01)) as hub:
            for concurrency in args.concurrency:
                for r in range(args.rounds):
                    order = ("runner", "plain") if r % 2 == 0 else ("plain", "runner")
                    for target in order:
                        engine_cpu = engine.cpu_seconds()
                        if target == "runner":
                            url = f"http://127.0.0.1:{port}"
                            row = run_runner(url, hub, concurrency, args.requests, args.tokens, work / "home")
                        else:
                            row = run_plain(port, concurrency, args.requests, args.tokens)
                        row.update(target=target, concurrency=concurrency, round=r)
                        row["engine_cpu_s"] = engine.cpu_seconds() - engine_cpu
                        rows.append(row)
                        print(json.dumps(row))
    finally:
        engine.stop()
    summary = _summary(rows, args.concurrency)
    path = _common.write_json(
        "benchmark",
        {
            "inputs": vars(args),
            "environment": _common.environment(["llama-benchy", "tool-eval-bench"]),
            "rows": rows,
            "summary": summary,
        },
    )
    print(f"\nwrote {path}")


def _summary(rows: list[dict[str, Any]], levels: list[int]) -> list[dict[str, Any]]:
    summary = []
    print("\n| concurrency | target | n | tokens/s median (min-max) | x plain | req/s | CPU ms/request |")
    print("|---|---|---|---|---|---|---|")
    for concurrency in levels:
        plain = _common.median(
            [r["tokens_per_s"] for r in rows if r["concurrency"] == concurrency and r["target"] == "plain"]
        )
        for target in ("plain", "runner"):
            mine = [r for r in rows if r["concurrency"] == concurrency and r["target"] == target]
            tps = [r["tokens_per_s"] for r in mine]
            entry = {
                "concurrency": concurrency,
                "target": target,
                "n": sum(r["requests"] for r in mine),
                "tokens_per_s": _common.median(tps),
                "min": min(tps),
                "max": max(tps),
                "ratio": _common.median(tps) / plain,
                "requests_per_s": _common.median([r["requests_per_s"] for r in mine]),
                "cpu_ms_per_request": _common.median([r["cpu_ms_per_request"] for r in mine]),
            }
            summary.append(entry)
            print(
                f"| {concurrency} | {target} | {entry['n']} | {entry['tokens_per_s']:.0f} "
                f"({entry['min']:.0f}-{entry['max']:.0f}) | {entry['ratio']:.2f} "
                f"| {entry['requests_per_s']:.1f} | {entry['cpu_ms_per_request']:.1f} |"
            )
    return summary


if __name__ == "__main__":
    main()
