"""sparkrun's own CLI (PyPI ``sparkrun==0.4.2``) against the shim under an external hostname.

This is the path of docs/daemon-api.md, "From outside the cluster": the chart renders the shim's
certificate with ``shim.external.hostnames: [shim.example.test]``, the shim serves exactly that
certificate, and the real client (a venv of its own, ``make refclient`` / ``hack/refclient.sh``)
connects to ``https://shim.example.test:<port>`` with ``--ca-cert`` (the chart's CA, hostname
verification on) and ``--token-file`` (a ServiceAccount token, never on the command line).

The name resolves to the shim's loopback address through a hosts file bind-mounted over
/etc/hosts in a private mount namespace of the client process only (``unshare --mount``; we are
root), so the machine's /etc/hosts is never touched and the client resolves as it would on a
laptop (glibc, ``hosts: files dns``). A name the certificate does not carry, resolving to the
same address, is refused by the client's TLS verification.

What the client does, as a user would: ``status``; a query (``workloads.list``); a job followed
to its end (``call --wait``), then its events and its record; the same idempotency key again
(the same job, none new); a typed refusal (a read-only token asking for a mutation).
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
import yaml

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.deploy.chart import REPO, helm, require_helm
from tests.shim.harness import DaemonEnv, ShimRunner

pytestmark = pytest.mark.testbed
HOST = "shim.example.test"
#: Resolves to the shim too, but is not in the certificate.
STRANGER = "elsewhere.example.test"
RECIPE = "qwen3-8b-vllm"  # examples/recipe.yaml
API = "sparkrun.dev/v1alpha1"
IN_CI = os.environ.get("CI", "").lower() == "true"


def _missing(reason: str) -> NoReturn:
    if IN_CI:
        pytest.fail(f"prerequisite missing under CI=true: {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def sparkrun_cli() -> str:
    """The reference client's console script (hack/refclient.sh installs it once, ~10 s)."""
    script = REPO / "hack" / "refclient.sh"
    printed = subprocess.run([script, "--print"], capture_output=True, text=True, check=True, timeout=30)
    path = printed.stdout.strip()
    if not os.access(path, os.X_OK):
        built = subprocess.run([script], capture_output=True, text=True, check=False, timeout=900)
        if built.returncode != 0:
            _missing(f"hack/refclient.sh could not install sparkrun 0.4.2:\n{built.stderr[-2000:]}")
        path = built.stdout.strip().splitlines()[-1]
    if shutil.which("unshare") is None or os.geteuid() != 0:
        _missing("the hostname test needs `unshare --mount` as root (a private /etc/hosts for the client)")
    return path


@dataclass
class External:
    """A shim serving the chart's certificate for :data:`HOST`, and how to call it."""

    env: DaemonEnv
    runner: ShimRunner
    kube: KubeApi
    workdir: Path
    ca: Path
    hosts: Path

    def origin(self, host: str = HOST) -> str:
        return f"https://{host}:{self.runner.port}"

    def token_file(self, who: str) -> Path:
        path = self.workdir / f"{who}.token"
        if not path.exists():
            path.touch(mode=0o600)
            path.write_text(self.env.tokens[who])
        return path


def _chart_tls(workdir: Path) -> tuple[Path, Path, Path]:
    """The shim Secret the chart renders with ``shim.external.hostnames: [HOST]``."""
    out = helm(
        require_helm(),
        "template",
        "sparkrun",
        str(REPO / "helm" / "sparkrun-operator"),
        "-n",
        "sparkrun-system",
        "--set",
        f"shim.external.hostnames={{{HOST}}}",
        "--show-only",
        "templates/shim/apiservice.yaml",
    ).stdout
    secret = next(d for d in yaml.safe_load_all(out) if d and d["kind"] == "Secret")
    paths = []
    for key in ("ca.crt", "tls.crt", "tls.key"):
        path = workdir / f"chart-{key}"
        path.write_bytes(base64.b64decode(secret["data"][key]))
        paths.append(path)
    return paths[0], paths[1], paths[2]


def _create_recipe(kube: KubeApi, namespace: str) -> None:
    recipe = yaml.safe_load((REPO / "examples" / "recipe.yaml").read_text())
    recipe["metadata"]["namespace"] = namespace
    deadline = time.monotonic() + 30
    while True:  # NB: discovery can lag behind the CRD becoming Established
        try:
            kube.create(recipe)
            return
        except KeyError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def _start(runner: ShimRunner, ca: Path, timeout: float = 60) -> None:
    """Start the operator and the shim; wait until the shim answers over TLS (its certificate
    is checked against the chart's CA; the name is checked by the tests, under :data:`HOST`)."""
    runner.operator.start()
    runner.shim.start()
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False
    deadline = time.monotonic() + timeout
    while True:
        if not runner.shim.alive():
            raise RuntimeError(f"the shim exited:\n{runner.shim.tail()}")
        try:
            if httpx.get(runner.url + "/v1/health", verify=context, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"the shim did not answer within {timeout} s:\n{runner.shim.tail()}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def external(
    request: pytest.FixtureRequest,
    testbed: Testbed,
    crds: list[str],
    kube: KubeApi,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[External]:
    workdir = tmp_path_factory.mktemp("external")
    ca, cert, key = _chart_tls(workdir)
    hosts = workdir / "hosts"
    hosts.write_text(f"127.0.0.1 localhost\n127.0.0.1 {HOST}\n127.0.0.1 {STRANGER}\n")
    env = DaemonEnv(kube, "ext-" + secrets.token_hex(4)).setup()
    runner = ShimRunner(testbed, env.namespace, workdir)
    # NB: the runner wrote a testbed certificate for 127.0.0.1 there; the shim serves the chart's.
    shutil.copyfile(cert, workdir / "shim.crt")
    shutil.copyfile(key, workdir / "shim.key")
    failed_before = request.session.testsfailed
    try:
        _create_recipe(kube, env.namespace)
        _start(runner, ca)
        yield External(env=env, runner=runner, kube=kube, workdir=workdir, ca=ca, hosts=hosts)
    finally:
        if request.session.testsfailed > failed_before:
            print(runner.logs())
        runner.stop()
        env.teardown()


def sparkrun(
    cli: str, ext: External, who: str, *args: str, host: str = HOST, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``sparkrun daemon --url https://<host>:<port> --token-file ... --ca-cert ... <args>``, with
    ``<host>`` resolved by the client's own private /etc/hosts."""
    env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower() and k != "SPARKRUN_DAEMON_TOKEN"}
    env.update(HOME=str(ext.workdir), NO_COLOR="1", COLUMNS="200", PYTHONWARNINGS="ignore")
    argv = [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "--",
        "sh",
        "-c",
        'mount --bind "$0" /etc/hosts && exec "$@"',
        str(ext.hosts),
        cli,
        "daemon",
        "--url",
        ext.origin(host),
        "--token-file",
        str(ext.token_file(who)),
        "--ca-cert",
        str(ext.ca),
        *args,
    ]
    return subprocess.run(argv, capture_output=True, text=True, check=False, timeout=timeout, env=env)


def _ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, (
        f"exit {done.returncode}\n--- stdout\n{done.stdout}\n--- stderr\n{done.stderr}"
    )
    return done.stdout


def _json(text: str) -> Any:
    return json.loads(text)


def test_tls_verifies_under_the_external_name_only(external: External, sparkrun_cli: str) -> None:
    context = ssl.create_default_context(cafile=str(external.ca))
    port = external.runner.port
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname=HOST) as tls,
    ):
        assert tls.version() in {"TLSv1.2", "TLSv1.3"}
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        context.wrap_socket(raw, server_hostname=STRANGER)
    refused = sparkrun(sparkrun_cli, external, "reader", "status", host=STRANGER, timeout=60)
    assert refused.returncode == 1
    assert "certificate is not valid for 'elsewhere.example.test'" in refused.stderr, refused.stderr


def test_status_names_the_caller(external: External, sparkrun_cli: str) -> None:
    status = _json(_ok(sparkrun(sparkrun_cli, external, "reader", "status")))
    assert status["running"] is True
    assert status["protocol"] == 1
    assert status["manager"] == "daemon"
    assert status["runtime"]["principal"] == f"system:serviceaccount:{external.env.namespace}:reader"
    assert status["runtime"]["identity"] == "bearer"
    assert status["runtime"]["kubernetes"]["namespace"] == external.env.namespace


def test_queries(external: External, sparkrun_cli: str) -> None:
    found = _json(_ok(sparkrun(sparkrun_cli, external, "reader", "call", "catalog.recipes", "--wait")))
    assert RECIPE in [recipe["name"] for recipe in found["recipes"]], found
    listed = _json(_ok(sparkrun(sparkrun_cli, external, "reader", "call", "workloads.list", "--wait")))
    assert listed == [], "dry runs only: no workload in the namespace"


def _daemon_jobs(ext: External) -> list[dict[str, Any]]:
    return ext.kube.list_items(API, "DaemonJob", namespace=ext.env.namespace)


def test_a_job_followed_to_its_end_its_events_and_its_idempotency_key(
    external: External, sparkrun_cli: str
) -> None:
    data = json.dumps({"recipe": RECIPE, "dry_run": True})
    key = "laptop-dry-run-" + secrets.token_hex(4)
    before = len(_daemon_jobs(external))
    call = ["call", "workloads.run", "--data", data, "--idempotency-key", key]
    result = _json(_ok(sparkrun(sparkrun_cli, external, "operator", *call, "--wait")))
    assert result["dry_run"] is True
    assert (result["metadata"]["name"], result["metadata"]["namespace"]) == (RECIPE, external.env.namespace)
    assert result["runtime"] == "vllm"

    submitted = _json(_ok(sparkrun(sparkrun_cli, external, "operator", *call)))
    job_id = submitted["job_id"]
    assert submitted["events_url"] == f"/v1/jobs/{job_id}/events"
    assert len(_daemon_jobs(external)) == before + 1, "the same key again: the same job, none new"

    replay = _ok(sparkrun(sparkrun_cli, external, "operator", "jobs", "events", job_id))
    events = [json.loads(line) for line in replay.splitlines() if line.strip()]
    states = [event["state"] for event in events if event["type"] == "state"]
    assert states == ["queued", "starting", "running", "succeeded"]
    assert {"type": "result", "available": True}.items() <= next(
        e for e in events if e["type"] == "result"
    ).items()
    assert [event["id"] for event in events] == list(range(1, len(events) + 1))

    job = _json(_ok(sparkrun(sparkrun_cli, external, "operator", "jobs", "show", job_id)))
    assert (job["id"], job["operation"], job["state"]) == (job_id, "workloads.run", "succeeded")
    assert job["principal"] == f"system:serviceaccount:{external.env.namespace}:operator"
    assert job["result"]["workload_id"] == result["workload_id"]

    other = json.dumps({"recipe": RECIPE, "dry_run": False})
    reused = sparkrun(sparkrun_cli, external, "operator", *call[:2], "--data", other, *call[4:])
    assert reused.returncode == 1, reused.stdout
    assert reused.stderr.strip() == "Error: Idempotency key was already used for different arguments"
    assert len(_daemon_jobs(external)) == before + 1


def test_typed_refusals(external: External, sparkrun_cli: str) -> None:
    data = json.dumps({"recipe": RECIPE, "dry_run": True})
    before = len(_daemon_jobs(external))
    denied = sparkrun(sparkrun_cli, external, "reader", "call", "workloads.run", "--data", data)
    assert denied.returncode == 1
    assert denied.stderr.strip() == "Error: Insufficient permission"
    assert len(_daemon_jobs(external)) == before, "a refused call creates no job"

    disabled = sparkrun(sparkrun_cli, external, "admin", "call", "tailscale.join")
    assert disabled.returncode == 1
    assert "Operation tailscale.join is disabled on Kubernetes" in disabled.stderr

    missing = json.dumps({"recipe": "no-such-recipe"})
    unknown = sparkrun(
        sparkrun_cli, external, "operator", "call", "workloads.run", "--data", missing, "--wait"
    )
    assert unknown.returncode == 1
    assert "Unknown recipe: no-such-recipe" in unknown.stderr
