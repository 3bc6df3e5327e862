"""Cursor paging of the daemon API's lists on the testbed (ADR 0049, docs/daemon-api.md "Cursors").

Against the real shim (``sparkrun-k8s shim serve``, no operator, so seeded jobs stay queued) and
the testbed's kube-apiserver:

- Without ``cursor``/``limit`` every answer is today's: ``/v1/jobs`` keeps its ``limit`` (default
  200, active then queued, newest first), a list operation answers its whole result, an unknown
  query parameter changes nothing, and no paging header is sent.
- Paging while writing: ``/v1/jobs``, ``workloads.list`` and ``catalog.search`` are walked page
  by page while another thread creates and deletes objects (DaemonJobs of the walker and of
  another principal, InferenceWorkloads, Recipes); the walker waits for at least one write
  between pages. Every object present for the whole walk is seen exactly once, nothing twice,
  and never another principal's job.
- Visibility is applied before the page is cut: a reader's pages are full of jobs it may see.
- Tampered, foreign and over-long cursors are a typed 422, never a 500.
"""

from __future__ import annotations

import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest
import yaml

from sparkrun_operator.ops import jobs
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import API, REPO, Daemon, start_daemon, stop_daemon

PAGE_HEADERS = ("x-next-cursor", "link")
#: The most pages one walk may take, and how long a walk may wait for the writer.
MAX_PAGES = 200
WRITE_WAIT = 30.0


@pytest.fixture(scope="module")
def shim(
    testbed: Testbed, crds: list[str], kube: KubeApi, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Daemon]:
    running = start_daemon(testbed, kube, tmp_path_factory.mktemp("paging"), executor=False, plaintext=True)
    yield running
    stop_daemon(running)


def _job(daemon: Daemon, who: str, key: str, operation: str = "workloads.run") -> dict[str, Any]:
    """A queued keyed DaemonJob of principal ``who`` (created directly, as the shim would)."""
    username = daemon.env.username(who)
    arguments: dict[str, Any] = (
        {"recipe": "qwen3-8b-vllm", "dry_run": True} if operation == "workloads.run" else {}
    )
    return jobs.new_job(
        name=jobs.job_name(username, key),
        namespace=daemon.namespace,
        operation=operation,
        version=1,
        arguments=arguments,
        username=username,
        uid=None,
        groups=[],
        manager="daemon",
        client=None,
        key=key,
        digest=jobs.request_digest(operation, 1, arguments, "daemon"),
    )


def _workload(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "model": {"name": "org/small"},
            "topology": {"nodes": 1, "gpusPerNode": 1},
            "state": "Stopped",
        },
    }


def _recipe(namespace: str, name: str) -> dict[str, Any]:
    recipe: dict[str, Any] = yaml.safe_load((REPO / "examples" / "recipe.yaml").read_text())
    recipe["metadata"] = {"name": name, "namespace": namespace}
    return recipe


def _settle(probe: Callable[[], bool], what: str, seconds: float = 60) -> None:
    deadline = time.monotonic() + seconds
    while not probe():
        assert time.monotonic() < deadline, f"the shim never showed {what}"
        time.sleep(0.2)


def _no_paging_headers(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text
    for name in PAGE_HEADERS:
        assert name not in answer.headers, f"{name} on an answer without cursor/limit"


def _refused(answer: httpx.Response, reason: str) -> None:
    assert answer.status_code == 422, answer.text
    body = answer.json()
    assert body["error"]["type"] == "ValueError", body
    assert body["error"]["attrs"]["reason"] == reason, body


# -- today's answers without cursor/limit --------------------------------------------------------


def test_without_cursor_or_limit_the_answers_are_todays(shim: Daemon) -> None:
    for i in range(205):
        shim.kube.create(_job(shim, "operator", f"today-{i}"))
    with shim.http("operator") as client:
        _settle(lambda: len(client.get("/v1/jobs", params={"limit": 1000}).json()) >= 205, "205 jobs")
        plain = client.get("/v1/jobs")
        _no_paging_headers(plain)
        rows = plain.json()
        assert len(rows) == 200, "the default limit is 200"
        assert plain.content == json.dumps(rows, separators=(",", ":")).encode()
        created = [row["created"] for row in rows]
        assert created == sorted(created, reverse=True), "newest first"
        same = client.get("/v1/jobs", params={"unknown": "1"})
        _no_paging_headers(same)
        assert same.content == plain.content
        few = client.get("/v1/jobs", params={"limit": 5})
        _no_paging_headers(few)
        assert few.json() == rows[:5], "limit alone keeps today's meaning"
        assert client.get("/v1/jobs", params={"limit": "abc"}).json()["detail"][0]["type"] == "int_parsing"
    for i in range(3):
        shim.kube.create(_workload(shim.namespace, f"today-{i}"))
    with shim.http("reader") as client:
        _settle(lambda: len(client.post("/v1/workloads/list", json={}).json()) >= 3, "3 workloads")
        listed = client.post("/v1/workloads/list", json={})
        _no_paging_headers(listed)
        assert listed.content == json.dumps(listed.json(), separators=(",", ":")).encode()
        for path, params in (("/v1/ops/workloads.list", {}), ("/v1/workloads/list", {"unknown": "1"})):
            again = client.post(path, params=params, json={})
            _no_paging_headers(again)
            assert again.content == listed.content
        paged = client.post("/v1/workloads/list", params={"limit": 200}, json={})
        assert paged.status_code == 200
        assert "x-next-cursor" not in paged.headers, "one page holds them all"
        assert sorted(map(json.dumps, paged.json())) == sorted(map(json.dumps, listed.json()))


# -- paging while writing ------------------------------------------------------------------------


@dataclass
class Writer:
    """Creates and deletes objects in a thread until stopped; counts its writes."""

    create: Callable[[KubeApi, int], str]
    delete: Callable[[KubeApi, str], None]
    doomed: list[str]
    writes: int = 0
    created: set[str] = field(default_factory=set)
    deleted: set[str] = field(default_factory=set)
    error: BaseException | None = None
    stop: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, testbed: Testbed) -> None:
        try:
            with testbed.api() as kube:
                for n in range(100_000):
                    if self.stop.is_set():
                        return
                    name = self.create(kube, n)
                    with self.lock:
                        self.created.add(name)
                    gone = self.doomed.pop() if self.doomed and n % 2 == 0 else None
                    if gone is not None:
                        with self.lock:
                            self.deleted.add(gone)
                        self.delete(kube, gone)
                    with self.lock:
                        self.writes += 1
                    time.sleep(0.05)
        except BaseException as error:  # surfaced by the walker
            self.error = error

    def wait_for_more(self, than: int) -> int:
        """Block until the writer made a write after ``than`` writes (the walk's interleaving)."""
        deadline = time.monotonic() + WRITE_WAIT
        while True:
            assert self.error is None, f"the writer failed: {self.error!r}"
            with self.lock:
                if self.writes > than:
                    return self.writes
            assert time.monotonic() < deadline, "the writer made no progress"
            time.sleep(0.02)


def _walk(
    fetch: Callable[[dict[str, str]], httpx.Response], ident: Callable[[Any], str], writer: Writer, limit: int
) -> list[str]:
    """Every id the pages return, in order, following X-Next-Cursor (and checking Link)."""
    seen: list[str] = []
    cursor = ""
    writes = 0
    for _ in range(MAX_PAGES):
        answer = fetch({"cursor": cursor, "limit": str(limit)})
        assert answer.status_code == 200, answer.text
        rows = answer.json()
        seen += [ident(row) for row in rows]
        nxt = answer.headers.get("x-next-cursor")
        if nxt is None:
            assert "link" not in answer.headers
            return seen
        assert len(rows) == limit, "a page before the last is full"
        link = answer.headers["link"]
        assert link.endswith('>; rel="next"'), link
        target = httpx.URL(urljoin(str(answer.request.url), link[1 : link.index(">")]))
        assert target.params["cursor"] == nxt
        assert target.path == answer.request.url.path
        cursor = nxt
        writes = writer.wait_for_more(writes)
    raise AssertionError(f"no last page after {MAX_PAGES} pages")


def _walk_while_writing(
    testbed: Testbed,
    writer: Writer,
    initial: set[str],
    fetch: Callable[[dict[str, str]], httpx.Response],
    ident: Callable[[Any], str],
    limit: int,
) -> list[str]:
    thread = threading.Thread(target=writer.run, args=(testbed,), daemon=True)
    thread.start()
    try:
        seen = _walk(fetch, ident, writer, limit)
    finally:
        writer.stop.set()
        thread.join(timeout=60)
    assert not thread.is_alive(), "the writer did not stop"
    assert writer.error is None, f"the writer failed: {writer.error!r}"
    assert writer.writes >= 3, "too few writes during the walk to mean anything"
    assert len(seen) == len(set(seen)), f"seen twice: {sorted({s for s in seen if seen.count(s) > 1})}"
    lasting = initial - writer.deleted
    assert lasting <= set(seen), f"present throughout, never seen: {sorted(lasting - set(seen))}"
    assert set(seen) <= initial | writer.created, "a page showed an object nobody made"
    return seen


def test_jobs_pages_while_writing(shim: Daemon, testbed: Testbed) -> None:
    ns = shim.namespace
    mine = {shim.kube.create(_job(shim, "operator", f"walk-{i}"))["metadata"]["name"] for i in range(40)}
    theirs = {shim.kube.create(_job(shim, "automation", f"walk-{i}"))["metadata"]["name"] for i in range(10)}
    with shim.http("admin") as admin:
        _settle(
            lambda: (
                (mine | theirs) <= {r["id"] for r in admin.get("/v1/jobs", params={"limit": 1000}).json()}
            ),
            "the jobs",
        )
    with shim.http("operator") as client:
        initial = {row["id"] for row in client.get("/v1/jobs", params={"limit": 1000}).json()}
    assert mine <= initial
    assert not initial & theirs

    def create(kube: KubeApi, n: int) -> str:
        kube.create(_job(shim, "automation", f"during-{n}"))  # another principal's: never shown
        created: str = kube.create(_job(shim, "operator", f"during-{n}"))["metadata"]["name"]
        return created

    def delete(kube: KubeApi, name: str) -> None:
        kube.delete(API, "DaemonJob", name, namespace=ns)

    writer = Writer(create, delete, doomed=sorted(mine)[::3])
    with shim.http("operator") as client:
        seen = _walk_while_writing(
            testbed, writer, initial, lambda p: client.get("/v1/jobs", params=p), lambda row: row["id"], 7
        )
    assert not set(seen) & theirs, "a page showed another principal's job"


def test_workloads_list_pages_while_writing(shim: Daemon, testbed: Testbed) -> None:
    ns = shim.namespace
    made = {shim.kube.create(_workload(ns, f"walk-{i}"))["metadata"]["name"] for i in range(30)}
    with shim.http("reader") as client:
        _settle(
            lambda: (
                made <= {r["metadata"]["name"] for r in client.post("/v1/workloads/list", json={}).json()}
            ),
            "the workloads",
        )
        initial = {r["metadata"]["name"] for r in client.post("/v1/workloads/list", json={}).json()}

    def create(kube: KubeApi, n: int) -> str:
        name = f"during-{n}-{secrets.token_hex(2)}"
        kube.create(_workload(ns, name))
        return name

    def delete(kube: KubeApi, name: str) -> None:
        kube.delete(API, "InferenceWorkload", name, namespace=ns)

    writer = Writer(create, delete, doomed=sorted(made)[::4])
    with shim.http("reader") as client:
        _walk_while_writing(
            testbed,
            writer,
            initial,
            lambda p: client.post("/v1/workloads/list", params=p, json={}),
            lambda row: row["metadata"]["name"],
            4,
        )


def test_catalog_search_pages_while_writing(shim: Daemon, testbed: Testbed) -> None:
    ns = shim.namespace
    made = {
        shim.kube.create(_recipe(ns, f"walk-{secrets.token_hex(3)}"))["metadata"]["name"] for _ in range(30)
    }
    with shim.http("reader") as client:
        _settle(
            lambda: made <= {r["name"] for r in client.post("/v1/catalog/search", json={}).json()},
            "the recipes",
        )
        initial = {r["name"] for r in client.post("/v1/catalog/search", json={}).json()}

    def create(kube: KubeApi, n: int) -> str:
        name = f"during-{secrets.token_hex(3)}"  # lands anywhere in the name order
        kube.create(_recipe(ns, name))
        return name

    def delete(kube: KubeApi, name: str) -> None:
        kube.delete(API, "Recipe", name, namespace=ns)

    writer = Writer(create, delete, doomed=sorted(made)[::4])
    with shim.http("reader") as client:
        _walk_while_writing(
            testbed,
            writer,
            initial,
            lambda p: client.post("/v1/ops/catalog.search", params=p, json={}),
            lambda row: row["name"],
            4,
        )


# -- visibility and hostile cursors ----------------------------------------------------------------


def test_pages_apply_visibility_before_the_cut(shim: Daemon) -> None:
    visible = {
        shim.kube.create(_job(shim, "reader", f"seen-{i}", "diagnostics.collect"))["metadata"]["name"]
        for i in range(7)
    }
    hidden = {shim.kube.create(_job(shim, "reader", f"hidden-{i}"))["metadata"]["name"] for i in range(7)}
    with shim.http("admin") as admin:
        _settle(
            lambda: (
                (visible | hidden) <= {r["id"] for r in admin.get("/v1/jobs", params={"limit": 1000}).json()}
            ),
            "the jobs",
        )
    with shim.http("reader") as client:
        pages: list[list[str]] = []
        cursor = ""
        for _ in range(MAX_PAGES):
            answer = client.get("/v1/jobs", params={"cursor": cursor, "limit": 3})
            assert answer.status_code == 200, answer.text
            pages.append([row["id"] for row in answer.json()])
            if "x-next-cursor" not in answer.headers:
                break
            cursor = answer.headers["x-next-cursor"]
    assert [len(p) for p in pages] == [3, 3, 1], pages
    assert {i for p in pages for i in p} == visible


def test_tampered_foreign_and_long_cursors_are_a_422(shim: Daemon) -> None:
    with shim.http("operator") as client:
        for i in range(3):
            shim.kube.create(_job(shim, "operator", f"hostile-{i}"))
        _settle(lambda: len(client.get("/v1/jobs").json()) >= 3, "3 jobs")
        first = client.get("/v1/jobs", params={"cursor": "", "limit": 1})
        token = first.headers["x-next-cursor"]
        _refused(client.get("/v1/jobs", params={"cursor": token, "state": "running"}), "cursor_mismatch")
        flipped = token[:-4] + ("A" if token[-4] != "A" else "B") + token[-3:]
        answer = client.get("/v1/jobs", params={"cursor": flipped})
        assert answer.status_code == 422, answer.text
        _refused(client.get("/v1/jobs", params={"cursor": "x" * 5000}), "cursor_too_long")
        _refused(client.get("/v1/jobs", params={"cursor": "%%%"}), "cursor_malformed")
        _refused(client.post("/v1/workloads/list", params={"cursor": token}, json={}), "cursor_mismatch")
        assert (
            client.get("/v1/jobs", params={"cursor": "", "limit": "x"}).json()["detail"][0]["type"]
            == "int_parsing"
        )
    with shim.http("automation") as other:
        _refused(other.get("/v1/jobs", params={"cursor": token}), "cursor_mismatch")
    for i in range(3):
        shim.kube.create(_workload(shim.namespace, f"hostile-{i}"))
    with shim.http("reader") as client:
        _settle(lambda: len(client.post("/v1/workloads/list", json={}).json()) >= 3, "3 workloads")
        page = client.post("/v1/workloads/list", params={"limit": 1}, json={})
        token = page.headers["x-next-cursor"]
        assert len(page.json()) == 1
        _refused(
            client.post("/v1/workloads/list", params={"cursor": token}, json={"limit": 2}), "cursor_mismatch"
        )
        _refused(client.post("/v1/catalog/search", params={"cursor": token}, json={}), "cursor_mismatch")
        bad = client.post("/v1/workloads/list", params={"limit": "many"}, json={})
        _refused(bad, "limit_malformed")
        follow = client.post("/v1/ops/workloads.list", params={"cursor": token, "limit": 1}, json={})
        assert follow.status_code == 200, "a cursor of an alias serves the operation's own route"
