"""A daemon API shim and its DaemonJob executor on a testbed, for tests and benchmarks.

- :class:`DaemonEnv` prepares a namespace: the daemon ClusterRoles
  (``manifests/daemon-roles.yaml``), ServiceAccounts bound to them and a token for each
  (TokenRequest): ``admin`` (admin + answer-secret), ``operator`` (operate), ``reader`` and
  ``reader2`` (read), ``automation`` (operate, manager ``automation``), ``nobody`` (no role),
  ``secret-only`` (answer-secret and nothing else).
- :class:`ShimRunner` runs the real commands as child processes: ``sparkrun-k8s shim serve`` on
  ``https://127.0.0.1:<port>`` (serving certificate from the testbed CA) and, unless disabled,
  ``sparkrun-k8s operator run --standalone -n <namespace>`` (every controller, including the
  DaemonJob executor). Both use the testbed's admin kubeconfig, as a deployment would use its
  own ServiceAccount.

Tests talk to it over real HTTP (``httpx``) or with the reference daemon client
(:func:`reference_client`, which runs ``sparkrun.daemon.client.Client`` in the reference
interpreter).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import httpx
import yaml

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "manifests" / "daemon-roles.yaml"
PRINCIPALS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "admin": (("sparkrun-daemon-admin", "sparkrun-daemon-answer-secret"), {}),
    "operator": (("sparkrun-daemon-operate",), {}),
    "reader": (("sparkrun-daemon-read",), {}),
    "reader2": (("sparkrun-daemon-read",), {}),
    "automation": (("sparkrun-daemon-operate",), {"sparkrun.dev/manager": "automation"}),
    "nobody": ((), {}),
    "secret-only": (("sparkrun-daemon-answer-secret",), {}),
}


@dataclass
class DaemonEnv:
    """A namespace prepared for the daemon API (see the module docstring)."""

    kube: KubeApi
    namespace: str
    tokens: dict[str, str] = field(default_factory=dict)

    def setup(self) -> DaemonEnv:
        # NB: right after the CRDs were installed the apiserver may still answer 429 (storage
        # (re)initializing) for a moment.
        deadline = time.monotonic() + 30
        while True:
            try:
                self.kube.create(
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
                )
                break
            except ApiError as error:
                if error.status != 429 or time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        for doc in yaml.safe_load_all(ROLES.read_text()):
            if doc:
                self.kube.apply(doc)
        for name, (roles, notes) in PRINCIPALS.items():
            self.kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "ServiceAccount",
                    "metadata": {"name": name, "namespace": self.namespace, "annotations": notes},
                }
            )
            for role in roles:
                self.kube.create(
                    {
                        "apiVersion": "rbac.authorization.k8s.io/v1",
                        "kind": "RoleBinding",
                        "metadata": {"name": f"{name}-{role}", "namespace": self.namespace},
                        "roleRef": {
                            "apiGroup": "rbac.authorization.k8s.io",
                            "kind": "ClusterRole",
                            "name": role,
                        },
                        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": self.namespace}],
                    }
                )
            self.tokens[name] = service_account_token(self.kube, self.namespace, name)
        return self

    def username(self, name: str) -> str:
        return f"system:serviceaccount:{self.namespace}:{name}"

    def teardown(self) -> None:
        retry(lambda: self.kube.delete("v1", "Namespace", self.namespace))
        # InferenceClusters are cluster-scoped: remove those this environment's tests created.
        for cluster in retry(lambda: self.kube.list_items("sparkrun.dev/v1alpha1", "InferenceCluster")):
            name = cluster["metadata"]["name"]
            if name.startswith(("nowhere-", "hosts-", "idem-")):
                retry(lambda name=name: self.kube.delete("sparkrun.dev/v1alpha1", "InferenceCluster", name))


def service_account_token(kube: KubeApi, namespace: str, account: str) -> str:
    """A two-hour token of ``namespace/account`` (TokenRequest)."""
    answer = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        json={
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 7200},
        },
    ).json()
    return str(answer["status"]["token"])


def retry(call: Callable[[], T], *, seconds: float = 30.0) -> T:
    """``call()``, retried while the apiserver answers 429 (e.g. storage still initializing)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return call()
        except ApiError as error:
            if error.status != 429 or time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class _Process:
    """A child process with its output in a log file."""

    def __init__(self, args: list[str], log: Path, env: dict[str, str]) -> None:
        self.args, self.log, self.env = args, log, env
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self.log.open("ab") as handle:
            self.proc = subprocess.Popen(
                self.args, env=self.env, stdout=handle, stderr=subprocess.STDOUT, start_new_session=True
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, *, kill: bool = False, timeout: float = 15.0) -> None:
        if not self.alive():
            return
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def tail(self, lines: int = 60) -> str:
        if not self.log.exists():
            return ""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


class ShimRunner:
    """``sparkrun-k8s shim serve`` and ``sparkrun-k8s operator run`` as child processes."""

    def __init__(
        self,
        testbed: Testbed,
        namespace: str,
        workdir: Path,
        *,
        executor: bool = True,
        plaintext: bool = False,
        extra_shim_args: tuple[str, ...] = (),
        extra_operator_args: tuple[str, ...] = (),
        kubeconfigs: Mapping[str, Path] | None = None,
    ) -> None:
        """``kubeconfigs``: the credentials of ``shim`` and ``operator`` (default: the admin's)."""
        self.testbed = testbed
        self.namespace = namespace
        self.workdir = workdir
        self.with_executor = executor
        self.plaintext = plaintext
        self.port = free_port()
        self.url = f"{'http' if plaintext else 'https'}://127.0.0.1:{self.port}"
        self.ca_file = str(testbed.run_dir / "pki" / "ca.crt")
        shim_config = str((kubeconfigs or {}).get("shim", testbed.kubeconfig))
        operator_config = str((kubeconfigs or {}).get("operator", testbed.kubeconfig))
        env = {
            **os.environ,
            "KUBECONFIG": str(testbed.kubeconfig),
            "PYTHONUNBUFFERED": "1",
            # Executor Leases expire quickly, so "lost" is observable within seconds.
            "SPARKRUN_EXECUTOR_LEASE_SECONDS": "6",
        }
        cli = [sys.executable, "-m", "sparkrun_operator.cli.main"]
        shim_args = [
            *cli,
            "shim",
            "serve",
            "--namespace",
            namespace,
            "--kubeconfig",
            shim_config,
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *extra_shim_args,
        ]
        if plaintext:
            shim_args.append("--insecure-plaintext")
        else:
            pair = testbed.issue_serving_cert("127.0.0.1", "localhost")
            cert, key = workdir / "shim.crt", workdir / "shim.key"
            pair.write(cert, key)
            shim_args += ["--tls-cert", str(cert), "--tls-key", str(key)]
        self.shim = _Process(shim_args, workdir / "shim.log", {**env, "KUBECONFIG": shim_config})
        self.operator = _Process(
            [
                *cli,
                "operator",
                "run",
                "--standalone",
                "-n",
                namespace,
                "--kubeconfig",
                operator_config,
                # NB: never the InferencePools an earlier test's CRD would make it manage
                "--inference-pools",
                "off",
                *extra_operator_args,
            ],
            workdir / "operator.log",
            {**env, "KUBECONFIG": operator_config},
        )

    def start(self, timeout: float = 60.0) -> ShimRunner:
        if self.with_executor:
            self.operator.start()
        self.shim.start()
        deadline = time.monotonic() + timeout
        verify: Any = False if self.plaintext else ssl.create_default_context(cafile=self.ca_file)
        while True:
            if not self.shim.alive():
                raise RuntimeError(f"the shim exited:\n{self.shim.tail()}")
            try:
                if httpx.get(self.url + "/v1/health", verify=verify, timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"the shim did not answer within {timeout} s:\n{self.shim.tail()}")
            time.sleep(0.1)

    def restart_operator(self, *, kill: bool = True) -> None:
        """Stop the operator (SIGKILL by default, as a crash) and start a new one."""
        self.operator.stop(kill=kill)
        self.operator.start()

    def stop(self) -> None:
        self.shim.stop()
        self.operator.stop()

    def logs(self) -> str:
        return f"--- shim.log\n{self.shim.tail()}\n--- operator.log\n{self.operator.tail()}"


@contextmanager
def running(testbed: Testbed, env: DaemonEnv, workdir: Path, **kwargs: Any) -> Iterator[ShimRunner]:
    runner = ShimRunner(testbed, env.namespace, workdir, **kwargs).start()
    try:
        yield runner
    finally:
        runner.stop()


_CLIENT_SCRIPT = r"""
import json, sys
from sparkrun.daemon.client import Client, DaemonError
spec = json.load(sys.stdin)
client = Client(
    url=spec["url"], token=spec["token"], ca_cert=spec.get("ca_cert"), timeout=spec.get("timeout", 30)
)
out = []
for step in spec["steps"]:
    try:
        if step["call"] == "info":
            value = client.info()
        elif step["call"] == "request":
            value = client.request(
                step["method"], step["path"], step.get("body"), headers=step.get("headers")
            )
        elif step["call"] == "wait":
            value = client.wait(step["id"], timeout=step.get("timeout", 60))
        elif step["call"] == "events":
            value = list(client.events(step["id"], after=step.get("after", 0)))
        elif step["call"] == "example":
            # The document's cluster-create example, verbatim apart from where the token comes from.
            info = client.info()
            operations = client.request("GET", "/v1/ops")
            create = next(op for op in operations if op["name"] == "cluster.create")
            submission = client.request(
                "POST",
                create["http_path"],
                step["body"],
                headers={"Idempotency-Key": step["key"]},
            )
            job = client.request("GET", f"/v1/jobs/{submission['job_id']}")
            value = {"info": info, "submission": submission, "job": job}
        else:
            raise ValueError(step["call"])
        out.append({"ok": True, "value": value})
    except DaemonError as error:
        out.append({"ok": False, "status": error.status, "body": error.body})
json.dump(out, sys.stdout)
"""


def reference_client(
    python: str,
    url: str,
    token: str,
    steps: list[dict[str, Any]],
    *,
    ca_cert: str | None = None,
    timeout: float = 120,
) -> list[dict[str, Any]]:
    """Run ``steps`` with the reference daemon client; one result per step."""
    spec = {"url": url, "token": token, "ca_cert": ca_cert, "steps": steps}
    done = subprocess.run(
        [python, "-c", _CLIENT_SCRIPT],
        input=json.dumps(spec),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(f"reference client failed ({done.returncode}):\n{done.stderr[-4000:]}")
    results: list[dict[str, Any]] = json.loads(done.stdout)
    return results


def with_digest(spec: dict[str, Any]) -> dict[str, Any]:
    """A DaemonJob ``spec`` written directly (not through the shim) with the ``requestDigest`` the
    shim would give it: the CRD requires one, and the executor runs only arguments it matches."""
    from sparkrun_operator.ops import jobs

    digest = jobs.request_digest(
        spec["operation"],
        int(spec.get("operationVersion", 1)),
        spec.get("arguments") or {},
        spec.get("manager", "daemon"),
    )
    return {**spec, "requestDigest": digest}


def seeded_job_name(i: int) -> str:
    """The name of the ``i``-th job :func:`seeded_job` makes (a keyed job's id)."""
    from sparkrun_operator.ops import jobs

    return jobs.job_name("memory", f"job-{i}")


def seeded_job(namespace: str, i: int) -> dict[str, Any]:
    """A queued keyed DaemonJob (a ``workloads.run`` dry run of the operator principal) to create
    directly, for the bounded-cache test and ``bench.shim_memory``."""
    from sparkrun_operator.ops import jobs

    arguments = {"recipe": "example", "dry_run": True}
    return jobs.new_job(
        name=seeded_job_name(i),
        namespace=namespace,
        operation="workloads.run",
        version=1,
        arguments=arguments,
        username=f"system:serviceaccount:{namespace}:operator",
        uid=None,
        groups=[],
        manager="daemon",
        client=None,
        key=f"job-{i}",
        digest=jobs.request_digest("workloads.run", 1, arguments, "daemon"),
    )
