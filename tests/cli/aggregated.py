"""The daemon API as a user's cluster serves it, for the CLI's tests: a shim and its operator
(``tests/shim/conftest.py`` ``start_daemon``: a namespace with the daemon roles, ServiceAccounts
and tokens) whose aggregated listener is registered with the testbed's kube-apiserver (the
APIService ``v1alpha1.daemon.sparkrun.dev`` the project ships, a Service and EndpointSlice on a
non-loopback host address, as ``tests/shim/test_aggregated.py`` does), so ``sparkrun-k8s daemon``
reaches it through kube-apiserver with whatever credentials a kubeconfig holds.

The APIService skips verifying the shim's serving certificate (the runner's names 127.0.0.1 and
localhost, not the Service): the aggregation layer's TLS is tested in
``tests/shim/test_aggregated.py``; here the clients are under test. The front-proxy client
certificate the shim requires is the apiserver's as always.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.conftest import Require
from tests.shim.conftest import Daemon, start_daemon, stop_daemon
from tests.shim.harness import free_port
from tests.shim.test_aggregated import APISERVICE, _available, host_address

PREFIX = "/apis/daemon.sparkrun.dev/v1alpha1"


@dataclass
class Aggregated:
    """A running daemon reachable through kube-apiserver."""

    daemon: Daemon
    testbed: Testbed
    workdir: Path

    @property
    def namespace(self) -> str:
        return self.daemon.namespace

    def exec_kubeconfig(self, who: str) -> Path:
        """A kubeconfig whose user is an exec plugin (a script printing an ExecCredential with
        ``who``'s ServiceAccount token, as cloud logins do): the token is in no file the CLI is
        given and never on a command line."""
        script = self.workdir / f"exec-{who}.py"
        credential = {
            "apiVersion": "client.authentication.k8s.io/v1",
            "kind": "ExecCredential",
            "status": {"token": self.daemon.token(who)},
        }
        script.write_text(f"import sys\nsys.stdout.write({json.dumps(json.dumps(credential))})\n")
        script.chmod(stat.S_IRWXU)
        admin = yaml.safe_load(Path(self.testbed.kubeconfig).read_text())
        cluster = admin["clusters"][0]
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [cluster],
            "users": [
                {
                    "name": who,
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1",
                            "command": sys.executable,
                            "args": [str(script)],
                            "interactiveMode": "Never",
                        }
                    },
                }
            ],
            "contexts": [{"name": who, "context": {"cluster": cluster["name"], "user": who}}],
            "current-context": who,
        }
        path = self.workdir / f"kubeconfig-{who}"
        path.write_text(yaml.safe_dump(config))
        return path

    def token_file(self, who: str) -> Path:
        return private_file(self.workdir / f"token-{who}", self.daemon.token(who) + "\n")


def private_file(path: Path, text: str) -> Path:
    """``path`` holding ``text``, readable by its owner alone from the moment it exists (a token
    file: the CLI warns about one others may read)."""
    path.unlink(missing_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)
    return path


@contextmanager
def aggregated_daemon(testbed: Testbed, kube: KubeApi, workdir: Path) -> Iterator[Aggregated]:
    """A shim + operator with the aggregated API registered (module docstring)."""
    Require()(
        os.geteuid() == 0 and shutil.which("ip") is not None,
        "needs root and iproute2 to give the shim a non-loopback endpoint address",
    )
    apiservice: dict[str, Any] = yaml.safe_load(APISERVICE.read_text())
    name = apiservice["metadata"]["name"]
    with host_address() as address:
        aggregated_port = free_port()
        extra = ("--aggregated-host", address, "--aggregated-port", str(aggregated_port))
        daemon = start_daemon(testbed, kube, workdir, extra_shim_args=extra)
        namespace = daemon.namespace
        binding = f"{namespace}-transport"
        try:
            kube.create(
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "ClusterRoleBinding",
                    "metadata": {"name": binding},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": "sparkrun-daemon-transport",
                    },
                    "subjects": [
                        {"kind": "ServiceAccount", "name": who, "namespace": namespace}
                        for who in ("admin", "operator", "reader", "nobody")
                    ],
                }
            )
            kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": "sparkrun-shim"},
                    "spec": {"ports": [{"name": "aggregated", "port": 443, "targetPort": aggregated_port}]},
                },
                namespace=namespace,
            )
            kube.create(
                {
                    "apiVersion": "discovery.k8s.io/v1",
                    "kind": "EndpointSlice",
                    "metadata": {
                        "name": "sparkrun-shim-1",
                        "labels": {"kubernetes.io/service-name": "sparkrun-shim"},
                    },
                    "addressType": "IPv4",
                    "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
                    "ports": [{"name": "aggregated", "port": aggregated_port, "protocol": "TCP"}],
                },
                namespace=namespace,
            )
            apiservice["spec"]["service"]["namespace"] = namespace
            apiservice["spec"].pop("caBundle", None)
            apiservice["spec"]["insecureSkipTLSVerify"] = True
            kube.apply(apiservice)
            kube.wait(lambda: _available(kube, name), timeout=60, what=f"APIService {name} Available")
            yield Aggregated(daemon=daemon, testbed=testbed, workdir=workdir)
        finally:
            kube.delete("apiregistration.k8s.io/v1", "APIService", name)
            kube.delete("rbac.authorization.k8s.io/v1", "ClusterRoleBinding", binding)
            stop_daemon(daemon)
