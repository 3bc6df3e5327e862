"""What answers the operator's scrapes in ``bench.scale --autoscaling``: the engines' ``/metrics``.

The scale benchmark's pods are KWOK pods: no process, only a ``status.podIP`` that KWOK takes
from the testbed's pod CIDR (``kwok --cidr``, ``plane.Options.pod_cidr``; the nodes have no
``spec.podCIDR``). With ``--autoscaling`` the operator scrapes ``http://<podIP>:8000/metrics``
of every Ready leader every ``scrapeIntervalSeconds``. To give those scrapes something real to
answer, the benchmark

- gives its testbed a pod CIDR of its own, :data:`POD_CIDR`, and makes every address of it local
  (``ip route add local 10.250.0.0/16 dev lo``, Linux's "AnyIP": the kernel accepts a connection
  to any address of a ``local`` route on the loopback device; removed when the run ends). A pod
  CIDR inside ``127.0.0.0/8`` would need no route, but the apiserver refuses loopback addresses in
  EndpointSlices, so the endpoint-slice controller would retry every Service's slice forever and
  load the apiserver the run measures;
- runs one process (``python -m bench._scrapes``) listening on ``0.0.0.0:8000`` that answers
  ``GET /metrics`` on any address of :data:`POD_CIDR` with a body in vLLM's layout and size
  (gauges, counters, and the histograms vLLM 0.11 exports for one model), and counts the scrapes
  per pod address and per second; ``GET /stats`` on ``127.0.0.1`` returns the counts as JSON.

The answer reports a steady load under the benchmark's target (1 request running, none waiting),
so the autoscaler keeps every workload at one replica: the run measures what scraping costs, not
what scaling does. Port 8000 must be free on the machine (it is the engines' port, which the
operator does not let a workload change); the run stops with a message when it is not, or when
the route cannot be added (it needs ``CAP_NET_ADMIN``, i.e. root).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import errno
import ipaddress
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench import _common
from sparkrun_operator.api.workload import ENGINE_PORT

#: ``spec.autoscaling`` of every workload of an ``--autoscaling`` run.
AUTOSCALING: dict[str, Any] = {
    "mode": "Operator",
    "minReplicas": 1,
    "maxReplicas": 2,
    "target": {"waitingPerReplica": 4},
    "scrapeIntervalSeconds": 15,
}

#: The benchmark testbed's pod CIDR (the testbed's default, 10.244.0.0/16, stays unrouted for
#: every other testbed on the machine).
POD_CIDR = "10.250.0.0/16"
MODEL = "Qwen/Qwen3-0.6B"
_HEAD_LIMIT = 16 * 1024

_LATENCY = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_REQUEST = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0)
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 40960)
#: vLLM 0.11's histograms for one model (name, buckets).
_HISTOGRAMS = (
    ("vllm:time_to_first_token_seconds", _LATENCY),
    ("vllm:inter_token_latency_seconds", _LATENCY),
    ("vllm:time_per_output_token_seconds", _LATENCY),
    ("vllm:e2e_request_latency_seconds", _REQUEST),
    ("vllm:request_queue_time_seconds", _REQUEST),
    ("vllm:request_inference_time_seconds", _REQUEST),
    ("vllm:request_prefill_time_seconds", _REQUEST),
    ("vllm:request_decode_time_seconds", _REQUEST),
    ("vllm:request_prompt_tokens", _TOKENS),
    ("vllm:request_generation_tokens", _TOKENS),
    ("vllm:iteration_tokens_total", _TOKENS),
    ("vllm:request_max_num_generation_tokens", _TOKENS),
    ("vllm:request_params_n", (1, 2, 5, 10, 20)),
    ("vllm:request_params_max_tokens", _TOKENS),
)


def _static_body() -> bytes:
    """The part of the answer that does not change: process metrics and the histograms."""
    labels = f'engine="0",model_name="{MODEL}"'
    lines = [
        "# HELP python_gc_objects_collected_total Objects collected during gc",
        "# TYPE python_gc_objects_collected_total counter",
        *(f'python_gc_objects_collected_total{{generation="{g}"}} {1000.0 * (g + 1)}' for g in range(3)),
        "# HELP process_resident_memory_bytes Resident memory size in bytes.",
        "# TYPE process_resident_memory_bytes gauge",
        "process_resident_memory_bytes 3.216809984e+09",
    ]
    for name, buckets in _HISTOGRAMS:
        lines += [f"# HELP {name} Histogram of {name.removeprefix('vllm:')}.", f"# TYPE {name} histogram"]
        lines += [f'{name}_bucket{{{labels},le="{float(b)}"}} {10.0 * i}' for i, b in enumerate(buckets)]
        n = 10.0 * len(buckets)
        lines += [
            f'{name}_bucket{{{labels},le="+Inf"}} {n}',
            f"{name}_count{{{labels}}} {n}",
            f"{name}_sum{{{labels}}} {n * 0.37}",
            f"# HELP {name}_created Histogram of {name.removeprefix('vllm:')}.",
            f"# TYPE {name}_created gauge",
            f"{name}_created{{{labels}}} 1.765e+09",
        ]
    return ("\n".join(lines) + "\n").encode()


def _gauges(answered: int) -> bytes:
    """The figures the autoscaler reads: one request running, none waiting, a counter that moves."""
    labels = f'engine="0",model_name="{MODEL}"'
    return (
        "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
        "# TYPE vllm:num_requests_running gauge\n"
        f"vllm:num_requests_running{{{labels}}} 1.0\n"
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
        "# TYPE vllm:num_requests_waiting gauge\n"
        f"vllm:num_requests_waiting{{{labels}}} 0.0\n"
        "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n"
        "# TYPE vllm:kv_cache_usage_perc gauge\n"
        f"vllm:kv_cache_usage_perc{{{labels}}} 0.05\n"
        "# HELP vllm:request_success_total Count of successfully processed requests.\n"
        "# TYPE vllm:request_success_total counter\n"
        f'vllm:request_success_total{{{labels},finished_reason="stop"}} {float(answered)}\n'
    ).encode()


class Counts:
    """Scrapes per pod address (the connection's local address) and per second."""

    def __init__(self, cidr: str) -> None:
        self.network = ipaddress.ip_network(cidr)
        self.per_pod: dict[str, int] = {}
        self.first: dict[str, float] = {}
        self.per_second: dict[int, int] = {}
        self.refused = 0

    def scraped(self, address: str) -> int:
        now = time.time()
        self.per_pod[address] = self.per_pod.get(address, 0) + 1
        self.first.setdefault(address, now)
        self.per_second[int(now)] = self.per_second.get(int(now), 0) + 1
        return self.per_pod[address]

    def json(self) -> bytes:
        return json.dumps(
            {
                "scrapes": sum(self.per_pod.values()),
                "pods": len(self.per_pod),
                "per_pod": self.per_pod,
                "first": self.first,
                "per_second": self.per_second,
                "refused": self.refused,
            }
        ).encode()


async def serve(cidr: str, port: int, host: str | list[str] = "0.0.0.0") -> asyncio.Server:
    """The listener: ``GET /metrics`` to an address of ``cidr``, ``GET /stats`` to 127.0.0.1."""
    counts = Counts(cidr)
    static = _static_body()

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        local = str(writer.get_extra_info("sockname")[0])
        ours = ipaddress.ip_address(local) in counts.network
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                target = head.split(b" ", 2)[1] if head.count(b" ") >= 2 else b""
                if target == b"/metrics" and ours:
                    body = _gauges(counts.scraped(local)) + static
                    kind = b"text/plain; version=0.0.4; charset=utf-8"
                    status = b"200 OK"
                elif target == b"/stats" and local == "127.0.0.1":
                    body, kind, status = counts.json(), b"application/json", b"200 OK"
                else:
                    counts.refused += 1
                    body, kind, status = b"not here\n", b"text/plain", b"404 Not Found"
                writer.write(
                    b"HTTP/1.1 %s\r\ncontent-type: %s\r\ncontent-length: %d\r\n\r\n%s"
                    % (status, kind, len(body), body)
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(on_conn, host, port, limit=_HEAD_LIMIT, reuse_address=True)


@contextlib.contextmanager
def local_route(cidr: str) -> Iterator[None]:
    """Every address of ``cidr`` local to this machine for the duration (``ip route add local``);
    ``RuntimeError`` with what to do when that is not possible."""
    add = ["ip", "route", "add", "local", cidr, "dev", "lo"]
    try:
        done = subprocess.run(add, capture_output=True, text=True, timeout=30, check=False)
    except FileNotFoundError:
        raise RuntimeError("--autoscaling needs the `ip` command (iproute2)") from None
    if done.returncode != 0 and "File exists" not in done.stderr:
        raise RuntimeError(
            f"--autoscaling routes the benchmark's pod CIDR {cidr} to loopback and could not: "
            f"`{' '.join(add)}`: {done.stderr.strip()} (it needs root or CAP_NET_ADMIN)"
        )
    ours = done.returncode == 0  # a route left by an earlier run is used and left as it was
    try:
        yield
    finally:
        if ours:
            subprocess.run(["ip", "route", "del", "local", cidr, "dev", "lo"], check=False, timeout=30)


class ScrapeTargets:
    """``python -m bench._scrapes`` as a child process, and its counts."""

    def __init__(self, log: Path, *, cidr: str = POD_CIDR, port: int = ENGINE_PORT) -> None:
        self.port = port
        self.proc = _common.Proc(
            [sys.executable, "-m", "bench._scrapes", "--cidr", cidr, "--port", str(port)], log
        )
        deadline = time.monotonic() + 30
        while "answering /metrics" not in (log_text := log.read_text()):
            if self.proc.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.stop()
                if "in use" in log_text:
                    raise RuntimeError(
                        f"--autoscaling serves the engines' /metrics on port {port} of every address and "
                        f"the port is taken on this machine: stop what listens there "
                        f"(`ss -ltnp 'sport = :{port}'`)"
                    )
                raise RuntimeError(f"the scrape targets did not start: {log_text[-2000:]}")
            time.sleep(0.1)

    def stats(self) -> dict[str, Any]:
        answer: dict[str, Any] = httpx.get(f"http://127.0.0.1:{self.port}/stats", timeout=30).json()
        return answer

    def cpu_seconds(self) -> float:
        return self.proc.cpu_seconds()

    def stop(self) -> None:
        self.proc.stop()


def rate(stats: dict[str, Any], start: float, end: float) -> float:
    """Scrapes per second between two ``time.time()`` moments (whole seconds)."""
    seconds = range(int(start), int(end))
    per_second = stats["per_second"]
    return float(sum(per_second.get(str(s), 0) for s in seconds) / max(1, len(seconds)))


def summary(
    stats: dict[str, Any],
    *,
    start: float,
    converged: float,
    idle: tuple[float, float],
    ready: int,
    cpu_s: float,
) -> dict[str, Any]:
    """The scrapes of a run: how many, of how many pods, per second while converging (from the
    first create to the last Ready) and while idle, against ``ready`` engines every interval;
    the CPU seconds the scrape targets' process used so far (the load generator's own cost)."""
    return {
        "targets_cpu_s": cpu_s,
        "scrapes": stats["scrapes"],
        "pods_scraped": stats["pods"],
        "per_s_converging": rate(stats, start, converged),
        "per_s_idle": rate(stats, *idle),
        "expected_per_s_idle": ready / AUTOSCALING["scrapeIntervalSeconds"],
        "refused": stats["refused"],
        "per_second": {k: v for k, v in sorted(stats["per_second"].items()) if int(k) >= int(start)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench._scrapes", description=__doc__)
    parser.add_argument("--cidr", default=POD_CIDR)
    parser.add_argument("--port", type=int, default=ENGINE_PORT)
    parser.add_argument("--host", default="0.0.0.0")
    args = parser.parse_args()

    async def run() -> None:
        try:
            server = await serve(args.cidr, args.port, args.host)
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                print(f"port {args.port} in use", flush=True)
            raise
        print(f"answering /metrics on {args.cidr} port {args.port}", flush=True)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
