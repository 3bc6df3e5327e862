"""A daemon API shim and its DaemonJob executor on a testbed, for tests and benchmarks.

- :class:`DaemonEnv` prepares a namespace: the daemon ClusterRoles
  (``manifests/rbac/daemon-roles.yaml``), ServiceAccounts bound to them and a token for each
  (TokenRequest): ``admin`` (admin + answer-secret), ``operator`` (operate), ``reader`` and
  ``reader2`` (read), ``automation`` (operate, manager ``automation``), ``nobody`` (no role).
- :class:`ShimRunner` runs, in a background thread with its own event loop, the shim on
  ``https://127.0.0.1:<port>`` (serving certificate from the testbed CA) and, unless disabled,
  the DaemonJob controller under kopf (standalone, this namespace only). Both use the testbed's
  admin kubeconfig, like an operator deployed with its own ServiceAccount would.

Tests talk to it over real HTTP (``httpx``) or with the reference daemon client
(:func:`reference_client`, which runs ``sparkrun.daemon.client.Client`` in the reference
interpreter).
"""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kopf
import yaml

from sparkrun_operator.controllers import daemonjob
from sparkrun_operator.k8s.rest import Rest, connect
from sparkrun_operator.ops.context import Settings
from sparkrun_operator.shim import server
from sparkrun_operator.testbed.kubeapi import KubeApi
from sparkrun_operator.testbed.plane import Testbed

REPO = Path(__file__).resolve().parents[2]
ROLES = REPO / "manifests" / "rbac" / "daemon-roles.yaml"
PRINCIPALS: dict[str, tuple[tuple[str, ...], dict[str, str]]] = {
    "admin": (("sparkrun-daemon-admin", "sparkrun-daemon-answer-secret"), {}),
    "operator": (("sparkrun-daemon-operate",), {}),
    "reader": (("sparkrun-daemon-read",), {}),
    "reader2": (("sparkrun-daemon-read",), {}),
    "automation": (("sparkrun-daemon-operate",), {"sparkrun.dev/manager": "automation"}),
    "nobody": ((), {}),
}


@dataclass
class DaemonEnv:
    """A namespace prepared for the daemon API (see the module docstring)."""

    kube: KubeApi
    namespace: str
    tokens: dict[str, str] = field(default_factory=dict)

    def setup(self) -> DaemonEnv:
        self.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}})
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
            answer = self.kube.request(
                "POST",
                f"/api/v1/namespaces/{self.namespace}/serviceaccounts/{name}/token",
                json={
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenRequest",
                    "spec": {"expirationSeconds": 7200},
                },
            ).json()
            self.tokens[name] = answer["status"]["token"]
        return self

    def username(self, name: str) -> str:
        return f"system:serviceaccount:{self.namespace}:{name}"

    def teardown(self) -> None:
        self.kube.delete("v1", "Namespace", self.namespace)


def _free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    sock.setblocking(False)
    return sock


async def _login(rest: Rest) -> kopf.ConnectionInfo:
    configuration = rest.api.configuration
    header = await configuration.get_api_key_with_prefix("BearerToken")
    token = str(header).split(" ", 1)[-1] if header else None
    return kopf.ConnectionInfo(
        server=str(configuration.host),
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        scheme="Bearer" if token else None,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )


class ShimRunner:
    """The shim (and the DaemonJob controller) serving from a background thread."""

    def __init__(
        self,
        testbed: Testbed,
        namespace: str,
        workdir: Path,
        *,
        executor: bool = True,
        plaintext: bool = False,
        settings: Settings | None = None,
    ) -> None:
        self.testbed = testbed
        self.namespace = namespace
        self.workdir = workdir
        self.with_executor = executor
        self.plaintext = plaintext
        self.settings = settings
        self.sock = _free_socket()
        self.port = self.sock.getsockname()[1]
        scheme = "http" if plaintext else "https"
        self.url = f"{scheme}://127.0.0.1:{self.port}"
        self.ca_file = str(testbed.run_dir / "pki" / "ca.crt")
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._kopf_stop = threading.Event()
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.executor: daemonjob.JobExecutor | None = None

    def start(self, timeout: float = 60.0) -> ShimRunner:
        self._thread = threading.Thread(target=self._main, name="shim-runner", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError(f"the shim did not start within {timeout} s: {self._error!r}")
        if self._error is not None:
            raise RuntimeError("the shim failed to start") from self._error
        return self

    def stop(self) -> None:
        self._kopf_stop.set()
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        if self._thread is not None:
            self._thread.join(30)

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as error:  # reported to start()/tests
            self._error = error
            self._ready.set()

    async def _serve(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        options = server.ServeOptions(
            namespace=self.namespace,
            kubeconfig=str(self.testbed.kubeconfig),
            host="127.0.0.1",
            port=self.port,
            sock=self.sock,
            insecure_plaintext=self.plaintext,
        )
        if not self.plaintext:
            pair = self.testbed.issue_serving_cert("127.0.0.1", "localhost")
            cert, key = self.workdir / "shim.crt", self.workdir / "shim.key"
            pair.write(cert, key)
            options.tls_cert, options.tls_key = str(cert), str(key)
        tasks = []
        shim_ready = asyncio.Event()
        tasks.append(asyncio.create_task(server.serve(options, stop=self._stop, ready=shim_ready)))
        operator_ready = threading.Event()
        if self.with_executor:
            rest = Rest(await connect(str(self.testbed.kubeconfig)))
            registry = kopf.OperatorRegistry()
            daemonjob.register(registry, settings=self.settings, rest_factory=lambda _memo: rest)

            @kopf.on.login(registry=registry)
            async def login(**_: Any) -> kopf.ConnectionInfo:
                return await _login(rest)

            @kopf.on.startup(registry=registry)
            async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
                settings.posting.enabled = False
                settings.watching.server_timeout = 60

            tasks.append(
                asyncio.create_task(
                    kopf.operator(
                        registry=registry,
                        standalone=True,
                        namespaces=[self.namespace],
                        stop_flag=self._kopf_stop,
                        ready_flag=operator_ready,
                        memo=kopf.Memo(),
                    )
                )
            )
        waiter = asyncio.create_task(shim_ready.wait())
        done, _ = await asyncio.wait({waiter, *tasks}, return_when=asyncio.FIRST_COMPLETED)
        if waiter not in done:
            for task in done:
                task.result()
        if self.with_executor:
            await asyncio.to_thread(operator_ready.wait, 60)
        self._ready.set()
        await asyncio.gather(*tasks)


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
