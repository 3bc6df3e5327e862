"""The compiled load generator of the gateway benchmark (``bench/loadgen``, Go), built on demand.

Built with the installed ``go`` into ``~/.cache/sparkrun-bench/loadgen-<hash>`` (outside the
repository, keyed by the hash of its sources, like the testbed binaries), so a fresh clone or CI
builds it itself and an edited source is rebuilt. :func:`run_round` runs one round and returns
the samples, the error count, the wall time and the generator's own CPU seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import shutil
import subprocess
import tempfile
from pathlib import Path

from ._common import Sample

SOURCE = Path(__file__).parent / "loadgen"
CACHE = Path(os.environ.get("SPARKRUN_BENCH_CACHE", Path.home() / ".cache" / "sparkrun-bench"))


def binary() -> Path:
    """The built load generator (built now when the cache lacks this version of the source)."""
    digest = hashlib.sha256()
    for name in ("go.mod", "main.go"):
        digest.update((SOURCE / name).read_bytes())
    target = CACHE / f"loadgen-{digest.hexdigest()[:16]}"
    if target.exists():
        return target
    go = shutil.which("go")
    if go is None:
        raise RuntimeError("the Go load generator needs `go` on PATH (or use --loadgen python)")
    CACHE.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    subprocess.run([go, "build", "-trimpath", "-o", str(partial), "."], cwd=SOURCE, check=True)
    partial.replace(target)
    return target


def run_round(
    exe: Path, port: int, concurrency: int, per_worker: int, body: bytes, key: str, stagger: float = 0.0
) -> tuple[list[Sample], int, float, float]:
    """``concurrency`` workers x ``per_worker`` streams: samples, errors, wall s, generator CPU s.
    ``stagger``: the workers' first requests spread evenly over that many seconds."""
    with tempfile.NamedTemporaryFile(suffix=".json") as file:
        file.write(body)
        file.flush()
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        done = subprocess.run(
            [
                str(exe),
                *("-addr", f"127.0.0.1:{port}", "-path", "/v1/chat/completions", "-body", file.name),
                *("-key", key, "-c", str(concurrency), "-n", str(per_worker)),
                *("-stagger", f"{stagger:.6f}s"),
            ],
            capture_output=True,
            check=True,
        )
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = json.loads(done.stdout)
    samples = [Sample(ttft, total, int(tokens)) for ttft, total, tokens in out["samples"]]
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return samples, int(out["errors"]), float(out["wall_s"]), cpu
