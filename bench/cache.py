"""Model cache: download throughput, verify throughput and bytes re-fetched after a kill.

Side by side in one run, against one local Hub process on loopback (``sparkrun_testbed.hfhub``,
``sparkrun-bench/model``: ``--shards`` LFS shards of ``--shard-mib`` MiB plus a config):

- download: the downloader (``Downloader.download``, verify=size and verify=sha256) vs
  ``huggingface_hub.snapshot_download`` alone, interleaved round by round (A B C, C B A, ...),
  each into a fresh cache; target >= 0.9x of ``snapshot_download``'s throughput (verify=size).
  The baseline uses the downloader's 1 MiB read chunk (``CHUNK_SIZE``); the library as shipped
  (10 MiB chunks, slower here) is shown too;
- verify: ``Downloader.inspect(level="sha256")`` (with 1 worker and with the default 8) vs a
  bare ``hashlib.sha256`` loop over the same blob files, interleaved; the files are in the page
  cache for both (read once before); target >= 0.9x;
- resume: the downloader (a subprocess, Hub slowed down) is SIGKILLed when the Hub has sent
  half the bytes; the rerun's bytes from the Hub (counted by the Hub) are compared with the
  bytes still missing on disk and with what a rerun that restarts unfinished files would fetch.

Run: ``python -m bench.cache [--shards 4 --shard-mib 64 --rounds 5]``; JSON to ``bench/results/``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from bench import _common

REPO_ROOT = Path(__file__).resolve().parent.parent
BENCH_REPO = "sparkrun-bench/model"
MiB = 1024 * 1024


def _start_hub(shards: int, shard_mib: float, log: Path) -> tuple[subprocess.Popen[str], str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT / "testbed")}
    cmd = [sys.executable, "-m", "sparkrun_testbed.hfhub", "--port", "0", "--print-url"]
    cmd += ["--bench-shards", str(shards), "--bench-shard-mib", str(shard_mib), "--lfs-mib", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log.open("w"), text=True, env=env)
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    if not url.startswith("http"):
        raise RuntimeError(f"the local Hub did not start: {log.read_text()[-2000:]}")
    return proc, url


def _hub_bytes(url: str) -> int:
    stats = httpx.get(f"{url}/_admin/stats").json()
    return sum(int(s["bytes"]) for k, s in stats.items() if not k.startswith("api:"))


def _timed(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def bench_download(url: str, work: Path, rounds: int) -> tuple[dict[str, list[float]], int]:
    from huggingface_hub import constants, snapshot_download

    from sparkrun_operator.runtime.download import CHUNK_SIZE, Downloader, Source

    shipped = 10 * MiB  # huggingface_hub's DOWNLOAD_CHUNK_SIZE; the downloader sets CHUNK_SIZE

    def snapshot(chunk: int) -> Callable[[Path], Any]:
        def run(root: Path) -> Any:
            constants.DOWNLOAD_CHUNK_SIZE = chunk
            return snapshot_download(BENCH_REPO, endpoint=url, cache_dir=str(root / "hub"), token=False)

        return run

    source = Source(BENCH_REPO, "main", url)
    total = Downloader(work / "probe", source).resolve().total_bytes
    shutil.rmtree(work / "probe")

    def ours(verify: str) -> Callable[[Path], Any]:
        def run(root: Path) -> Any:
            constants.DOWNLOAD_CHUNK_SIZE = CHUNK_SIZE
            return Downloader(root, source, verify=verify).download()  # type: ignore[arg-type]

        return run

    variants: dict[str, Callable[[Path], Any]] = {
        "snapshot_download": snapshot(CHUNK_SIZE),
        "snapshot_download 10MiB chunks": snapshot(shipped),
        "downloader verify=size": ours("size"),
        "downloader verify=sha256": ours("sha256"),
    }
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            root = work / f"dl-{r}"
            shutil.rmtree(root, ignore_errors=True)
            times[name].append(_timed(lambda root=root, name=name: variants[name](root)))
            shutil.rmtree(root, ignore_errors=True)
    return times, total


def bench_verify(url: str, work: Path, rounds: int) -> tuple[dict[str, list[float]], int]:
    from sparkrun_operator.runtime.download import Downloader, Source

    root = work / "verify"
    downloader = Downloader(root, Source(BENCH_REPO, "main", url))
    downloader.download()
    blobs = sorted(p for p in downloader.layout.blobs.iterdir() if p.is_file())
    total = sum(p.stat().st_size for p in blobs)

    def plain() -> None:
        buf = bytearray(8 << 20)
        view = memoryview(buf)
        for path in blobs:
            digest = hashlib.sha256()
            with open(path, "rb", buffering=0) as f:
                while n := f.readinto(buf):
                    digest.update(view[:n])
            digest.hexdigest()

    one = Downloader(root, Source(BENCH_REPO, "main", url), workers=1)
    variants: dict[str, Callable[[], Any]] = {
        "hashlib.sha256 loop": plain,
        "inspect sha256 workers=1": lambda: one.inspect(level="sha256"),
        "inspect sha256 workers=8": lambda: downloader.inspect(level="sha256"),
    }
    plain()  # into the page cache
    names = list(variants)
    times: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        for name in names if r % 2 == 0 else reversed(names):
            times[name].append(_timed(variants[name]))
    return times, total


def bench_resume(url: str, work: Path, shard_bytes: int, total: int) -> dict[str, Any]:
    from sparkrun_operator.runtime.download import Downloader, Source
    from sparkrun_operator.runtime.hfcache import CacheLayout

    root = work / "resume"
    httpx.post(f"{url}/_admin/stats/reset")
    rate = max(8 * MiB, total // 8)  # ~8 s for the whole repo: a kill at 50% lands mid-file
    httpx.post(
        f"{url}/_admin/faults", json={"kind": "slow", "path": f"{BENCH_REPO}/*", "rate": rate, "times": None}
    )
    cmd = [sys.executable, "-m", "sparkrun_operator.runtime.download", "download", "--root", str(root)]
    cmd += ["--repo", BENCH_REPO, "--endpoint", url, "--quiet", "--workers", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while _hub_bytes(url) < total // 2 and proc.poll() is None:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    sent_before_kill = _hub_bytes(url)
    httpx.delete(f"{url}/_admin/faults")
    layout = CacheLayout(root, BENCH_REPO)
    done = [p for p in layout.blobs.iterdir() if not p.name.endswith(".incomplete")]
    partial = [p for p in layout.blobs.iterdir() if p.name.endswith(".incomplete")]
    on_disk = sum(p.stat().st_size for p in done + partial)
    unfinished_files = total - sum(p.stat().st_size for p in done)
    httpx.post(f"{url}/_admin/stats/reset")
    result = Downloader(root, Source(BENCH_REPO, "main", url)).download()
    refetched = _hub_bytes(url)
    return {
        "total_bytes": total,
        "hub_bytes_before_kill": sent_before_kill,
        "bytes_on_disk_at_kill": on_disk,
        "partial_files": len(partial),
        "bytes_missing_at_kill": total - on_disk,
        "bytes_refetched": refetched,
        "bytes_a_restart_of_unfinished_files_fetches": unfinished_files,
        "how": result.how,
    }


def _row(name: str, samples: list[float], nbytes: int, base: float | None) -> dict[str, Any]:
    med = _common.median(samples)
    mbps = nbytes / med / 1e6
    ratio = (base / med) if base else 1.0
    p99 = _common.pct(samples, 0.99)
    low = min(samples)
    print(
        f"{name:30s} {len(samples):>3d} {med * 1000:>9.1f} {p99 * 1000:>9.1f} {low * 1000:>9.1f}"
        f" {mbps:>9.1f} {ratio:>6.2f}x"
    )
    return {
        "n": len(samples),
        "median_s": med,
        "p99_s": p99,
        "min_s": low,
        "MBps": mbps,
        "ratio": ratio,
    }


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cache", description=__doc__)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=float, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    os.environ["HF_HUB_DISABLE_XET"] = "1"
    os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
    from huggingface_hub.utils.tqdm import disable_progress_bars

    disable_progress_bars()
    work = Path(tempfile.mkdtemp(prefix="bench-cache-"))
    hub, url = _start_hub(args.shards, args.shard_mib, work / "hub.log")
    summary: dict[str, Any] = {}
    try:
        header = f"{'':30s} {'n':>3s} {'p50 ms':>9s} {'p99 ms':>9s} {'min ms':>9s} {'MB/s':>9s} {'ratio':>7s}"
        times, total = bench_download(url, work, args.rounds)
        print(f"\ndownload of {total / MiB:.0f} MiB ({args.shards} shards); ratio: vs snapshot_download")
        print(header)
        base = _common.median(times["snapshot_download"])
        summary["download"] = {n: _row(n, s, total, base) for n, s in times.items()}
        vtimes, vtotal = bench_verify(url, work, args.rounds)
        print(f"\nverify of {vtotal / MiB:.0f} MiB in the page cache; ratio: vs a hashlib.sha256 loop")
        print(header)
        vbase = _common.median(vtimes["hashlib.sha256 loop"])
        summary["verify"] = {n: _row(n, s, vtotal, vbase) for n, s in vtimes.items()}
        summary["resume"] = resume = bench_resume(url, work, int(args.shard_mib * MiB), total)
        print("\nresume after SIGKILL at 50% of the bytes sent:")
        for key, value in resume.items():
            print(f"  {key:46s} {value}")
    finally:
        hub.terminate()
        hub.wait(15)
        if hub.stdout is not None:
            hub.stdout.close()
        shutil.rmtree(work, ignore_errors=True)
    inputs = {"shards": args.shards, "shard_mib": args.shard_mib, "rounds": args.rounds}
    env = _common.environment(("huggingface_hub", "httpx2", "hf_xet"))
    path = _common.write_json("cache", {"inputs": inputs, "environment": env, "results": summary})
    print(f"wrote {path}")
    print(
        json.dumps(
            {k: {n: round(v["ratio"], 3) for n, v in summary[k].items()} for k in ("download", "verify")}
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
