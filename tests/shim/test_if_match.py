"""``If-Match`` on the daemon API's mutations (ADR 0049) over real HTTP, against the testbed.

A shim and (from the race test on) an operator serve a namespace of their own, both with exactly
the chart's RBAC. Until the operator starts nothing writes the objects but the test, so an ETag
changes only when the test changes it; afterwards the workload has no replicas, whose pods would
change the clusters' status. Names differ from the fixtures': the workload ``chat-blue`` (served
name ``assistant``) serves the Recipe ``qwen3-8b-vllm`` (model ``Qwen/Qwen3-8B``), the ModelCache
``weights-blue`` tracks ``Qwen/Qwen3-0.6B`` at the claim ``models-blue``, the namespace is a new one.

Tested, for every operation of the table (``workloads.stop|sleep|wake``, ``cluster.update``,
``cluster.default``, ``model_cache.pin``, ``plugins.sparkrun-k8s.workloads.rollback|apply_drift``,
``plugins.sparkrun-k8s.clusters.apply_drift``) and for job cancel and answer: the ETag read through
the matching query (``plugins.sparkrun-k8s.objects.get``: in the body and the ``ETag`` header;
``workloads.history`` and ``GET /v1/jobs/{id}`` answer the same one) goes stale when the object is
written; the operation with the stale ETag (and with only a weak one) is 412 ``revision_conflict``
with the typed body and creates no job; with the fresh ETag it is accepted and the job carries the
resourceVersion (``spec.ifMatch``), with ``*`` it is accepted and carries none. Also: a malformed
header and If-Match on a query or on ``cluster.default`` with ``name: null`` are 422, an absent
target is the operation's 404, a keyed retry after the target changed answers its job (a replay,
not a 412); ``objects.get`` hides another principal's DaemonJob (404) as ``GET /v1/jobs/{id}``
does, and an admin sees it. The day-two queries ``plugins.sparkrun-k8s.workloads.lease|release``
(the workload checked before the Lease is written) and the job ``clusters.drain`` take it too.

The race: with the operator stopped, a ``cluster.update`` is accepted with the fresh ETag, then
another writer changes the cluster, then the operator runs the job: its write refuses (the job
fails ``revision_conflict`` with the current ETag, the description is not written), while a job
on an untouched cluster succeeds. The executors' other write paths, called on the testbed's
apiserver with a resourceVersion another writer moved past, refuse too: the delete
(``workloads.stop``), the merge patch (``workloads.sleep``) and the JSON patch of
``ops/rollout.py`` (rollback, apply_drift, clusters.apply_drift). A prompt answered with a stale
ETag is 412 and with the fresh one is taken.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparkrun_operator.k8s.client import Kube, connect
from sparkrun_operator.ops import kube as resources
from sparkrun_operator.ops import rollout
from sparkrun_operator.ops.errors import PreconditionFailed
from sparkrun_operator.ops.executors.workloads import lifecycle
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed

P = "plugins.sparkrun-k8s."
WORKLOAD = "chat-blue"
RECIPE = "qwen3-8b-vllm"
CACHE = "weights-blue"
MODEL = "Qwen/Qwen3-0.6B"
MERGE = {"content-type": "application/merge-patch+json"}
_bumps = itertools.count(1)


#: the module's ``daemon`` (tests/shim/conftest.py): the chart's RBAC, and no operator until
#: :func:`_start_operator` starts one (until then nothing but the test writes the objects)
CHART_RBAC = True
EXECUTOR = False


@pytest.fixture(scope="module")
def objects(daemon: Daemon) -> Iterator[dict[str, str]]:
    """The targets: a workload, two clusters (cluster-scoped: removed afterwards), a ModelCache."""
    tag = daemon.namespace.rsplit("-", 1)[-1]
    names = {"cluster": f"blue-{tag}", "other": f"green-{tag}", "untouched": f"gray-{tag}"}
    kube = daemon.kube
    kube.create(
        {
            "apiVersion": API,
            "kind": "InferenceWorkload",
            "metadata": {"name": WORKLOAD, "namespace": daemon.namespace},
            "spec": {
                "recipe": {"name": RECIPE},
                # NB: no pods: their placement would change the clusters' status (GPU occupancy)
                "replicas": 0,
                "manager": "daemon",
                "engine": {"enableSleepMode": True, "servedModelName": "assistant"},
            },
        }
    )
    for key in names.values():
        kube.create(
            {
                "apiVersion": API,
                "kind": "InferenceCluster",
                "metadata": {"name": key},
                "spec": {"nodes": {"names": ["gpu-0"]}},
            }
        )
    kube.create(
        {
            "apiVersion": API,
            "kind": "ModelCache",
            "metadata": {"name": CACHE, "namespace": daemon.namespace},
            "spec": {
                "source": {"huggingFace": {"repo": MODEL, "revision": "main"}},
                "storage": {"claimName": "models-blue"},
            },
        }
    )
    try:
        yield names
    finally:
        for name in names.values():
            kube.delete(API, "InferenceCluster", name)


def _path(daemon: Daemon, kind: str, name: str) -> str:
    namespace = None if kind == "InferenceCluster" else daemon.namespace
    return daemon.kube.resource_path(API, kind, namespace=namespace, name=name)


def bump(daemon: Daemon, kind: str, name: str) -> str:
    """Write the object (an annotation, as any other writer might); its new resourceVersion."""
    patch = {"metadata": {"annotations": {"test.sparkrun.dev/bump": str(next(_bumps))}}}
    written = daemon.kube.request("PATCH", _path(daemon, kind, name), json=patch, headers=MERGE).json()
    return str(written["metadata"]["resourceVersion"])


def etag_of(daemon: Daemon, kind: str, name: str, who: str = "reader") -> str:
    """The ETag through ``objects.get``: the body's and the header's, which must agree."""
    with daemon.http(who) as client:
        answer = client.post(f"/v1/ops/{P}objects.get", json={"kind": kind, "name": name})
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert answer.headers["etag"] == body["etag"]
    assert (body["kind"], body["name"]) == (kind, name)
    assert body["uid"]
    live = daemon.kube.get(
        API, kind, name, namespace=None if kind == "InferenceCluster" else daemon.namespace
    )
    assert live is not None
    assert body["etag"] == f'"{live["metadata"]["resourceVersion"]}"'
    etag: str = body["etag"]
    return etag


def _jobs(daemon: Daemon) -> list[dict[str, Any]]:
    return daemon.kube.list_items(API, "DaemonJob", namespace=daemon.namespace)


def _post(daemon: Daemon, who: str, name: str, arguments: dict[str, Any], **headers: str) -> httpx.Response:
    with daemon.http(who, **headers) as client:
        return client.post(f"/v1/ops/{name}", json=arguments)


#: operation -> (principal, target kind, arguments given the clusters' names)
CASES: dict[str, tuple[str, str, Callable[[dict[str, str]], dict[str, Any]]]] = {
    "workloads.stop": (
        "operator",
        "InferenceWorkload",
        lambda _: {"recipe": RECIPE, "recipe_revision": "r1", "workload_id": WORKLOAD},
    ),
    "workloads.sleep": (
        "operator",
        "InferenceWorkload",
        lambda _: {"recipe": RECIPE, "recipe_revision": "r1", "workload_id": WORKLOAD},
    ),
    "workloads.wake": (
        "operator",
        "InferenceWorkload",
        lambda _: {"recipe": RECIPE, "recipe_revision": "r1", "workload_id": WORKLOAD},
    ),
    "cluster.update": ("admin", "InferenceCluster", lambda n: {"name": n["cluster"], "description": "blue"}),
    "cluster.default": ("admin", "InferenceCluster", lambda n: {"name": n["cluster"]}),
    "model_cache.pin": (
        "operator",
        "ModelCache",
        lambda _: {"model": MODEL, "revision": "main", "cache_dir": "models-blue"},
    ),
    P + "workloads.rollback": ("operator", "InferenceWorkload", lambda _: {"workload": WORKLOAD}),
    P + "workloads.apply_drift": ("operator", "InferenceWorkload", lambda _: {"workload": WORKLOAD}),
    P + "clusters.apply_drift": ("admin", "InferenceCluster", lambda n: {"cluster": n["cluster"]}),
}


def _target(kind: str, names: dict[str, str]) -> str:
    return {"InferenceWorkload": WORKLOAD, "InferenceCluster": names["cluster"], "ModelCache": CACHE}[kind]


@pytest.mark.parametrize("operation", sorted(CASES))
def test_stale_is_412_fresh_and_star_are_accepted(
    daemon: Daemon, objects: dict[str, str], operation: str
) -> None:
    who, kind, arguments_of = CASES[operation]
    arguments = arguments_of(objects)
    name = _target(kind, objects)
    stale = etag_of(daemon, kind, name)
    if kind == "InferenceWorkload":
        with daemon.http("reader") as client:
            history = client.post(f"/v1/ops/{P}workloads.history", json={"workload": WORKLOAD})
        assert history.status_code == 200, history.text
        assert history.headers["etag"] == stale
    fresh = f'"{bump(daemon, kind, name)}"'
    assert fresh != stale
    assert etag_of(daemon, kind, name) == fresh
    before = len(_jobs(daemon))

    for refused_with in (stale, f"W/{fresh}", f"{stale}, W/{fresh}"):
        refused = _post(daemon, who, operation, arguments, **{"If-Match": refused_with})
        assert refused.status_code == 412, refused.text
        body = refused.json()
        assert body["error"] == {
            "type": "revision_conflict",
            "retryable": True,
            "attrs": {"etag": fresh, "if_match": refused_with, "kind": kind, "name": name},
        }
        assert name in body["detail"]
    assert len(_jobs(daemon)) == before  # NB: refused before any job existed

    accepted = _post(daemon, who, operation, arguments, **{"If-Match": f'"0", {fresh}'})
    assert accepted.status_code == 202, accepted.text
    job = daemon.job_object(accepted.json()["job_id"])
    assert job["spec"]["ifMatch"] == fresh.strip('"')
    assert job["spec"]["arguments"] == arguments
    star = _post(daemon, who, operation, arguments, **{"If-Match": "*"})
    assert star.status_code == 202, star.text
    assert "ifMatch" not in daemon.job_object(star.json()["job_id"])["spec"]
    for job_id in (accepted.json()["job_id"], star.json()["job_id"]):
        with daemon.http("admin") as client:  # NB: queued: cancelled at once (no operator yet)
            assert client.delete(f"/v1/jobs/{job_id}").status_code == 200


def test_refusals_before_the_job(daemon: Daemon, objects: dict[str, str]) -> None:
    arguments = {"recipe": RECIPE, "recipe_revision": "r1", "workload_id": WORKLOAD}
    before = len(_jobs(daemon))
    for malformed in ("17", '"1', '*, "1"', '"a b"', '"' + "9" * 200 + '"'):
        answer = _post(daemon, "operator", "workloads.sleep", arguments, **{"If-Match": malformed})
        assert answer.status_code == 422, (malformed, answer.text)
        assert answer.json()["error"]["type"] == "ValueError"
        assert "If-Match" in answer.json()["detail"]
    for query, args in (
        (P + "objects.get", {"kind": "InferenceWorkload", "name": WORKLOAD}),
        ("workloads.list", {}),
    ):
        answer = _post(daemon, "reader", query, args, **{"If-Match": "*"})
        assert answer.status_code == 422, answer.text
        assert query in answer.json()["detail"]
    cleared = _post(daemon, "admin", "cluster.default", {"name": None}, **{"If-Match": "*"})
    assert cleared.status_code == 422, cleared.text
    assert "cluster.default" in cleared.json()["detail"]
    run = _post(daemon, "operator", "workloads.run", {"recipe": RECIPE, "dry_run": True}, **{"If-Match": "*"})
    assert run.status_code == 422, run.text
    absent = _post(
        daemon, "operator", "workloads.sleep", {**arguments, "workload_id": "no-such"}, **{"If-Match": "*"}
    )
    assert absent.status_code == 404, absent.text
    assert absent.json()["error"]["type"] == "LookupError"
    two = _post(
        daemon,
        "operator",
        "model_cache.pin",
        {"model": MODEL, "revision": "v9", "cache_dir": "models-blue"},
        **{"If-Match": "*"},
    )
    assert two.status_code == 422, two.text
    assert "none tracks it" in two.json()["detail"]
    assert len(_jobs(daemon)) == before
    # NB: without If-Match, today's behaviour: the job is made and fails (or not) when it runs
    assert (
        _post(daemon, "operator", "workloads.sleep", {**arguments, "workload_id": "no-such"}).status_code
        == 202
    )


def test_a_keyed_retry_after_the_write_answers_its_job(daemon: Daemon, objects: dict[str, str]) -> None:
    arguments = {"name": objects["other"], "description": "keyed"}
    etag = etag_of(daemon, "InferenceCluster", objects["other"])
    headers = {"If-Match": etag, "Idempotency-Key": "ifmatch-replay"}
    first = _post(daemon, "admin", "cluster.update", arguments, **headers)
    assert first.status_code == 202, first.text
    bump(daemon, "InferenceCluster", objects["other"])  # NB: as the job's own write would
    again = _post(daemon, "admin", "cluster.update", arguments, **headers)
    assert (again.status_code, again.json()["job_id"]) == (202, first.json()["job_id"])
    other = _post(
        daemon, "admin", "cluster.update", arguments, **{**headers, "Idempotency-Key": "ifmatch-new"}
    )
    assert other.status_code == 412, other.text
    with daemon.http("admin") as client:
        assert client.delete(f"/v1/jobs/{first.json()['job_id']}").status_code == 200


def _job_etag(daemon: Daemon, job_id: str, who: str, *, not_: str | None = None) -> str:
    """``GET /v1/jobs/{id}``'s ETag (waiting until it is not ``not_``: the shim's cache follows a
    watch)."""
    deadline = time.monotonic() + 30
    with daemon.http(who) as client:
        while True:
            answer = client.get(f"/v1/jobs/{job_id}")
            assert answer.status_code == 200, answer.text
            etag: str = answer.headers["etag"]
            if etag != not_:
                return etag
            assert time.monotonic() < deadline, f"job {job_id} still at ETag {etag}"
            time.sleep(0.2)


def test_job_cancel_and_the_job_etag(daemon: Daemon, objects: dict[str, str]) -> None:
    arguments = {"recipe": RECIPE, "recipe_revision": "r1", "workload_id": WORKLOAD}
    job_id = daemon.submit("operator", "workloads.sleep", arguments)
    stale = _job_etag(daemon, job_id, "operator")
    assert etag_of(daemon, "DaemonJob", job_id, who="operator") == stale
    bump(daemon, "DaemonJob", job_id)
    fresh = _job_etag(daemon, job_id, "operator", not_=stale)
    with daemon.http("operator") as client:
        refused = client.delete(f"/v1/jobs/{job_id}", headers={"If-Match": stale})
        assert refused.status_code == 412, refused.text
        assert refused.json()["error"]["attrs"] == {
            "etag": fresh,
            "if_match": stale,
            "kind": "DaemonJob",
            "name": job_id,
        }
        assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "queued"
        assert client.delete(f"/v1/jobs/{job_id}", headers={"If-Match": "x"}).status_code == 422
        cancelled = client.delete(f"/v1/jobs/{job_id}", headers={"If-Match": fresh})
        assert cancelled.status_code == 200, cancelled.text
        assert cancelled.json()["state"] == "cancelled"
    # objects.get shows a DaemonJob as GET /v1/jobs/{id} does (ADR 0021): not another principal's
    with daemon.http("reader") as client:
        hidden = client.post(f"/v1/ops/{P}objects.get", json={"kind": "DaemonJob", "name": job_id})
        assert hidden.status_code == 404, hidden.text
        assert hidden.json()["error"]["type"] == "KeyError"
        assert client.get(f"/v1/jobs/{job_id}").status_code == 404
    assert etag_of(daemon, "DaemonJob", job_id, who="admin") == _job_etag(daemon, job_id, "admin")


def test_the_lease_queries_and_the_drain_take_if_match(daemon: Daemon, objects: dict[str, str]) -> None:
    """The day-two operations take If-Match too: the lease claim and release (queries the daemon
    API answers at once: the workload is checked just before the Lease is written) and
    ``clusters.drain`` (a job: its request is written with the precondition)."""
    path = _path(daemon, "InferenceWorkload", WORKLOAD)
    daemon.kube.request("PATCH", path, json={"spec": {"lease": {"ttlSeconds": 3600}}}, headers=MERGE)
    stale = etag_of(daemon, "InferenceWorkload", WORKLOAD)
    fresh = f'"{bump(daemon, "InferenceWorkload", WORKLOAD)}"'
    try:
        for operation in (P + "workloads.lease", P + "workloads.release"):
            refused = _post(daemon, "operator", operation, {"workload": WORKLOAD}, **{"If-Match": stale})
            assert refused.status_code == 412, refused.text
            assert refused.json()["error"]["attrs"] == {
                "etag": fresh,
                "if_match": stale,
                "kind": "InferenceWorkload",
                "name": WORKLOAD,
            }
        assert (
            daemon.kube.get(
                "coordination.k8s.io/v1", "Lease", f"sparkrun-lease-{WORKLOAD}", namespace=daemon.namespace
            )
            is None
        )  # NB: refused before any write
        claimed = _post(
            daemon, "operator", P + "workloads.lease", {"workload": WORKLOAD}, **{"If-Match": fresh}
        )
        assert claimed.status_code == 200, claimed.text
        assert claimed.json()["claimed"] is True, claimed.json()
        released = _post(
            daemon, "operator", P + "workloads.release", {"workload": WORKLOAD}, **{"If-Match": fresh}
        )
        assert (released.status_code, released.json()["released"]) == (200, True), released.text
    finally:
        daemon.kube.request("PATCH", path, json={"spec": {"lease": None}}, headers=MERGE)

    cluster = objects["cluster"]
    stale = etag_of(daemon, "InferenceCluster", cluster)
    fresh = f'"{bump(daemon, "InferenceCluster", cluster)}"'
    arguments = {"cluster": cluster, "wait": False}
    before = len(_jobs(daemon))
    refused = _post(daemon, "admin", P + "clusters.drain", arguments, **{"If-Match": stale})
    assert refused.status_code == 412, refused.text
    assert refused.json()["error"]["type"] == "revision_conflict"
    assert len(_jobs(daemon)) == before
    accepted = _post(daemon, "admin", P + "clusters.drain", arguments, **{"If-Match": fresh})
    assert accepted.status_code == 202, accepted.text
    job_id = accepted.json()["job_id"]
    assert daemon.job_object(job_id)["spec"]["ifMatch"] == fresh.strip('"')
    with daemon.http("admin") as client:  # NB: queued: cancelled at once (no operator yet)
        assert client.delete(f"/v1/jobs/{job_id}").status_code == 200


def _start_operator(daemon: Daemon) -> None:
    """The module's operator, from here on (jobs accepted before it started waited queued)."""
    if not daemon.runner.operator.alive():
        daemon.runner.operator.start()


def _settled(daemon: Daemon, cluster: str) -> str:
    """The cluster's ETag once the operator has written its status for this generation (it
    writes again only when the status changes)."""

    def observed() -> bool:
        found = daemon.kube.get(API, "InferenceCluster", cluster) or {}
        generation = (found.get("metadata") or {}).get("generation")
        return bool(generation) and (found.get("status") or {}).get("observedGeneration") == generation

    daemon.kube.wait(observed, timeout=120, what=f"InferenceCluster {cluster} observed")
    return etag_of(daemon, "InferenceCluster", cluster)


def test_the_job_write_is_conditional(daemon: Daemon, objects: dict[str, str]) -> None:
    cluster, untouched = objects["cluster"], objects["untouched"]
    _start_operator(daemon)
    _settled(daemon, cluster)
    _settled(daemon, untouched)
    daemon.runner.operator.stop(kill=False)  # NB: accepted jobs now wait for the next operator
    checked = {"If-Match": etag_of(daemon, "InferenceCluster", cluster)}
    update = daemon.submit("admin", "cluster.update", {"name": cluster, "description": "lost"}, **checked)
    fresh = {"If-Match": etag_of(daemon, "InferenceCluster", untouched)}
    kept = daemon.submit("admin", "cluster.update", {"name": untouched, "description": "kept"}, **fresh)
    assert daemon.job_object(update)["spec"]["ifMatch"] == checked["If-Match"].strip('"')
    changed = f'"{bump(daemon, "InferenceCluster", cluster)}"'  # NB: after the check, before the job
    _start_operator(daemon)

    lost = daemon.wait_job(update, "admin", timeout=120)
    assert lost["state"] == "failed", lost
    error = lost["error"]["error"]
    assert (error["type"], error["retryable"]) == ("revision_conflict", True)
    assert error["attrs"]["if_match"] == checked["If-Match"]
    assert (error["attrs"]["kind"], error["attrs"]["name"]) == ("InferenceCluster", cluster)
    # NB: the other writer's version, or a later one (the restarted operator may write its status)
    assert error["attrs"]["etag"] in {changed, etag_of(daemon, "InferenceCluster", cluster)}
    assert (daemon.kube.get(API, "InferenceCluster", cluster) or {})["spec"].get("description") is None

    done = daemon.wait_job(kept, "admin", timeout=120)
    assert done["state"] == "succeeded", done["error"]
    assert (daemon.kube.get(API, "InferenceCluster", untouched) or {})["spec"]["description"] == "kept"


async def _executor_writes_refused(
    kubeconfig: Path, namespace: str, cluster: str
) -> list[PreconditionFailed]:
    """The executors' other write paths, each given a resourceVersion another writer moved past:
    a delete (``workloads.stop``), a merge patch (``workloads.sleep``) and a JSON patch
    (``ops/rollout.py``: ``clusters.apply_drift``, ``workloads.rollback``, ``.apply_drift``)."""
    rest = Kube(await connect(kubeconfig=str(kubeconfig)), field_manager="tests")
    refused: list[PreconditionFailed] = []
    try:
        merge = {"metadata": {"labels": {"test.sparkrun.dev/writer": "other"}}}
        workload = await rest.get(resources.WORKLOADS, WORKLOAD, namespace)
        assert workload is not None
        stale = str(workload["metadata"]["resourceVersion"])
        await rest.merge_patch(resources.WORKLOADS, WORKLOAD, merge, namespace)
        revision = ((workload.get("status") or {}).get("recipeRevision")) or ""
        args = {"recipe": RECIPE, "recipe_revision": revision, "workload_id": WORKLOAD}
        ctx = OperationContext(
            rest=rest, settings=Settings(namespace=namespace), principal="t", if_match=stale
        )
        for executor in (lifecycle.stop, lifecycle.sleep):
            with pytest.raises(PreconditionFailed) as caught:
                await executor(ctx, dict(args))
            refused.append(caught.value)
        after = await rest.get(resources.WORKLOADS, WORKLOAD, namespace)
        assert after is not None
        assert (after.get("spec") or {}).get("state") != "Sleeping"

        read = await rest.get(resources.CLUSTERS, cluster)
        assert read is not None
        await rest.merge_patch(resources.CLUSTERS, cluster, merge)
        with pytest.raises(PreconditionFailed) as caught:
            await rollout.write_spec(
                rest,
                resources.CLUSTERS,
                read,
                sets={"/description": "x"},
                if_match=read["metadata"]["resourceVersion"],
            )
        refused.append(caught.value)
        unchanged = await rest.get(resources.CLUSTERS, cluster)
        assert unchanged is not None
        assert unchanged["spec"].get("description") != "x"
        return refused
    finally:
        await rest.close()


def test_every_write_path_is_conditional(testbed: Testbed, daemon: Daemon, objects: dict[str, str]) -> None:
    refused = asyncio.run(_executor_writes_refused(testbed.kubeconfig, daemon.namespace, objects["other"]))
    assert [(r.status, r.error_type, r.attrs["kind"]) for r in refused] == [
        (412, "revision_conflict", "InferenceWorkload"),
        (412, "revision_conflict", "InferenceWorkload"),
        (412, "revision_conflict", "InferenceCluster"),
    ]
    for error in refused:
        assert error.attrs["etag"] != error.attrs["if_match"]
    assert daemon.kube.get(API, "InferenceWorkload", WORKLOAD, namespace=daemon.namespace) is not None


def test_a_prompt_answer_takes_if_match(daemon: Daemon) -> None:
    _start_operator(daemon)
    job_id = daemon.submit(
        "operator", "workloads.run", {"recipe": RECIPE, "confirm": True, "workload_id_override": "ask-blue"}
    )
    job = daemon.wait_job(job_id, "operator", timeout=120, states={"waiting_input", "failed", "succeeded"})
    assert job["state"] == "waiting_input", job
    prompt_id = job["prompt"]["prompt_id"]
    stale = _job_etag(daemon, job_id, "operator")
    bump(daemon, "DaemonJob", job_id)
    fresh = _job_etag(daemon, job_id, "operator", not_=stale)
    answer = {"prompt_id": prompt_id, "value": False}
    with daemon.http("operator") as client:
        refused = client.post(f"/v1/jobs/{job_id}/input", json=answer, headers={"If-Match": stale})
        assert refused.status_code == 412, refused.text
        assert refused.json()["error"]["type"] == "revision_conflict"
        assert not daemon.job_object(job_id)["spec"].get("answers")
        taken = client.post(f"/v1/jobs/{job_id}/input", json=answer, headers={"If-Match": fresh})
        assert taken.status_code == 200, taken.text
    denied = daemon.wait_job(job_id, "operator", timeout=120)
    assert denied["state"] in {"failed", "cancelled"}, denied
    assert daemon.kube.get(API, "InferenceWorkload", "ask-blue", namespace=daemon.namespace) is None
