"""nginx as a plain streaming reverse proxy: the proxy-hop floor of the gateway benchmark.

The ``nginx`` target of :mod:`bench.gateway` is the cost of one well-engineered hop with no model
routing: Debian's nginx in front of the same upstream as every other target, with
``proxy_buffering off`` (each chunk is passed on as it arrives), HTTP/1.1 keep-alive connections
to the upstream (``upstream { keepalive N; }`` and an empty ``Connection`` header), as many
worker processes as the gateway has ``--workers``, no access log. It runs in the foreground
(``daemon off``, ``master_process on``) with its config, pid file, error log and temp paths in a
directory of its own, so it needs no root and leaves nothing behind.

Every path in the config is double-quoted, and a directory nginx would misread (a quote,
backslash, ``$``, ``;``, a brace or a control character) is refused. Started as root, nginx runs
its workers as ``nobody`` when they can reach the directory (else as root); the temp paths the
workers write are theirs. nginx runs in a session of its own and :meth:`Proc.stop` signals the
whole process group, so no worker outlives it, even when its master died first.

:func:`locate` finds the executable, installing Debian's package with ``apt-get`` when it is
missing and apt is usable (as ``make bench-gateway`` installs LiteLLM) with the package's service
kept from starting; otherwise it says so in one line and the target is skipped, as LiteLLM is.
"""

from __future__ import annotations

import contextlib
import grp
import os
import pwd
import resource
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

from ._common import Proc

PACKAGE = "nginx"
SBIN = Path("/usr/sbin/nginx")
#: Idle keep-alive connections to the upstream each worker keeps (above the 256 streams measured,
#: so that no stream of a round opens a fresh upstream connection).
KEEPALIVE = 512
WORKER_CONNECTIONS = 8192
HEALTH = "/nginx-health"
#: Seconds an ``apt-get`` run may take before the install is given up on.
INSTALL_TIMEOUT = 600
#: Debian's invoke-rc.d asks this script whether a package's post-install may start its service.
POLICY_RC_D = Path("/usr/sbin/policy-rc.d")
TEMP_KINDS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
#: Characters nginx's config parser would read as syntax inside a double-quoted string.
_UNSAFE = frozenset('"\\$;{}')


def find() -> str | None:
    """The nginx executable on ``PATH`` or at Debian's ``/usr/sbin/nginx`` (often not on a user's
    ``PATH``), or ``None``."""
    found = shutil.which("nginx")
    if found:
        return found
    return str(SBIN) if os.access(SBIN, os.X_OK) else None


def locate() -> str | None:
    """The nginx executable; installs Debian's ``nginx`` package first when it is missing and
    this process can (root, ``apt-get``). ``None``, after one line saying why, when there is none:
    the benchmark then runs without the nginx target."""
    found = find()
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        _skip("not installed (`sudo apt-get install -y nginx`, or an nginx executable on PATH)")
        return None
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", "--no-install-recommends", PACKAGE]
    print(f"nginx missing: {' '.join(install)}", flush=True)
    try:
        with no_service_starts():
            if subprocess.run(install, env=env, check=False, timeout=INSTALL_TIMEOUT).returncode != 0:
                # A fresh machine may have no package lists yet.
                subprocess.run([apt, "update", "-q"], env=env, check=True, timeout=INSTALL_TIMEOUT)
                subprocess.run(install, env=env, check=True, timeout=INSTALL_TIMEOUT)
    except (OSError, subprocess.SubprocessError) as err:
        _skip(f"`apt-get install {PACKAGE}` failed ({err})")
        return None
    found = find()
    if found is None:
        _skip(f"`apt-get install {PACKAGE}` ran, yet no nginx executable was found")
    return found


def _skip(why: str) -> None:
    print(f"nginx: skipped, {why}", flush=True)


@contextlib.contextmanager
def no_service_starts() -> Iterator[None]:
    """While installing: Debian's post-install would start the system nginx (on port 80, as a
    service that outlives the benchmark); a ``policy-rc.d`` that answers 101 ("action forbidden")
    stops it. A policy the machine already has is left alone."""
    if POLICY_RC_D.exists():
        yield
        return
    POLICY_RC_D.write_text("#!/bin/sh\n# bench._nginx: no service starts during its install\nexit 101\n")
    try:
        POLICY_RC_D.chmod(0o755)
        yield
    finally:
        POLICY_RC_D.unlink(missing_ok=True)


def check_directory(directory: Path) -> None:
    """Refuse a directory that nginx would misread even double-quoted (``ValueError``)."""
    text = str(directory)
    bad = sorted({c for c in text if c in _UNSAFE or ord(c) < 32 or ord(c) == 127})
    if bad:
        raise ValueError(
            f"nginx directory {text!r} has characters its config cannot hold ({', '.join(map(repr, bad))})"
        )


def worker_user(directory: Path) -> tuple[int, int, str] | None:
    """Started as root, nginx switches its workers to a user: ``nobody`` (uid, gid, the
    ``user`` directive) when it exists and may traverse every directory above ``directory``,
    else root itself (a ``TemporaryDirectory`` under pytest's or a 0700 parent). ``None`` when
    not root: the workers stay this process's user."""
    if os.geteuid() != 0:
        return None
    try:
        nobody = pwd.getpwnam("nobody")
        group = grp.getgrgid(nobody.pw_gid).gr_name
    except KeyError:
        return 0, 0, "user root root;\n"
    for parent in directory.resolve().parents:
        info = parent.stat()
        if not info.st_mode & stat.S_IXOTH and info.st_uid != nobody.pw_uid:
            return 0, 0, "user root root;\n"
    return nobody.pw_uid, nobody.pw_gid, f'user nobody "{group}";\n'


def _q(path: Path) -> str:
    return f'"{path}"'


def render(directory: Path, listen_port: int, upstream_port: int, workers: int) -> str:
    """The configuration: ``workers`` processes on ``127.0.0.1:listen_port``, streaming every
    request to ``127.0.0.1:upstream_port`` over kept-alive connections; every path nginx writes
    lies in ``directory``, double-quoted (``ValueError`` for a directory it would misread)."""
    check_directory(directory)
    worker = worker_user(directory)
    user = worker[2] if worker else ""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = hard if hard != resource.RLIM_INFINITY else 4 * WORKER_CONNECTIONS
    temp = "\n".join(f"    {kind}_temp_path {_q(directory / kind)};" for kind in TEMP_KINDS)
    return f"""{user}worker_processes {workers};
worker_rlimit_nofile {min(files, 4 * WORKER_CONNECTIONS)};
daemon off;
master_process on;
pid {_q(directory / "nginx.pid")};
error_log {_q(directory / "error.log")} warn;

events {{
    worker_connections {WORKER_CONNECTIONS};
}}

http {{
    access_log off;
{temp}
    upstream engine {{
        server 127.0.0.1:{upstream_port};
        keepalive {KEEPALIVE};
    }}
    server {{
        listen 127.0.0.1:{listen_port} backlog=4096;
        location = {HEALTH} {{
            return 200 "ok\\n";
        }}
        location / {{
            proxy_pass http://engine;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_buffering off;
            proxy_read_timeout 300s;
        }}
    }}
}}
"""


def start(executable: str, directory: Path, listen_port: int, upstream_port: int, workers: int) -> Proc:
    """nginx in the foreground with the config of :func:`render` written to ``directory``, in a
    session of its own (stopping it signals its workers too)."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "nginx.conf"
    config.write_text(render(directory, listen_port, upstream_port, workers))
    worker = worker_user(directory)
    if worker is not None:
        # The workers (another user) must reach their temp paths: the directory is traversable,
        # and each temp path is theirs.
        directory.chmod(0o711)
        for kind in TEMP_KINDS:
            (directory / kind).mkdir(mode=0o700, exist_ok=True)
            os.chown(directory / kind, worker[0], worker[1])
    # -p: the prefix for any relative path; -e: the error log before the config is read (nginx
    # >= 1.19.5), so that nothing is written to the compiled-in /var/log/nginx.
    return Proc(
        [executable, "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(config)],
        directory / "stdout.log",
        group=True,
    )


def health_url(port: int) -> str:
    return f"http://127.0.0.1:{port}{HEALTH}"


def pin_tree(pid: int, cpus: set[int]) -> list[int]:
    """Move ``pid`` and its child processes (nginx's master and workers) onto ``cpus``; returns
    the pids moved. A worker forked later inherits the master's CPUs."""
    pids = [pid, *children(pid)]
    for each in pids:
        os.sched_setaffinity(each, cpus)
    return pids


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (``/proc/PID/task/*/children``)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        try:
            found += [int(c) for c in task.read_text().split()]
        except (OSError, ValueError):
            continue
    return found


def version(executable: str) -> str:
    """``nginx -v``'s answer (it writes it to standard error), e.g. ``nginx/1.22.1``."""
    done = subprocess.run([executable, "-v"], capture_output=True, text=True, check=False)
    return (done.stderr or done.stdout).strip().removeprefix("nginx version: ")
