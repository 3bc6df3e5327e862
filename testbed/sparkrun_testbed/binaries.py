"""Where the testbed's binaries and upstream manifests are, and how to build them.

``hack/testbed-bin.sh`` builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
jobset, kwok and helm from pinned Go modules into ``<cache>/<key>/bin`` and copies the JobSet
CRD, the JobSet webhook manifests and KWOK's default stages into ``<cache>/<key>/share``. The
bin dir comes from env ``SPARKRUN_TESTBED_BIN`` when set, else from
``hack/testbed-bin.sh --print`` (which needs ``go`` on PATH to compute the key).
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

BIN_ENV = "SPARKRUN_TESTBED_BIN"
REQUIRED = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "jobset", "kwok")
_BUILD_SCRIPT = Path("hack") / "testbed-bin.sh"


class BinariesMissing(RuntimeError):
    """The testbed binaries are not built (or the bin dir cannot be determined)."""


@dataclass(frozen=True)
class Binaries:
    """A bin dir produced by ``hack/testbed-bin.sh`` and its sibling ``share`` dir."""

    bin_dir: Path

    def path(self, name: str) -> Path:
        return self.bin_dir / name

    @property
    def share_dir(self) -> Path:
        return self.bin_dir.parent / "share"

    @property
    def jobset_crd(self) -> Path:
        return self.share_dir / "jobset" / "jobset.x-k8s.io_jobsets.yaml"

    @property
    def jobset_webhooks(self) -> Path:
        return self.share_dir / "jobset" / "webhook-manifests.yaml"

    @property
    def kwok_stages(self) -> list[Path]:
        return sorted((self.share_dir / "kwok-stages").glob("*.yaml"))

    def missing(self) -> list[str]:
        """Names of required files that are absent (empty when the testbed can start)."""
        absent = [name for name in REQUIRED if not os.access(self.path(name), os.X_OK)]
        absent += [str(p) for p in (self.jobset_crd, self.jobset_webhooks) if not p.is_file()]
        if not self.kwok_stages:
            absent.append(str(self.share_dir / "kwok-stages/*.yaml"))
        return absent

    def check(self) -> Binaries:
        """Return self, or raise :class:`BinariesMissing` naming what is absent."""
        absent = self.missing()
        if absent:
            raise BinariesMissing(
                f"testbed binaries incomplete in {self.bin_dir}: missing {', '.join(absent)}; "
                "build them with `make testbed-bin` (hack/testbed-bin.sh)"
            )
        return self


def repo_root(start: Path | None = None) -> Path | None:
    """The project checkout containing ``start`` (default: cwd), else the one this package lives in."""
    candidates = [start or Path.cwd(), Path(__file__).resolve()]
    for candidate in candidates:
        for parent in (candidate, *candidate.parents):
            if (parent / _BUILD_SCRIPT).is_file() and (parent / "pyproject.toml").is_file():
                return parent
    return None


def locate(repo: Path | None = None) -> Binaries:
    """The configured bin dir (it may not be built yet: see :meth:`Binaries.missing`).

    Raises :class:`BinariesMissing` if neither ``SPARKRUN_TESTBED_BIN`` is set nor a checkout
    with ``hack/testbed-bin.sh`` is found, or if the script cannot compute the key.
    """
    if env := os.environ.get(BIN_ENV):
        return Binaries(Path(env).resolve())
    root = repo or repo_root()
    if root is None:
        raise BinariesMissing(f"set {BIN_ENV} or run inside the sparkrun-operator checkout")
    try:
        out = subprocess.run(
            [str(root / _BUILD_SCRIPT), "--print"], capture_output=True, text=True, check=True, timeout=60
        )
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        stderr = getattr(e, "stderr", "") or ""
        raise BinariesMissing(
            f"`{_BUILD_SCRIPT} --print` failed (is go on PATH?): {e} {stderr}".strip()
        ) from e
    return Binaries(Path(out.stdout.strip().splitlines()[-1]))


def build(repo: Path | None = None) -> Binaries:
    """Run ``hack/testbed-bin.sh`` (a cold build takes tens of minutes); its log goes to stderr."""
    root = repo or repo_root()
    if root is None:
        raise BinariesMissing("cannot build: no sparkrun-operator checkout found")
    out = subprocess.run([str(root / _BUILD_SCRIPT)], stdout=subprocess.PIPE, text=True, check=True)
    return Binaries(Path(out.stdout.strip().splitlines()[-1])).check()


@dataclass(frozen=True)
class GoTool:
    """One Go binary built by a script of its own (``hack/<name>-bin.sh``: the llm-d simulator,
    the endpoint picker) into ``<cache>/<name>-<key>/bin/<binary>``: the script prints that bin
    dir last, and with ``--print`` only that (no build). Env ``env`` (a path to the executable)
    overrides the script."""

    binary: str
    env: str
    script: Path

    def _script(self, repo: Path | None) -> Path:
        root = repo or repo_root()
        if root is None:
            raise BinariesMissing(f"set {self.env} or run inside the sparkrun-operator checkout")
        return root / self.script

    def locate(self, repo: Path | None = None) -> Path:
        """The configured binary's path (it may not be built yet: check ``os.access(path, X_OK)``)."""
        if env := os.environ.get(self.env):
            return Path(env).resolve()
        script = self._script(repo)
        try:
            out = subprocess.run(
                [str(script), "--print"], capture_output=True, text=True, check=True, timeout=60
            )
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
            raise BinariesMissing(f"`{self.script} --print` failed (is go on PATH?): {e}") from e
        return Path(out.stdout.strip().splitlines()[-1]) / self.binary

    def build(self, repo: Path | None = None) -> Path:
        """Run the script (a cold build takes minutes); its log goes to stderr."""
        out = subprocess.run([str(self._script(repo))], stdout=subprocess.PIPE, text=True, check=True)
        path = Path(out.stdout.strip().splitlines()[-1]) / self.binary
        if not os.access(path, os.X_OK):
            raise BinariesMissing(f"{self.script} finished but {path} is not executable")
        return path
