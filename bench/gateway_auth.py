"""What each gateway authentication mode adds: ``none``, ``keys``, ``kubernetes`` (warm caches).

Two measures:

- **Through the wire**, beside the other targets of ``python -m bench.gateway --auth
  keys,kubernetes``: targets ``gateway-keys`` (``--keys`` file) and ``gateway-k8s``
  (``--auth=kubernetes`` against :mod:`bench.gateway_reviewapi`, the TokenReview and
  SubjectAccessReview API on loopback) in front of the same upstream as ``gateway`` (``none``).
  Each row gets ``added_ttft_p50_vs_none_ms`` (and p99): the mode's added time to first token
  minus the open gateway's. ``--auth-ttl`` is an hour, so every measured request hits the caches
  (the reviews the stand-in answered are reported: one TokenReview and one SubjectAccessReview
  per gateway, at warm-up).
- **In process**, ``python -m bench.gateway_auth [--requests N]``: the cost of deciding who calls
  and whether it may use the workload (``Admission.identify`` + ``may_use``, what a request pays
  before routing) per mode, in microseconds, with warm caches: the hot path alone, without the
  noise of HTTP on shared cores. JSON goes to ``bench/results/gateway-auth-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Protocol

import httpx

from sparkrun_operator.gateway.admission import Admission
from sparkrun_operator.gateway.auth import Grant, StaticKeySource
from sparkrun_operator.gateway.config import GatewaySettings
from sparkrun_operator.gateway.identity import KubeIdentity
from sparkrun_operator.gateway.request import Ctx
from sparkrun_operator.gateway.routing import Workload
from sparkrun_operator.gateway.wake import NoopWaker, WakeCoordinator
from sparkrun_operator.k8s.client import Kube

from ._common import Proc, environment, free_port, write_json
from .gateway_reviewapi import ReviewApi, kubeconfig

NAMESPACE = "default"
"""The namespace of the routing file's workloads (bench.gateway's ``m``)."""
USER = "system:serviceaccount:default:client"
#: Target names of the modes (``gateway`` is ``none``).
TARGETS = {"keys": "gateway-keys", "kubernetes": "gateway-k8s"}
#: The review API stand-in's port, per process (one ``kubernetes`` target at a time).
_REVIEW_PORT: dict[str, int] = {}


class Targets(Protocol):
    ports: dict[str, int]
    procs: dict[str, Proc]

    def _proxy(self, name: str, proc: Proc) -> None: ...


def start_targets(
    targets: Targets, workdir: Path, routes: Path, key: str, modes: list[str], profile: str
) -> None:
    """Start a gateway per authentication mode in ``modes`` (and the review API stand-in for
    ``kubernetes``), registered as targets; ``key`` is the bearer every client sends."""
    gateway = [sys.executable, "-m", "sparkrun_operator.gateway", "--routes", str(routes)]
    for mode in modes:
        flags: list[str]
        if mode == "keys":
            keys = workdir / "keys.json"
            keys.write_text(json.dumps({"keys": [{"key": key, "models": ["*"]}]}))
            flags = ["--keys", str(keys)]
        elif mode == "kubernetes":
            aport = free_port()
            config = workdir / "reviews.json"
            grants = {"tokens": {key: USER}, "grants": {USER: [[NAMESPACE, ""]]}}
            config.write_text(json.dumps(grants))
            api = Proc(
                [
                    sys.executable,
                    "-m",
                    "bench.gateway_reviewapi",
                    "--port",
                    str(aport),
                    "--config",
                    str(config),
                ],
                workdir / f"reviewapi-{profile}.log",
            )
            targets.procs["reviewapi"] = api
            _REVIEW_PORT["port"] = aport
            api.wait_http(f"http://127.0.0.1:{aport}/counts")
            kc = kubeconfig(f"http://127.0.0.1:{aport}", workdir / "reviews.kubeconfig")
            flags = ["--auth=kubernetes", "--kubeconfig", str(kc), "--auth-ttl", "3600"]
        else:
            raise SystemExit(f"--auth: unknown mode {mode!r} (keys, kubernetes)")
        name, port = TARGETS[mode], free_port()
        targets.ports[name] = port
        argv = [*gateway, "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning", *flags]
        targets._proxy(name, Proc(argv, workdir / f"{name}-{profile}.log"))
        targets.procs[name].wait_http(f"http://127.0.0.1:{port}/healthz")


def annotate(row: dict[str, Any], targets: Targets) -> None:
    """Each mode's added TTFT over the open gateway's, and the reviews the stand-in answered."""
    base = row.get("gateway")
    for name in TARGETS.values():
        if name in row and base is not None:
            row[name]["added_ttft_p50_vs_none_ms"] = row[name]["ttft_p50_ms"] - base["ttft_p50_ms"]
            row[name]["added_ttft_p99_vs_none_ms"] = row[name]["ttft_p99_ms"] - base["ttft_p99_ms"]
            print(
                f"{'':<18} {name} vs gateway (none): +p50 {row[name]['added_ttft_p50_vs_none_ms']:+.3f} ms, "
                f"+p99 {row[name]['added_ttft_p99_vs_none_ms']:+.3f} ms",
                flush=True,
            )
    if "reviewapi" in targets.procs:
        port = _REVIEW_PORT["port"]
        row["reviews_answered"] = httpx.get(f"http://127.0.0.1:{port}/counts", timeout=5).json()


# -- in process: the hot path alone -------------------------------------------------------------


def _ctx(key: str) -> Ctx:
    scope = {"client": ("127.0.0.1", 5000), "type": "http"}
    ctx = Ctx(scope, _never, _never, "rid", "openai", "bench", 0.0, {})
    ctx.api_key = key
    return ctx


async def _never(*_: Any) -> Any:
    raise AssertionError("not called")


async def _per_request_us(admission: Admission, key: str, workload: Workload, requests: int) -> list[float]:
    """Microseconds per request of identify + may_use, in 5 batches (warm caches)."""
    await admission.identify(_ctx(key))  # warm-up: fills the caches
    assert await admission.may_use(_ctx(key), workload.served_name, workload)
    batches = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(requests):
            ctx = _ctx(key)
            await admission.identify(ctx)
            await admission.may_use(ctx, workload.served_name, workload)
        batches.append((time.perf_counter() - start) / requests * 1e6)
    return batches


async def in_process(requests: int, workdir: Path) -> dict[str, Any]:
    key = "sk-bench-0123456789abcdef0123456789abcdef"
    workload = Workload(namespace=NAMESPACE, name="m", served_name="m", endpoints=("http://127.0.0.1:1",))
    settings = GatewaySettings()
    api = ReviewApi({key: USER}, {USER: [(NAMESPACE, "")]})
    await api.start()
    kube = await Kube.connect(field_manager="bench", kubeconfig=str(kubeconfig(api.url, workdir / "kc")))
    try:
        identity = KubeIdentity(kube, token_ttl=3600, access_ttl=3600)
        await identity.start()
        source: Any = None
        wakes = WakeCoordinator(source, NoopWaker(), timeout=1.0)
        modes = {
            "none": Admission(settings, source, None, wakes),
            "keys": Admission(settings, source, StaticKeySource({key: Grant("bench", None)}), wakes),
            "kubernetes": Admission(settings, source, None, wakes, identity),
        }
        out: dict[str, Any] = {}
        for mode, admission in modes.items():
            batches = await _per_request_us(admission, key, workload, requests)
            out[mode] = {"us_per_request_median": statistics.median(batches), "batches_us": batches}
        for mode in ("keys", "kubernetes"):
            out[mode]["added_us_vs_none"] = (
                out[mode]["us_per_request_median"] - out["none"]["us_per_request_median"]
            )
        out["reviews_answered"] = dict(api.reviews)
        return out
    finally:
        await kube.close()
        await api.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.gateway_auth")
    parser.add_argument(
        "--requests", type=int, default=20_000, help="requests per batch (5 batches per mode)"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-gateway-auth-") as tmp:
        results = asyncio.run(in_process(args.requests, Path(tmp)))
    for mode in ("none", "keys", "kubernetes"):
        r = results[mode]
        added = f"  (+{r['added_us_vs_none']:.2f} us vs none)" if "added_us_vs_none" in r else ""
        print(f"{mode:<11} {r['us_per_request_median']:8.2f} us per request{added}")
    print(f"reviews answered by the stand-in (all at warm-up): {results['reviews_answered']}")
    payload = {
        "benchmark": "gateway-auth",
        "command": "python -m bench.gateway_auth " + " ".join(argv if argv is not None else sys.argv[1:]),
        "inputs": {"requests_per_batch": args.requests, "batches": 5},
        "environment": environment(),
        "results": results,
    }
    print(f"wrote {write_json('gateway-auth', payload)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
