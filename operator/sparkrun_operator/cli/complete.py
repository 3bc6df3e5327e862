"""Shell completion of object names (argcomplete completers) that any verb can attach.

::

    argument = parser.add_argument("name", metavar="NAME", help="the InferenceWorkload")
    argument.completer = complete.workload_names

A completer lists the kind's names in the namespace on the line (``-n``, else the kubeconfig
context's; a cluster-scoped kind's, such as InferenceCluster, everywhere) with the command line's
``--kubeconfig`` and ``--context``, through the one client. It is THE completer module: every
verb attaches one of these (``names_of(kind)`` for any kind of ``api/resources.py``), or wraps
its own lookup in :func:`bounded` (``stop --daemon``: the daemon API's listing).
It asks for object metadata only (a ``PartialObjectMetadataList``: no specs or statuses), at
most :data:`MAX_NAMES` names and :data:`MAX_BYTES` of answer, and gives up after
:data:`SECONDS` (an unreachable cluster, an exec plugin waiting for a login): a TAB then
completes nothing, as it does without a kubeconfig. It never prints, never raises.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, Final

from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.api.resources import INFERENCE_WORKLOAD, MODEL_CACHE, RECIPE, Kind

#: How long one completion may take, at most (seconds).
SECONDS: Final = 2.0
#: Names listed, at most (one page).
MAX_NAMES: Final = 500
#: The answer read, at most (bytes).
MAX_BYTES: Final = 4 << 20
_METADATA_ONLY: Final = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"}
_NAME_CHARS: Final = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-.")

Completer = Callable[..., list[str]]


async def _names(kind: Kind, args: argparse.Namespace) -> list[str]:
    from sparkrun_operator.cli import common

    rest = await common.connect(args)
    try:
        where = f"namespaces/{common.namespace_of(args)}/" if kind.namespaced else ""
        path = f"/apis/{API_VERSION}/{where}{kind.plural}"
        page = await rest.request(
            "GET",
            path,
            query={"limit": MAX_NAMES},
            headers=_METADATA_ONLY,
            request_timeout=SECONDS,
            max_bytes=MAX_BYTES,
        )
    finally:
        await rest.close()
    items = page.get("items") if isinstance(page, dict) else None
    return [str((item.get("metadata") or {}).get("name") or "") for item in items or ()]


def names(kind: Kind, prefix: str, args: argparse.Namespace) -> list[str]:
    """``kind``'s names that start with ``prefix`` (sorted), or ``[]`` after :data:`SECONDS`
    or on any error (:func:`bounded`)."""
    return bounded(lambda: _names(kind, args), prefix)


def bounded(lookup: Callable[[], Awaitable[Iterable[str]]], prefix: str) -> list[str]:
    """The names ``lookup()`` finds that start with ``prefix`` and are Kubernetes names (sorted,
    at most :data:`MAX_NAMES`), or ``[]`` after :data:`SECONDS` or on any error: for a
    completer whose names come another way (the daemon API's ``workloads.list``). The lookup
    runs in a daemon thread with its own event loop, so not even a call that blocks its thread
    (a kubeconfig on a hung mount, a connect that never returns) outlasts the bound (argcomplete
    leaves with ``os._exit``)."""
    found: list[str] = []

    def run() -> None:
        async def listed() -> list[str]:
            return [str(name) for name in await lookup()]

        try:
            found.extend(asyncio.run(asyncio.wait_for(listed(), SECONDS)))
        except BaseException:  # NB: a TAB never fails, whatever the cluster does
            found.clear()

    # NB: the client library logs a missing kubeconfig as a warning, which would land in the
    # middle of the user's command line on TAB: quiet while the lookup runs
    client_log = logging.getLogger("kubernetes_asyncio")
    level = client_log.level
    client_log.setLevel(logging.CRITICAL)
    worker = threading.Thread(target=run, name="complete-names", daemon=True)
    worker.start()
    try:
        worker.join(SECONDS + 0.5)
    finally:
        client_log.setLevel(level)
    if worker.is_alive():
        return []
    # NB: names go to the shell: only what a Kubernetes name may hold (the apiserver checked,
    # but a daemon's listing or a proxy in between is not the apiserver).
    return sorted(n for n in found[:MAX_NAMES] if n.startswith(prefix) and n and set(n) <= _NAME_CHARS)


def names_of(kind: Kind) -> Completer:
    """A completer of ``kind``'s names."""

    def complete(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
        return names(kind, prefix, parsed_args)

    return complete


def workload_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The completer of InferenceWorkload names."""
    return names(INFERENCE_WORKLOAD, prefix, parsed_args)


def cache_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The completer of ModelCache names."""
    return names(MODEL_CACHE, prefix, parsed_args)


def recipe_names(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """The completer of Recipe names (``run``'s MODEL|RECIPE)."""
    return names(RECIPE, prefix, parsed_args)
