"""The watch primitive (``k8s/informer.py``) against the testbed's apiserver.

Tested: a watch resumed from an expired resourceVersion (etcd compacted, apiserver restarted)
relists (410); a restart of
kube-apiserver mid-watch; the apiserver unreachable for a while (a loopback relay that resets
every connection and refuses new ones) while objects are created, changed and deleted: the
cache is exact afterwards; watchers failing at the same moment spread their retries.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import AsyncIterator, Callable
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube, connect
from sparkrun_operator.k8s.informer import Informer
from sparkrun_operator.k8s.resources import CONFIG_MAPS
from sparkrun_operator.retry import Backoff
from sparkrun_testbed import plane

FAST = Backoff(initial=0.05, maximum=0.5)


def compact_etcd(testbed: plane.Testbed) -> None:
    """Compact the testbed's etcd up to its current revision (old resourceVersions expire)."""
    base = f"http://127.0.0.1:{testbed.state.ports['etcd']}"
    with httpx.Client(base_url=base, timeout=10.0) as etcd:
        found = etcd.post("/v3/kv/range", json={"key": "Lw=="})  # "/"
        found.raise_for_status()
        revision = found.json()["header"]["revision"]
        etcd.post("/v3/kv/compaction", json={"revision": revision, "physical": True}).raise_for_status()


class Relay:
    """A loopback TCP relay to the apiserver that can be cut (resets, refusals) and restored."""

    def __init__(self, host: str, port: int) -> None:
        self.target = (host, port)
        self.port = 0
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def cut(self) -> None:
        """Reset every open connection and stop accepting new ones."""
        assert self._server is not None
        self._server.close()
        await self._end_handlers()
        await self._server.wait_closed()
        self._server = None

    async def close(self) -> None:
        """Stop listening (when still listening) and end every connection."""
        if self._server is not None:
            await self.cut()
        await self._end_handlers()

    async def _end_handlers(self) -> None:
        # NB: every handler ends here, also one still connecting upstream and one for a connection
        # accepted just before the listener closed (its task starts after a first snapshot): no
        # socket outlives a cut (an unclosed one warns when it is collected, in whichever test
        # runs then, failing that test instead).
        while self._handlers:
            handlers = list(self._handlers)
            for task in handlers:
                task.cancel()
            await asyncio.gather(*handlers, return_exceptions=True)
            self._handlers.difference_update(handlers)
            await asyncio.sleep(0)  # a connection accepted meanwhile has its task started now

    async def restore(self) -> None:
        await self.start()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._handlers.add(task)
        up_writer: asyncio.StreamWriter | None = None
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)

            async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
                with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                    while chunk := await src.read(65536):
                        dst.write(chunk)
                        await dst.drain()
                dst.transport.abort()

            await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
        except OSError:
            pass
        finally:
            writer.transport.abort()  # a reset, as a cut connection is
            if up_writer is not None:
                up_writer.transport.abort()
            self._handlers.discard(task)


@pytest.fixture
async def relay(testbed: plane.Testbed) -> AsyncIterator[Relay]:
    url = urlsplit(testbed.server)
    assert url.hostname is not None
    assert url.port is not None
    found = Relay(url.hostname, url.port)
    await found.start()
    yield found
    await found.close()  # NB: also after a test that failed between a cut and a restore


async def _client(testbed: plane.Testbed, *, via: Relay | None = None) -> Kube:
    kube = Kube(await connect(kubeconfig=str(testbed.kubeconfig)), field_manager="tests")
    if via is not None:
        kube.api.configuration.host = f"https://127.0.0.1:{via.port}"
    return kube


def _config_map(name: str, value: str = "v") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"v": value}}


def _names(informer: Informer) -> set[str]:
    return {name for _, name in informer.objects}


async def _until(check: Callable[[], bool], *, within: float = 60.0) -> None:
    """Poll ``check`` every 50 ms until it holds (bounded by ``within`` seconds)."""
    for _ in range(int(within / 0.05)):
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"condition not met within {within:.0f} s")


async def test_an_expired_resource_version_relists(
    testbed: plane.Testbed, namespace: str, relay: Relay
) -> None:
    admin, watching = await _client(testbed), await _client(testbed, via=relay)
    informer = Informer(watching, CONFIG_MAPS, namespace=namespace, backoff=FAST)
    try:
        await admin.create(CONFIG_MAPS, _config_map("a"), namespace)
        await informer.start()
        await _until(lambda: "a" in _names(informer))
        assert informer.relists == 1
        seen = informer.resource_version
        await relay.cut()
        await admin.create(CONFIG_MAPS, _config_map("b"), namespace)
        await admin.delete(CONFIG_MAPS, "a", namespace, propagation="Background")
        # NB: a restarted apiserver (etcd compacted meanwhile) no longer has the informer's
        # resourceVersion: the resumed watch gets 410 and the informer lists again.
        await asyncio.to_thread(compact_etcd, testbed)
        await asyncio.to_thread(testbed.restart_apiserver)
        await relay.restore()
        await _until(lambda: informer.relists >= 2 and _names(informer) == {"b", "kube-root-ca.crt"})
        assert informer.relists == 2
        assert informer.resource_version not in (None, seen)
    finally:
        await informer.close()
        await admin.close()
        await watching.close()


async def test_objects_changed_while_unreachable_show_afterwards(
    testbed: plane.Testbed, namespace: str, relay: Relay
) -> None:
    admin, watching = await _client(testbed), await _client(testbed, via=relay)
    retries: list[float] = []
    informer = Informer(
        watching,
        CONFIG_MAPS,
        namespace=namespace,
        backoff=FAST,
        on_retry=lambda _error, delay: retries.append(delay),
    )
    try:
        for name in ("keep", "gone", "changed"):
            await admin.create(CONFIG_MAPS, _config_map(name), namespace)
        await informer.start()
        await _until(lambda: {"keep", "gone", "changed"} <= _names(informer))
        await relay.cut()
        await admin.create(CONFIG_MAPS, _config_map("new"), namespace)
        await admin.delete(CONFIG_MAPS, "gone", namespace, propagation="Background")
        await admin.merge_patch(CONFIG_MAPS, "changed", {"data": {"v": "after"}}, namespace)
        await _until(lambda: len(retries) >= 3)  # down for several failed attempts
        await relay.restore()
        truth = {o["metadata"]["name"] for o in await admin.list(CONFIG_MAPS, namespace)}

        def caught_up() -> bool:
            changed = informer.objects.get((namespace, "changed"))
            return _names(informer) == truth and changed is not None and changed["data"]["v"] == "after"

        await _until(caught_up)
        assert "gone" not in _names(informer)
        assert "new" in _names(informer)
        assert all(0.0 < d <= FAST.maximum for d in retries)
    finally:
        await informer.close()
        await admin.close()
        await watching.close()


async def test_the_watch_survives_an_apiserver_restart(testbed: plane.Testbed, namespace: str) -> None:
    watching = await _client(testbed)
    retries: list[BaseException] = []
    informer = Informer(
        watching,
        CONFIG_MAPS,
        namespace=namespace,
        backoff=FAST,
        on_retry=lambda error, _delay: retries.append(error),
    )
    try:
        admin = await _client(testbed)
        try:
            await admin.create(CONFIG_MAPS, _config_map("before"), namespace)
        finally:
            await admin.close()
        await informer.start()
        await _until(lambda: "before" in _names(informer))
        seen = informer.resource_version
        await asyncio.to_thread(compact_etcd, testbed)
        await asyncio.to_thread(testbed.restart_apiserver, down=1.0)
        admin = await _client(testbed)
        try:
            # The client's view of the same expiry: a typed Gone from the ERROR event.
            with pytest.raises(errors.KubeGone) as expired:
                async for _ in admin.watch(CONFIG_MAPS, namespace, resource_version=seen, timeout_seconds=5):
                    pass
            assert expired.value.status == 410
            await admin.create(CONFIG_MAPS, _config_map("after"), namespace)
            await admin.delete(CONFIG_MAPS, "before", namespace, propagation="Background")
            truth = {o["metadata"]["name"] for o in await admin.list(CONFIG_MAPS, namespace)}
        finally:
            await admin.close()
        await _until(lambda: _names(informer) == truth, within=90.0)
        assert "before" not in _names(informer)
        assert retries, "the restart was not noticed"
        assert informer.relists >= 2  # the restarted apiserver's watch cache starts afresh (410)
    finally:
        await informer.close()
        await watching.close()


async def test_watchers_failing_together_do_not_retry_in_lockstep(
    testbed: plane.Testbed, namespace: str, relay: Relay
) -> None:
    watching = await _client(testbed, via=relay)
    delays: dict[int, list[float]] = {i: [] for i in range(8)}

    def recorder(index: int) -> Callable[[BaseException, float], None]:
        return lambda _error, delay: delays[index].append(delay)

    informers = [
        Informer(
            watching,
            CONFIG_MAPS,
            namespace=namespace,
            backoff=Backoff(initial=0.4, maximum=2.0, jitter=0.5),
            on_retry=recorder(i),
        )
        for i in range(8)
    ]
    try:
        await asyncio.gather(*(informer.start() for informer in informers))
        await relay.cut()
        await _until(lambda: all(len(d) >= 3 for d in delays.values()), within=30.0)
        for attempt in range(3):
            spread = [d[attempt] for d in delays.values()]
            cap = 0.4 * 2**attempt
            assert all(cap / 2 <= d <= cap for d in spread), spread
            # NB: without jitter the delays would be equal; with it, two of eight landing within
            # 0.1 ms of each other (what a rounding to 4 places counted as lockstep) is a 2% chance
            assert len(set(spread)) == len(spread), spread
            assert max(spread) - min(spread) > cap / 10, spread
            assert statistics.pstdev(spread) > cap / 40, spread
        await relay.restore()
        admin = await _client(testbed)
        try:
            await admin.create(CONFIG_MAPS, _config_map("wake"), namespace)
        finally:
            await admin.close()
        # NB: every watcher is back: an event reached each one (and reset its back-off).
        await _until(lambda: all("wake" in _names(i) and i.attempts.failures == 0 for i in informers))
    finally:
        await asyncio.gather(*(informer.close() for informer in informers))
        await watching.close()
