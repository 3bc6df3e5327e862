"""Constructing the one Kubernetes client's transport (:func:`connect`; :mod:`.client` re-exports it).

A ``kubernetes_asyncio`` ``ApiClient`` from in-cluster credentials (a pod's service account) or a
kubeconfig, with the environment's proxy settings read once (:func:`_environment_read_once`).
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Final

import aiohttp.helpers
import yarl
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import config as k8s_config

from sparkrun_operator.k8s import errors

SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")


async def connect(
    *, kubeconfig: str | None = None, context: str | None = None, connections: int = 32
) -> k8s_client.ApiClient:
    """An ``ApiClient`` for the cluster: in-cluster when running in a pod, else the kubeconfig.

    ``kubeconfig``/``context`` force a kubeconfig (``$KUBECONFIG`` or ``~/.kube/config`` when
    ``kubeconfig`` is None). At most ``connections`` TLS connections are open at once (each
    costs a few hundred KiB). The caller owns the client (usually through :class:`Kube`).
    """
    configuration = k8s_client.Configuration()
    configuration.connection_pool_maxsize = connections
    in_cluster = (
        kubeconfig is None
        and "KUBERNETES_SERVICE_HOST" in os.environ
        and (SERVICE_ACCOUNT_DIR / "token").exists()
    )
    try:
        if in_cluster:
            # NB: reads two small files; off the loop anyway.
            loader = k8s_config.incluster_config.InClusterConfigLoader(
                token_filename=str(SERVICE_ACCOUNT_DIR / "token"),
                cert_filename=str(SERVICE_ACCOUNT_DIR / "ca.crt"),
            )
            await asyncio.to_thread(loader.load_and_set, configuration)
        else:
            await k8s_config.load_kube_config(
                config_file=kubeconfig, context=context, client_configuration=configuration
            )
    except (k8s_config.ConfigException, OSError) as error:
        raise errors.KubeError(f"no usable Kubernetes credentials: {error}") from error
    api = k8s_client.ApiClient(configuration=configuration)
    _environment_read_once(api, configuration)
    return api


def _environment_read_once(api: k8s_client.ApiClient, configuration: k8s_client.Configuration) -> None:
    """The proxy settings of the environment, read once instead of on every request.

    kubernetes_asyncio's session trusts the environment, so aiohttp looks up the proxy variables
    and ``~/.netrc`` in a worker thread on *every* request: two thread hops per API call, about
    a tenth of the operator's CPU while 1,000 workloads start. The environment does not change
    while a process runs: the proxy for the apiserver (``HTTPS_PROXY``/``NO_PROXY``) is resolved
    here, once, and the per-request lookups are turned off. ``.netrc`` credentials never apply
    (every call authenticates with a token or a client certificate).
    """
    rest = api.rest_client
    session = rest.pool_manager
    if not configuration.proxy and configuration.host:
        try:
            proxy, auth = aiohttp.helpers.get_env_proxy_for_url(yarl.URL(configuration.host))
        except LookupError:
            pass  # no proxy for the apiserver
        else:
            rest.proxy = str(proxy)
            # NB: what aiohttp would have passed per request (the session's default proxy_auth)
            session._default_proxy_auth = auth
    # NB: aiohttp's own slots (ClientSession.ATTRS); tests/unit/test_k8s_connect.py checks them
    session._trust_env = False
