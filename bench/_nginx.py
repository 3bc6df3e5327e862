"""nginx as a plain streaming reverse proxy: the proxy-hop floor of the gateway benchmark.

The ``nginx`` target of :mod:`bench.gateway` is the cost of one well-engineered hop with no model
routing: Debian's nginx in front of the same upstream as every other target, with
``proxy_buffering off`` (each chunk is passed on as it arrives), HTTP/1.1 keep-alive connections
to the upstream (``upstream { keepalive N; }`` and an empty ``Connection`` header), as many
worker processes as the gateway has ``--workers``, no access log. It runs in the foreground
(``daemon off``, ``master_process on``) with its config, pid file, error log and temp paths in a
directory of its own, so it needs no root and leaves nothing behind.

:func:`locate` finds the executable, installing Debian's package with ``apt-get`` when it is
missing and apt is usable (as ``make bench-gateway`` installs LiteLLM); otherwise it fails with
what to install.
"""

from __future__ import annotations

import grp
import os
import pwd
import resource
import shutil
import subprocess
from pathlib import Path

from ._common import Proc

PACKAGE = "nginx"
SBIN = Path("/usr/sbin/nginx")
#: Idle keep-alive connections to the upstream each worker keeps (above the 256 streams measured,
#: so that no stream of a round opens a fresh upstream connection).
KEEPALIVE = 512
WORKER_CONNECTIONS = 8192
HEALTH = "/nginx-health"


def find() -> str | None:
    """The nginx executable on ``PATH`` or at Debian's ``/usr/sbin/nginx`` (often not on a user's
    ``PATH``), or ``None``."""
    found = shutil.which("nginx")
    if found:
        return found
    return str(SBIN) if os.access(SBIN, os.X_OK) else None


def locate() -> str:
    """The nginx executable; installs Debian's ``nginx`` package first when it is missing."""
    found = find()
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        raise SystemExit(
            "the nginx target needs nginx: install Debian's package (`sudo apt-get install -y nginx`) "
            "or put an nginx executable on PATH (or leave nginx out with --targets)"
        )
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", "--no-install-recommends", PACKAGE]
    print(f"nginx missing: {' '.join(install)}", flush=True)
    if subprocess.run(install, env=env, check=False).returncode != 0:
        # A fresh machine may have no package lists yet.
        subprocess.run([apt, "update", "-q"], env=env, check=True)
        subprocess.run(install, env=env, check=True)
    found = find()
    if found is None:
        raise SystemExit(f"`apt-get install {PACKAGE}` ran, yet no nginx executable was found")
    return found


def render(directory: Path, listen_port: int, upstream_port: int, workers: int) -> str:
    """The configuration: ``workers`` processes on ``127.0.0.1:listen_port``, streaming every
    request to ``127.0.0.1:upstream_port`` over kept-alive connections; every path nginx writes
    lies in ``directory``."""
    user = ""
    if os.geteuid() == 0:  # nginx would switch its workers to a compiled-in user and group
        nobody = pwd.getpwnam("nobody")
        user = f"user nobody {grp.getgrgid(nobody.pw_gid).gr_name};\n"
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    files = hard if hard != resource.RLIM_INFINITY else 4 * WORKER_CONNECTIONS
    temp = "\n".join(
        f"    {kind}_temp_path {directory / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    return f"""{user}worker_processes {workers};
worker_rlimit_nofile {min(files, 4 * WORKER_CONNECTIONS)};
daemon off;
master_process on;
pid {directory / "nginx.pid"};
error_log {directory / "error.log"} warn;

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
    """nginx in the foreground with the config of :func:`render` written to ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "nginx.conf"
    config.write_text(render(directory, listen_port, upstream_port, workers))
    # -p: the prefix for any relative path; -e: the error log before the config is read (nginx
    # >= 1.19.5), so that nothing is written to the compiled-in /var/log/nginx.
    return Proc(
        [executable, "-p", str(directory), "-e", str(directory / "error.log"), "-c", str(config)],
        directory / "stdout.log",
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
