"""Start, inspect and stop one testbed: a real Kubernetes control plane on 127.0.0.1.

:meth:`Testbed.start` runs, in this order, each as its own process group with a log in
``<run_dir>/logs``:

1. etcd (data in ``<run_dir>/etcd-data``, no fsync);
2. kube-apiserver: RBAC, service-account token signing, an admin bearer token
   (``--token-auth-file``), client certificates from the testbed CA, the aggregation layer
   (``--requestheader-*``, ``--proxy-client-*``) with ``--enable-aggregator-routing=true``
   (ADR 0003), and ``--endpoint-reconciler-type=none`` (a loopback advertise address cannot be
   an endpoint);
3. the JobSet CRD and the project's CRDs (server-side apply), then in parallel:
   kube-controller-manager, kube-scheduler, KWOK (fake nodes, pods become Running and stay so)
   and the JobSet controller with its webhooks on 127.0.0.1, registered by URL;
4. the fake GPU nodes of the :class:`~sparkrun_testbed.topology.Topology`.

It returns once every component reports healthy, every node is Ready, the ``default``
ServiceAccount exists (the controller-manager works) and every CRD is Established. If anything
fails, everything started so far is stopped and :class:`StartError` carries the log tail of
the component at fault. :meth:`Testbed.stop` stops every process group (SIGTERM, then SIGKILL)
and leaves nothing running. A testbed is reachable from other processes through its run
directory (:meth:`Testbed.attach`). The API is synchronous; call it via ``asyncio.to_thread``
from async code.
"""

from __future__ import annotations

import base64
import functools
import ipaddress
import os
import secrets
import shutil
import ssl
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml

from sparkrun_testbed import daemons, jobset, kueue_run, pki, process_runtime
from sparkrun_testbed.binaries import Binaries, repo_root
from sparkrun_testbed.daemons import Daemon
from sparkrun_testbed.kubeapi import ApiError, KubeApi, load_manifests
from sparkrun_testbed.ports import LOOPBACK, free_ports
from sparkrun_testbed.state import State
from sparkrun_testbed.topology import Topology, node_manifests

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
SCHEDULER = "kube-scheduler"
KWOK = "kwok"
JOBSET = "jobset"
PROCESS_RUNTIME = process_runtime.PROCESS_RUNTIME  # only with process nodes in the topology
KUEUE = "kueue"  # only once kueue_run.start added it (optional, tests that ask for it)
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, SCHEDULER, KWOK, JOBSET)

ADMIN_USER = "sparkrun-admin"
RUN_ROOT_ENV = "SPARKRUN_TESTBED_RUN_ROOT"
_PORT_NAMES = (
    "etcd",
    "etcd-peer",
    "apiserver",
    "controller-manager",
    "scheduler",
    "kwok",
    "jobset-webhook",
    "jobset-health",
    PROCESS_RUNTIME,
)
_LOG_TAIL_LINES = 40


class TestbedError(RuntimeError):
    """Base of the testbed's errors."""

    __test__ = False  # NB: not a pytest test class, despite the name


class StartError(TestbedError):
    """A component did not start or become ready; the message includes its log tail."""


class AlreadyRunning(TestbedError):
    """The run directory belongs to a testbed whose processes are still alive."""


@dataclass(frozen=True)
class Options:
    """How to shape a testbed. ``crd_dirs`` are directories of CRD YAML (missing or empty is fine)."""

    topology: Topology = field(default_factory=Topology)
    crd_dirs: tuple[Path, ...] = ()
    service_cidr: str = "10.96.0.0/16"
    pod_cidr: str = "10.244.0.0/16"
    timeout: float = 120.0
    extra_apiserver_args: tuple[str, ...] = ()


@dataclass(frozen=True)
class ComponentStatus:
    """One component as seen by :meth:`Testbed.status`. ``healthy`` is None if not probed."""

    name: str
    pid: int
    running: bool
    healthy: bool | None
    rss_bytes: int
    endpoint: str
    log: Path


def default_run_root() -> Path:
    """``$SPARKRUN_TESTBED_RUN_ROOT``, else ``<repo>/.run/testbed``, else a user cache dir."""
    if env := os.environ.get(RUN_ROOT_ENV):
        return Path(env).resolve()
    root = repo_root()
    if root is not None:
        return root / ".run" / "testbed"
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sparkrun-testbed" / "run"


def default_crd_dirs() -> tuple[Path, ...]:
    """The checkout's ``crds/`` directory, if there is a checkout."""
    root = repo_root()
    return (root / "crds",) if root is not None else ()


class Testbed:
    """A handle on a started (or stopped) testbed, backed by its run directory."""

    __test__ = False  # NB: not a pytest test class, despite the name

    def __init__(self, state: State) -> None:
        self.state = state

    # -- identity -------------------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self.state.name

    @property
    def run_dir(self) -> Path:
        return self.state.run_dir

    @property
    def kubeconfig(self) -> Path:
        return self.state.kubeconfig

    @property
    def server(self) -> str:
        return self.state.server

    @property
    def ca_pem(self) -> bytes:
        return (self.run_dir / "pki" / "ca.crt").read_bytes()

    def ca_file(self) -> Path:
        """PEM of the cluster CA (signs the apiserver's and the webhooks' serving certs)."""
        return self.run_dir / "pki" / "ca.crt"

    def issue_serving_cert(self, *hosts: str) -> pki.KeyPair:
        """A serving certificate for ``hosts`` signed by the cluster CA (for test servers)."""
        return _load_ca(self.run_dir / "pki").issue(hosts[0], hosts=hosts)

    def env(self) -> dict[str, str]:
        """Environment variables that point clients (kubectl, kopf, kr8s) at this testbed."""
        return {"KUBECONFIG": str(self.kubeconfig)}

    def api(self) -> KubeApi:
        """A new admin client; the caller closes it."""
        return KubeApi.from_kubeconfig(self.kubeconfig)

    # -- lifecycle ------------------------------------------------------------------------------

    @classmethod
    def attach(cls, run_dir: Path) -> Testbed | None:
        """The testbed recorded in ``run_dir`` (running or not), or None if there is none."""
        state = State.load(run_dir)
        return None if state is None else cls(state)

    def running(self) -> bool:
        """True if any of its processes is still alive."""
        return any(d.running() for d in self.state.daemons)

    @classmethod
    def start(
        cls,
        run_dir: Path,
        binaries: Binaries,
        options: Options | None = None,
        *,
        name: str | None = None,
    ) -> Testbed:
        """Start a fresh testbed in ``run_dir`` and wait until it is ready (see module docs).

        Raises :class:`AlreadyRunning` if ``run_dir`` holds a live testbed, :class:`StartError`
        (after stopping whatever was started) if a component fails, and
        :class:`~sparkrun_testbed.binaries.BinariesMissing` if binaries are absent.
        A previous, stopped run in ``run_dir`` is wiped, logs included.
        """
        options = options or Options()
        binaries.check()
        run_dir = run_dir.resolve()
        previous = cls.attach(run_dir)
        if previous is not None and previous.running():
            raise AlreadyRunning(f"a testbed is already running in {run_dir}; stop it first (testbed down)")
        if run_dir.exists():
            shutil.rmtree(run_dir)
        for sub in ("pki", "logs", "config"):
            (run_dir / sub).mkdir(parents=True)
        ports = dict(zip(_PORT_NAMES, free_ports(len(_PORT_NAMES)), strict=True))
        state = State(
            name=name or run_dir.name,
            run_dir=run_dir,
            bin_dir=binaries.bin_dir,
            server=f"https://{LOOPBACK}:{ports['apiserver']}",
            ports=ports,
            topology=options.topology.to_dict(),
            owner_pid=os.getpid(),
            started_at=time.time(),
        )
        testbed = cls(state)
        try:
            _Launcher(testbed, binaries, options).run()
        except BaseException:
            # NB: also on KeyboardInterrupt: a half-started testbed must not outlive us.
            state.phase = "failed"
            testbed._stop_daemons(grace=5.0)
            state.save()
            raise
        state.phase = "running"
        state.ready_seconds = round(time.time() - state.started_at, 2)
        state.save()
        return testbed

    def stop(self, *, grace: float = 10.0) -> None:
        """Stop every process of the testbed and delete the etcd data; logs stay.

        Controllers stop first, then kube-apiserver, then etcd, so nothing logs connection
        errors against a dead apiserver for the grace period. Idempotent.
        """
        self._stop_daemons(grace=grace)
        shutil.rmtree(self.run_dir / "etcd-data", ignore_errors=True)
        self.state.phase = "stopped"
        self.state.save()

    def restart_apiserver(self, *, down: float = 0.0, timeout: float = 180.0) -> None:
        """Stop kube-apiserver, wait ``down`` seconds, start it again with the same command line
        and return once it is ready and the controllers work again (the controller-manager
        gives a new namespace its ``default`` ServiceAccount), so later tests find a working
        cluster. For tests of clients that must survive an apiserver restart.

        Raises :class:`StartError` when it is not back within ``timeout`` seconds.
        """
        old = self.state.daemon(APISERVER)
        if old is None:
            raise TestbedError(f"testbed {self.name} has no kube-apiserver")
        daemons.stop_all([old], grace=10.0)
        time.sleep(down)
        new = daemons.start(
            APISERVER, old.argv, log=old.log, env={**os.environ, "KUBECONFIG": str(self.kubeconfig)}
        )
        self.state.daemons[self.state.daemons.index(old)] = new
        self.state.save()
        deadline = time.monotonic() + timeout
        with self._probe_client() as probe:
            while not _probe(probe, self._health_url(APISERVER)):
                if not new.running() or time.monotonic() > deadline:
                    raise StartError(f"testbed {self.name}: kube-apiserver did not come back after a restart")
                time.sleep(0.1)
        probe_ns = f"restart-probe-{int(time.time() * 1000)}"
        with self.api() as api:
            api.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": probe_ns}})
            api.wait(
                lambda: api.get("v1", "ServiceAccount", "default", namespace=probe_ns),
                timeout=max(1.0, deadline - time.monotonic()),
                what="the controller-manager after an apiserver restart",
            )
            api.delete("v1", "Namespace", probe_ns)

    def _stop_daemons(self, *, grace: float) -> None:
        by_name = {d.name: d for d in self.state.daemons}
        controllers = [d for d in self.state.daemons if d.name not in (APISERVER, ETCD)]
        daemons.stop_all(controllers, grace=grace)
        # Pods of process nodes and their network namespaces, if the runtime could not clean up.
        process_runtime.cleanup(self.run_dir)
        kueue_run.cleanup(self.run_dir)  # its visibility server's host address, if it ran
        for name in (APISERVER, ETCD):
            if name in by_name:
                daemons.stop_all([by_name[name]], grace=grace)

    # -- inspection -----------------------------------------------------------------------------

    def status(self) -> list[ComponentStatus]:
        """Every recorded component: alive, healthy (probed when alive), resident memory."""
        result = []
        snapshot = daemons.process_table()
        with self._probe_client() as client:
            for d in self.state.daemons:
                alive = d.running()
                url = self._health_url(d.name)
                healthy = _probe(client, url) if alive else None
                result.append(
                    ComponentStatus(
                        name=d.name,
                        pid=d.pid,
                        running=alive,
                        healthy=healthy,
                        rss_bytes=d.rss_bytes(snapshot) if alive else 0,
                        endpoint=url,
                        log=d.log,
                    )
                )
        return result

    def rss_bytes(self) -> int:
        """Sum of the resident memory of every testbed process."""
        snapshot = daemons.process_table()
        return sum(d.rss_bytes(snapshot) for d in self.state.daemons if d.running())

    def log_tails(self, *, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of every component log, for failure reports."""
        return "\n".join(f"--- {d.log} ---\n{daemons.tail(d.log, lines=lines)}" for d in self.state.daemons)

    def _health_url(self, name: str) -> str:
        p = self.state.ports
        return {
            ETCD: f"http://{LOOPBACK}:{p['etcd']}/readyz",
            APISERVER: f"{self.server}/readyz",
            CONTROLLER_MANAGER: f"https://{LOOPBACK}:{p['controller-manager']}/healthz",
            SCHEDULER: f"https://{LOOPBACK}:{p['scheduler']}/healthz",
            KWOK: f"http://{LOOPBACK}:{p['kwok']}/healthz",
            JOBSET: f"http://{LOOPBACK}:{p['jobset-health']}/readyz",
            PROCESS_RUNTIME: process_runtime.health_url(p.get(PROCESS_RUNTIME, 0)),
            KUEUE: f"http://{LOOPBACK}:{p.get(kueue_run.HEALTH_PORT, 0)}/readyz",
        }.get(name, "")

    def _probe_client(self) -> httpx.Client:
        token = _kubeconfig_token(self.kubeconfig)
        context = ssl.create_default_context(cadata=self.ca_pem.decode())
        # NB: the bearer token goes to every probed endpoint, all of them ours on 127.0.0.1.
        return httpx.Client(verify=context, timeout=5.0, headers={"Authorization": f"Bearer {token}"})

    # -- cluster content ------------------------------------------------------------------------

    def install_crds(self, directory: Path, *, timeout: float = 60.0) -> list[str]:
        """Server-side apply every CustomResourceDefinition in ``directory/*.yaml``.

        A missing or empty directory installs nothing. Waits until each CRD is Established and
        returns their names.
        """
        return self.apply_crds(crds_in(directory), timeout=timeout)

    def apply_crds(self, crds: Iterable[dict[str, Any]], *, timeout: float = 60.0) -> list[str]:
        """Server-side apply these CustomResourceDefinitions; wait until each is Established and
        return their names."""
        with self.api() as api:
            return _apply_crds(api, crds, timeout=timeout)

    def create_nodes(self, topology: Topology, *, timeout: float = 60.0) -> list[str]:
        """Create the fake nodes of ``topology`` (existing ones are left alone); wait until Ready."""
        with self.api() as api:
            return _create_nodes(api, topology, timeout=timeout)


class _Launcher:
    """The start sequence of :meth:`Testbed.start`; raises :class:`StartError` on failure."""

    def __init__(self, testbed: Testbed, binaries: Binaries, options: Options) -> None:
        self.tb = testbed
        self.state = testbed.state
        self.bin = binaries
        self.options = options
        self.dir = testbed.run_dir
        self.deadline = time.monotonic() + options.timeout
        self.env = {**os.environ, "KUBECONFIG": str(testbed.kubeconfig)}

    def run(self) -> None:
        self._write_credentials()
        self.state.save()
        etcd = self._spawn(ETCD, self._etcd_args())
        with self.tb._probe_client() as probe:
            self._wait_healthy(etcd, probe)
            apiserver = self._spawn(APISERVER, self._apiserver_args())
            self._wait_healthy(apiserver, probe)
            with self.tb.api() as api:
                # NB: the JobSet controller's informers need the CRD before it starts.
                crds = load_manifests(self.bin.jobset_crd)
                for directory in self.options.crd_dirs:
                    crds += crds_in(directory)
                self._guard(
                    apiserver, lambda: _apply_crds(api, crds, timeout=self._left()), "installing CRDs"
                )
                started = [
                    self._spawn(CONTROLLER_MANAGER, self._controller_manager_args()),
                    self._spawn(SCHEDULER, self._scheduler_args()),
                    self._spawn(KWOK, self._kwok_args()),
                    self._spawn(JOBSET, self._jobset_args()),
                ]
                if self.options.topology.process_node_names():
                    started.append(self._spawn_process_runtime())
                for daemon in started:
                    self._wait_healthy(daemon, probe)
                self._guard(apiserver, lambda: self._register_webhooks(api), "registering JobSet webhooks")
                kwok = self.state.daemon(KWOK)
                assert kwok is not None
                self._guard(
                    kwok,
                    lambda: _create_nodes(api, self.options.topology, timeout=self._left()),
                    "creating fake nodes",
                )
                kcm = self.state.daemon(CONTROLLER_MANAGER)
                assert kcm is not None
                self._guard(
                    kcm,
                    lambda: api.wait(
                        lambda: api.get("v1", "ServiceAccount", "default", namespace="default"),
                        timeout=self._left(),
                        what="ServiceAccount default/default (made by kube-controller-manager)",
                    ),
                    "waiting for the controller-manager",
                )

    # -- helpers --------------------------------------------------------------------------------

    def _left(self) -> float:
        return max(1.0, self.deadline - time.monotonic())

    def _spawn(self, name: str, args: Sequence[str]) -> Daemon:
        daemon = daemons.start(
            name, [str(self.bin.path(name)), *args], log=self.dir / "logs" / f"{name}.log", env=self.env
        )
        self.state.daemons.append(daemon)
        self.state.save()
        return daemon

    def _spawn_process_runtime(self) -> Daemon:
        # Process nodes: their pods run as local processes (testbed/process_runtime.py).
        daemon = process_runtime.launch(
            self.dir,
            self.options.topology.process_node_names(),
            health_port=self.state.ports[PROCESS_RUNTIME],
            env=self.env,
            extra_args=[f"--service-cidr={self.options.service_cidr}"],
        )
        self.state.daemons.append(daemon)
        self.state.save()
        return daemon

    def _wait_healthy(self, daemon: Daemon, client: httpx.Client) -> None:
        url = self.tb._health_url(daemon.name)
        while not _probe(client, url):
            if not daemon.running():
                raise self._failure(daemon, f"exited with code {daemon.exit_code()} before it was healthy")
            if time.monotonic() > self.deadline:
                raise self._failure(daemon, f"was not healthy at {url} within {self.options.timeout:.0f} s")
            time.sleep(0.1)

    def _guard(self, daemon: Daemon, step: Callable[[], Any], what: str) -> None:
        try:
            step()
        except Exception as e:
            raise self._failure(daemon, f"failed while {what}: {e}") from e

    def _failure(self, daemon: Daemon, what: str) -> StartError:
        return StartError(
            f"testbed {self.state.name}: {daemon.name} {what}\n"
            f"--- last {_LOG_TAIL_LINES} lines of {daemon.log} ---\n"
            f"{daemons.tail(daemon.log, lines=_LOG_TAIL_LINES)}"
        )

    # -- files ----------------------------------------------------------------------------------

    def _write_credentials(self) -> None:
        d = self.dir / "pki"
        ca = pki.CertificateAuthority.create("sparkrun-testbed-ca")
        ca.key_pair.write(d / "ca.crt", d / "ca.key")
        service_ip = str(next(ipaddress.ip_network(self.options.service_cidr).hosts()))
        hosts = (
            LOOPBACK,
            "localhost",
            service_ip,
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        )
        ca.issue("kube-apiserver", hosts=hosts).write(d / "apiserver.crt", d / "apiserver.key")
        for name in (CONTROLLER_MANAGER, SCHEDULER, "jobset-webhook"):
            ca.issue(name, hosts=(LOOPBACK, "localhost")).write(d / f"{name}.crt", d / f"{name}.key")
        process_runtime.prepare_credentials(d)
        ca.issue(ADMIN_USER, organizations=("system:masters",), client=True).write(
            d / "admin.crt", d / "admin.key"
        )
        front_proxy = pki.CertificateAuthority.create("sparkrun-testbed-front-proxy-ca")
        (d / "front-proxy-ca.crt").write_bytes(front_proxy.cert_pem)
        front_proxy.issue("front-proxy-client", client=True).write(
            d / "front-proxy-client.crt", d / "front-proxy-client.key"
        )
        sa_key = pki.new_signing_key()
        (d / "sa.key").write_bytes(pki.key_pem(sa_key))
        (d / "sa.key").chmod(0o600)
        (d / "sa.pub").write_bytes(pki.public_key_pem(sa_key))
        token = secrets.token_urlsafe(32)
        tokens = self.dir / "tokens.csv"
        tokens.write_text(f'{token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
        tokens.chmod(0o600)
        self.tb.kubeconfig.write_text(
            yaml.safe_dump(_kubeconfig(self.state.name, self.tb.server, ca.cert_pem, token))
        )
        self.tb.kubeconfig.chmod(0o600)
        certs = self.dir / "config" / "jobset-certs"
        certs.mkdir()
        shutil.copy(d / "jobset-webhook.crt", certs / "tls.crt")
        shutil.copy(d / "jobset-webhook.key", certs / "tls.key")

    def _register_webhooks(self, api: KubeApi) -> None:
        base_url = f"https://{LOOPBACK}:{self.state.ports['jobset-webhook']}"
        upstream = load_manifests(self.bin.jobset_webhooks)
        for config in jobset.webhook_configurations(upstream, base_url=base_url, ca_pem=self.tb.ca_pem):
            api.apply(config)

    # -- command lines --------------------------------------------------------------------------

    def _etcd_args(self) -> list[str]:
        p = self.state.ports
        client = f"http://{LOOPBACK}:{p['etcd']}"
        peer = f"http://{LOOPBACK}:{p['etcd-peer']}"
        return [
            "--name=testbed",
            f"--data-dir={self.dir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=testbed={peer}",
            "--unsafe-no-fsync=true",
            "--auto-compaction-retention=1",
            "--quota-backend-bytes=4294967296",
        ]

    def _apiserver_args(self) -> list[str]:
        p, d = self.state.ports, self.dir / "pki"
        return [
            f"--etcd-servers=http://{LOOPBACK}:{p['etcd']}",
            f"--bind-address={LOOPBACK}",
            f"--advertise-address={LOOPBACK}",
            f"--secure-port={p['apiserver']}",
            f"--tls-cert-file={d / 'apiserver.crt'}",
            f"--tls-private-key-file={d / 'apiserver.key'}",
            f"--client-ca-file={d / 'ca.crt'}",
            f"--token-auth-file={self.dir / 'tokens.csv'}",
            "--authorization-mode=RBAC",
            f"--service-cluster-ip-range={self.options.service_cidr}",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            # The aggregation layer (APIService objects), routed to endpoints: ADR 0003.
            f"--requestheader-client-ca-file={d / 'front-proxy-ca.crt'}",
            "--requestheader-allowed-names=front-proxy-client",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={d / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={d / 'front-proxy-client.key'}",
            "--enable-aggregator-routing=true",
            "--profiling=false",
            # `kubectl logs` for pods on process nodes: kubelet client credentials.
            *process_runtime.apiserver_args(d),
            *self.options.extra_apiserver_args,
        ]

    def _component_common(self, name: str, port: int) -> list[str]:
        d = self.dir / "pki"
        kubeconfig = str(self.tb.kubeconfig)
        return [
            f"--kubeconfig={kubeconfig}",
            f"--authentication-kubeconfig={kubeconfig}",
            f"--authorization-kubeconfig={kubeconfig}",
            f"--bind-address={LOOPBACK}",
            f"--secure-port={port}",
            f"--tls-cert-file={d / f'{name}.crt'}",
            f"--tls-private-key-file={d / f'{name}.key'}",
            "--leader-elect=false",
        ]

    def _controller_manager_args(self) -> list[str]:
        d = self.dir / "pki"
        return [
            *self._component_common(CONTROLLER_MANAGER, self.state.ports["controller-manager"]),
            f"--service-account-private-key-file={d / 'sa.key'}",
            f"--root-ca-file={d / 'ca.crt'}",
            f"--cluster-signing-cert-file={d / 'ca.crt'}",
            f"--cluster-signing-key-file={d / 'ca.key'}",
            f"--service-cluster-ip-range={self.options.service_cidr}",
            # NB: the default (/usr/libexec/kubernetes/...) is created on the host if missing.
            f"--flex-volume-plugin-dir={self.dir / 'flexvolume'}",
        ]

    def _scheduler_args(self) -> list[str]:
        return self._component_common(SCHEDULER, self.state.ports["scheduler"])

    def _kwok_args(self) -> list[str]:
        stages = self.dir / "config" / "kwok-stages.yaml"
        docs = [d for path in self.bin.kwok_stages for d in load_manifests(path) if d.get("kind") == "Stage"]
        for doc in docs:
            if doc["metadata"]["name"] == "pod-delete":
                # NB: Job-owned pods carry the batch.kubernetes.io/job-tracking finalizer, which
                # the Job controller drops only once a pod is terminal; KWOK's fast stages never
                # make a deleted Running pod terminal, so without this such pods stayed
                # Terminating forever, holding their node's GPUs and their namespace.
                doc["spec"]["next"]["finalizers"] = {"empty": True}
        stages.write_text(yaml.safe_dump_all(docs))
        return [
            f"--kubeconfig={self.tb.kubeconfig}",
            f"--config={stages}",
            "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
            "--node-lease-duration-seconds=40",
            f"--cidr={self.options.pod_cidr}",
            f"--server-address={LOOPBACK}:{self.state.ports['kwok']}",
        ]

    def _jobset_args(self) -> list[str]:
        config = self.dir / "config" / "jobset.yaml"
        body = jobset.controller_config(
            webhook_port=self.state.ports["jobset-webhook"],
            health_port=self.state.ports["jobset-health"],
            cert_dir=self.dir / "config" / "jobset-certs",
        )
        config.write_text(yaml.safe_dump(body))
        # NB: the controller reads KUBECONFIG from the environment (controller-runtime).
        return [f"--config={config}"]


# -- shared steps ---------------------------------------------------------------------------------


def crds_in(directory: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition in ``directory/*.yaml`` (none if it is missing or empty)."""
    if not directory.is_dir():
        return []
    files = sorted([*directory.glob("*.yaml"), *directory.glob("*.yml")])
    return [doc for f in files for doc in load_manifests(f) if doc.get("kind") == "CustomResourceDefinition"]


def _apply_crds(api: KubeApi, crds: Iterable[dict[str, Any]], *, timeout: float) -> list[str]:
    names = []
    for crd in crds:
        api.apply(crd)
        names.append(crd["metadata"]["name"])
    for name in names:
        api.wait(
            functools.partial(_crd_established, api, name), timeout=timeout, what=f"CRD {name} Established"
        )
    return names


def _crd_established(api: KubeApi, name: str) -> bool:
    crd = api.get("apiextensions.k8s.io/v1", "CustomResourceDefinition", name)
    conditions = (crd or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _create_nodes(api: KubeApi, topology: Topology, *, timeout: float) -> list[str]:
    names = []
    for node in node_manifests(topology):
        try:
            # NB: create, not apply: only create keeps the status (GPU capacity) we send.
            api.create(node)
        except ApiError as e:
            if e.status != 409:
                raise
        names.append(node["metadata"]["name"])
    for name in names:
        api.wait(functools.partial(_node_ready, api, name), timeout=timeout, what=f"node {name} Ready")
    return names


def _node_ready(api: KubeApi, name: str) -> bool:
    node = api.get("v1", "Node", name)
    conditions = (node or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


def _probe(client: httpx.Client, url: str) -> bool:
    try:
        return client.get(url).is_success
    except httpx.HTTPError:
        return False


def _kubeconfig(name: str, server: str, ca_pem: bytes, token: str) -> dict[str, Any]:
    context = f"sparkrun-testbed-{name}"
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": context,
                "cluster": {
                    "server": server,
                    "certificate-authority-data": base64.b64encode(ca_pem).decode(),
                },
            }
        ],
        "users": [{"name": ADMIN_USER, "user": {"token": token}}],
        "contexts": [
            {"name": context, "context": {"cluster": context, "user": ADMIN_USER, "namespace": "default"}}
        ],
        "current-context": context,
    }


def _kubeconfig_token(path: Path) -> str:
    config = yaml.safe_load(path.read_text())
    return str(config["users"][0]["user"]["token"])


def _load_ca(directory: Path) -> pki.CertificateAuthority:
    return pki.CertificateAuthority.load(directory / "ca.crt", directory / "ca.key")
