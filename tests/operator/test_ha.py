"""Two operator replicas with kopf peering: exactly one works, the other takes over when it dies.

Also checked: the liveness endpoint answers on both replicas and the Prometheus endpoint counts
the active replica's API writes (and none of the paused one's).

The overlap (ADR 0026): two replicas started at the same instant both work until each has seen
the other's keep-alive, and a replica of higher priority started while another works takes
over from it mid-flight. Both while 30 workloads converge; afterwards every workload has
exactly its one JobSet and one Service, a consistent status that stays put, and neither the
apiserver nor either replica saw a conflict or an error. The overlap is measured from each
replica's write counter and printed.

Whose conflict: the apiserver counts requests by group, resource, subresource, verb and code,
not by client. A 409 is the operator's only on what nothing else in the test writes (its
workloads, their JobSets and Services). Events are posted by every component (kube-scheduler,
kube-controller-manager, the JobSet controller, KWOK, the process runtime; client-go's recorders
name their Events ``<object>.<time>`` and answer a create that finds its name taken, a retried
create that had succeeded or an event series' create racing its first, with a 409 they ignore),
so a 409 on ``POST events`` says nothing about the replicas. Theirs are checked on their side:
kopf posts every Event with ``generateName`` (the apiserver picks a free name, so two replicas
posting the same Event make two Events, never a 409), and logs any refused post
("Failed to post an event"), which fails the test.
"""

from __future__ import annotations

import contextlib
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.topology import NodePool, Topology
from tests.operator.conftest import API, OperatorProcess, condition, jobsets, wait_condition, workload

Factory = Callable[..., OperatorProcess]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _writes(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^sparkrun_operator_api_writes_total\{[^}]*\} (\S+)$", text, re.M)
    )


def _replica(
    factory: Factory, namespace: str, *, priority: int, extra: tuple[str, ...] = ()
) -> tuple[OperatorProcess, int, int]:
    metrics, live = _free_port(), _free_port()
    proc = factory(
        namespace,
        "--priority",
        str(priority),
        "--peering-lifetime",
        "8",
        *extra,
        "--metrics-port",
        str(metrics),
        "--metrics-host",
        "127.0.0.1",
        "--liveness",
        f"http://127.0.0.1:{live}/healthz",
        standalone=False,
    )
    return proc, metrics, live


def _wait_http(url: str, timeout: float = 30) -> httpx.Response:
    deadline = time.monotonic() + timeout
    while True:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200:
                return response
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} did not answer 200 within {timeout} s")
        time.sleep(0.2)


def _wait_log(proc: OperatorProcess, text: str, timeout: float = 90) -> None:
    # NB: generous: on a freshly started apiserver kopf's first lists are refused for a while.
    deadline = time.monotonic() + timeout
    while text not in proc.output():
        assert time.monotonic() < deadline, f"{text!r} never logged:\n{proc.output()[-3000:]}"
        time.sleep(0.2)


def test_one_active_replica_and_takeover(
    kube: KubeApi, namespace: str, operator_factory: Factory, peering_crds: None
) -> None:
    # The active replica first, as after any rollout: replicas starting at the same instant may
    # both run for a moment until each has seen the other's keep-alive (kopf peering).
    active, active_metrics, active_live = _replica(operator_factory, namespace, priority=200)
    _wait_http(f"http://127.0.0.1:{active_live}/healthz")
    _wait_log(active, "Resuming operations")
    standby, standby_metrics, standby_live = _replica(operator_factory, namespace, priority=100)
    _wait_http(f"http://127.0.0.1:{standby_live}/healthz")

    # both replicas keep their keep-alives in the namespace's peering object
    def peers() -> int | None:
        obj = kube.get("kopf.dev/v1", "KopfPeering", "sparkrun-operator", namespace=namespace) or {}
        alive = [p for p in (obj.get("status") or {}).values() if isinstance(p, dict)]
        return len(alive) if len(alive) == 2 else None

    kube.wait(peers, timeout=90, what="both replicas in the peering object")
    # NB: a replica starts paused and logs only when it resumes, so the log proves who works.
    time.sleep(2)
    assert "Resuming operations" not in standby.output()

    # NB: both replicas may have written once before kopf started: creating the peering object.
    active_before, standby_before = _writes(active_metrics), _writes(standby_metrics)
    kube.apply(workload("qwen", namespace))
    wait_condition(kube, namespace, "qwen", "Ready", timeout=90)
    assert _writes(active_metrics) > active_before
    assert _writes(standby_metrics) == standby_before

    active.kill()
    kube.request(
        "PATCH",
        kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="qwen"),
        json={"spec": {"replicas": 2}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    wait_condition(
        kube, namespace, "qwen", "Ready", timeout=120, extra=lambda o: o["status"]["readyReplicas"] == 2
    )
    assert _writes(standby_metrics) > standby_before
    assert "Resuming operations after the pause" in standby.output()


# -- the overlap: two replicas working at once (ADR 0026) ------------------------------------

HA_LABEL = "sparkrun.dev/test-ha"
HA_TAINT = {"key": HA_LABEL, "value": "ha", "effect": "NoSchedule"}
HA_WORKLOADS = 30
#: What the operator writes and nothing else in these tests does (group, resource, subresource),
#: besides the peering object and Events (see the module docs).
OPERATOR_WRITES = frozenset(
    {
        ("sparkrun.dev", "inferenceworkloads", ""),
        ("sparkrun.dev", "inferenceworkloads", "status"),
        ("jobset.x-k8s.io", "jobsets", ""),
        ("", "services", ""),
    }
)
#: kopf's ``settings.posting``: the component its Events name, and the prefix of their names.
KOPF_COMPONENT, KOPF_EVENT_PREFIX = "kopf", "kopf-event-"
Counts = dict[tuple[str, str, str, str, str], float]
#: No drift pass during the test: a stale status must be repaired by events, not by the timer.
NO_DRIFT = ("--drift-seconds", "3600")


@pytest.fixture
def ha_nodes(testbed: plane.Testbed, kube: KubeApi) -> Iterator[dict[str, Any]]:
    """Four tainted KWOK nodes of 8 GPUs for this test's workloads alone (the capacity other
    tests see is unchanged; deleted afterwards); the ``scheduling`` that lands pods there."""
    pool = NodePool(prefix="ha", count=4, gpus=8, taints=(HA_TAINT,), labels={HA_LABEL: "ha"})
    testbed.create_nodes(Topology(pools=(pool,)))
    yield {"tolerations": [{**HA_TAINT, "operator": "Equal"}], "nodeSelector": {HA_LABEL: "ha"}}
    for name in pool.node_names():
        kube.delete("v1", "Node", name)


class WriteTimeline:
    """Samples each replica's ``sparkrun_operator_api_writes_total`` every 0.1 s, to tell when
    each replica wrote (and so for how long both did); times are wall-clock, as in the logs."""

    def __init__(self, ports: dict[str, int]) -> None:
        self.ports = ports
        self.samples: dict[str, list[tuple[float, float]]] = {name: [] for name in ports}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            for name, port in list(self.ports.items()):
                with contextlib.suppress(httpx.HTTPError):
                    self.samples.setdefault(name, []).append((time.time(), _writes(port)))
            self._stop.wait(0.1)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def writing(self, name: str) -> tuple[float, float] | None:
        """The first and last moment ``name``'s write counter grew (``None``: never)."""
        samples = self.samples[name]
        grew = [t for (t, value), (_, before) in zip(samples[1:], samples, strict=False) if value > before]
        return (grew[0], grew[-1]) if grew else None

    def overlap(self, first: str, second: str) -> float:
        """Seconds during which both replicas wrote (0 when their writing spells do not meet)."""
        a, b = self.writing(first), self.writing(second)
        if a is None or b is None:
            return 0.0
        return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def _apiserver_counts(kube: KubeApi) -> Counts:
    """Write requests the apiserver answered, by HTTP code, group, resource, subresource and verb
    (``apiserver_request_total``; it does not say whose)."""
    counts: Counts = {}
    text = kube.request("GET", "/metrics").text
    for labels, value in re.findall(r"^apiserver_request_total\{([^}]*)\} (\S+)$", text, re.M):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields.get("verb") in ("POST", "PUT", "PATCH", "APPLY", "DELETE", "CREATE", "UPDATE"):
            key = (
                fields["code"],
                fields.get("group", ""),
                fields.get("resource", ""),
                fields.get("subresource", ""),
                fields["verb"],
            )
            counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def _operator_conflicts(grown: Counts) -> Counts:
    """The 409s on what only the operator writes (see the module docs)."""
    return {key: n for key, n in grown.items() if key[0] == "409" and key[1:4] in OPERATOR_WRITES and n}


def test_a_conflict_counts_only_on_what_the_operator_writes(
    kube: KubeApi, namespace: str, crds: list[str]
) -> None:
    """The check of the overlap tests, forced: another client's 409 on an Event (client-go's
    recorder creating an Event under a name that exists: a retried create that had succeeded, or
    an event series' create racing its first) is not the operator's; a 409 on a workload's status
    is. Before the counts were keyed by group, the first counted as the operator's conflict (a
    CI run failed the takeover test on ``('409', 'events', '', 'POST'): 3.0``)."""
    before = _apiserver_counts(kube)
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "c.18ee825eb1e5e072", "namespace": namespace},
        "involvedObject": {
            "apiVersion": API,
            "kind": "InferenceWorkload",
            "name": "c",
            "namespace": namespace,
        },
        "reason": "Test",
        "message": "posted twice under one name",
        "type": "Normal",
        "source": {"component": "test"},
    }
    kube.create(event)
    with pytest.raises(ApiError) as refused:
        kube.create(event)
    assert refused.value.status == 409
    kube.apply(workload("c", namespace))
    stale = (kube.get(API, "InferenceWorkload", "c", namespace=namespace) or {})["metadata"][
        "resourceVersion"
    ]
    kube.apply(workload("c", namespace, replicas=2))
    with pytest.raises(ApiError) as conflict:
        kube.request(
            "PATCH",
            kube.resource_path(API, "InferenceWorkload", namespace=namespace, name="c") + "/status",
            json={"metadata": {"resourceVersion": stale}, "status": {"observedGeneration": 1}},
            headers={"Content-Type": "application/merge-patch+json"},
        )
    assert conflict.value.status == 409
    grown = {key: value - before.get(key, 0.0) for key, value in _apiserver_counts(kube).items()}
    assert grown.get(("409", "", "events", "", "POST"), 0.0) >= 1.0, "the apiserver counted the Event's 409"
    assert _operator_conflicts(grown) == {
        ("409", "sparkrun.dev", "inferenceworkloads", "status", "PATCH"): 1.0
    }


def _errors(port: int) -> float:
    text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
    return sum(
        float(m.group(1))
        for m in re.finditer(r"^sparkrun_operator_reconcile_errors_total\{[^}]*\} (\S+)$", text, re.M)
    )


def _create_workloads(kube: KubeApi, namespace: str, names: list[str], scheduling: dict[str, Any]) -> None:
    for name in names:
        kube.apply(workload(name, namespace, scheduling=scheduling))


def _all_consistent(kube: KubeApi, namespace: str, names: list[str]) -> dict[str, dict[str, Any]] | None:
    """Every workload Ready with one ready replica and a status of its current generation."""
    items = {o["metadata"]["name"]: o for o in kube.list_items(API, "InferenceWorkload", namespace=namespace)}
    for name in names:
        obj = items.get(name)
        status = (obj or {}).get("status") or {}
        ready = condition(obj, "Ready")
        if (
            obj is None
            or ready is None
            or ready.get("status") != "True"
            or status.get("readyReplicas") != 1
            or status.get("observedGeneration") != obj["metadata"].get("generation")
        ):
            return None
    return items


def _check_children(kube: KubeApi, namespace: str, items: dict[str, dict[str, Any]]) -> None:
    """Exactly the one JobSet (named after the current revision) and one Service per workload."""
    services = kube.list_items("v1", "Service", namespace=namespace)
    for name, obj in items.items():
        revision = obj["status"]["revision"][:5]
        assert [js["metadata"]["name"] for js in jobsets(kube, namespace, name)] == [f"{name}-0-{revision}"]
        owned = [
            s["metadata"]["name"]
            for s in services
            if any(
                ref.get("uid") == obj["metadata"]["uid"] for ref in s["metadata"].get("ownerReferences", [])
            )
        ]
        assert owned == [name], f"{name}: Services {owned}"
        for cond in obj["status"]["conditions"]:
            assert (
                cond.get("observedGeneration", obj["metadata"]["generation"]) == obj["metadata"]["generation"]
            )


def _settled(kube: KubeApi, namespace: str, names: list[str], *, seconds: float = 4.0) -> None:
    """No status write for ``seconds`` after convergence: the replicas do not undo each other."""
    before = {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in kube.list_items(API, "InferenceWorkload", namespace=namespace)
    }
    time.sleep(seconds)
    after = {
        o["metadata"]["name"]: o["metadata"]["resourceVersion"]
        for o in kube.list_items(API, "InferenceWorkload", namespace=namespace)
    }
    changed = sorted(name for name in names if before.get(name) != after.get(name))
    assert not changed, f"status still changing after convergence: {changed}"


#: kopf 1.45.2's watch request registers a done-callback on its stopper that calls
#: ``asyncio.current_task()``; a callback runs outside any task, so when a replica is paused while
#: a watch request still waits for its headers, asyncio logs that callback's AssertionError (the
#: request then completes and the stream stops at its next check: nothing is lost). Not ours.
#: asyncio names the callback ``stream.<locals>.request_cancel_callback(...)``, uvloop (the
#: operator's loop, ADR 0032) ``<function stream.<locals>.request_cancel_callback at 0x...>``.
KOPF_CANCEL_CALLBACK = re.compile(
    r"Exception in callback <?(?:function )?stream\.<locals>\.request_cancel_callback\b"
)


def _without_kopf_cancel_callback(lines: list[str]) -> list[str]:
    """The log without the record of :data:`KOPF_CANCEL_CALLBACK` (its line and its traceback,
    up to the next timestamped record)."""
    out: list[str] = []
    skipping = False
    for line in lines:
        if KOPF_CANCEL_CALLBACK.search(line):
            skipping = True
            continue
        if skipping and re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} ", line):
            skipping = False
        if not skipping:
            out.append(line)
    return out


def test_only_the_kopf_cancel_callback_record_is_left_out() -> None:
    log = [
        "2026-12-04 01:15:40,152 INFO kopf._core.engines.peering: Pausing operations",
        "2026-12-04 01:15:40,157 ERROR asyncio: Exception in callback "
        "stream.<locals>.request_cancel_callback(<Task finished>)",
        "Traceback (most recent call last):",
        "AssertionError",
        "2026-12-05 00:21:38,499 ERROR asyncio: Exception in callback "
        "<function stream.<locals>.request_cancel_callback at 0x7fae33729da0>",
        "handle: <Handle stream.<locals>.request_cancel_callback>",
        "Traceback (most recent call last):",
        '  File "uvloop/cbhandles.pyx", line 66, in uvloop.loop.Handle._run',
        "AssertionError",
        "2026-12-04 01:15:41,000 ERROR sparkrun.operator: a real error",
        "Traceback (most recent call last):",
        "2026-12-04 01:15:42,000 ERROR asyncio: Exception in callback other_callback()",
    ]
    assert _without_kopf_cancel_callback(log) == [log[0], *log[9:]]


def _log_problems(proc: OperatorProcess) -> list[str]:
    return [
        line
        for line in _without_kopf_cancel_callback(proc.output().splitlines())
        if (" ERROR " in line and "storage is (re)initializing" not in line)
        or "Traceback" in line
        or ("Conflict" in line and "Conflicting operators" not in line)
        or "Failed to post an event" in line  # kopf: a refused Event post, whatever its code
    ]


def _kopf_events_named_by_the_server(kube: KubeApi, namespace: str) -> int:
    """Every Event the replicas posted has a name the apiserver generated (``generateName``), so
    two replicas posting the same Event cannot collide; returns how many there are."""
    ours = [
        e
        for e in kube.list_items("v1", "Event", namespace=namespace)
        if (e.get("source") or {}).get("component") == KOPF_COMPONENT
    ]
    for event in ours:
        meta = event["metadata"]
        assert meta.get("generateName") == KOPF_EVENT_PREFIX, meta
        assert meta["name"].startswith(KOPF_EVENT_PREFIX), meta
    return len(ours)


def _logged_at(proc: OperatorProcess, text: str) -> float | None:
    """The wall-clock time (epoch seconds) of the first log line containing ``text``."""
    for line in proc.output().splitlines():
        if text in line:
            stamp = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
            return time.mktime(stamp) + int(line[20:23]) / 1000
    return None


def _verify(
    kube: KubeApi,
    namespace: str,
    names: list[str],
    replicas: dict[str, tuple[OperatorProcess, int]],
    codes_before: Counts,
) -> dict[str, dict[str, Any]]:
    items = kube.wait(
        lambda: _all_consistent(kube, namespace, names),
        timeout=240,
        what="every workload Ready, status current",
    )
    _check_children(kube, namespace, items)
    _settled(kube, namespace, names)
    codes = _apiserver_counts(kube)
    grown = {key: value - codes_before.get(key, 0.0) for key, value in codes.items()}
    # NB: each replica creates the peering object at start; all but the first get 409
    # AlreadyExists there, which is no write conflict. Others' 409s (the endpoints controller's,
    # the JobSet controller's status updates, any component's Events) are not the operator's:
    # shown, not counted (module docs).
    peering = grown.get(("409", "kopf.dev", "kopfpeerings", "", "POST"), 0.0)
    conflicts = _operator_conflicts(grown)
    others = {key: n for key, n in grown.items() if key[0] == "409" and n and key not in conflicts}
    failed = {key: n for key, n in grown.items() if key[0].startswith("5") and n}
    print(
        f"apiserver: 409 conflicts {conflicts or 0}, peering AlreadyExists {peering:.0f}, "
        f"others' 409s {others or 0}, 5xx {failed}"
    )
    assert not conflicts
    print(f"Events the replicas posted: {_kopf_events_named_by_the_server(kube, namespace)}")
    # NB: 5xx (a 504 when the apiserver is slow under load) are shown, not failures of HA: the
    # replicas' own error counters below must stay 0 either way.
    for name, (proc, port) in replicas.items():
        assert _errors(port) == 0, f"{name} counted reconcile errors"
        assert not _log_problems(proc), f"{name}: {_log_problems(proc)[:5]}"
    return items


def test_replicas_started_together_while_workloads_are_created(
    kube: KubeApi, namespace: str, operator_factory: Factory, peering_crds: None, ha_nodes: dict[str, Any]
) -> None:
    names = [f"w{i:02d}" for i in range(HA_WORKLOADS)]
    # half exist when the replicas start (both list them at once), half arrive while they start
    _create_workloads(kube, namespace, names[: HA_WORKLOADS // 2], ha_nodes)
    codes_before = _apiserver_counts(kube)
    one, one_metrics, _ = _replica(operator_factory, namespace, priority=100, extra=NO_DRIFT)
    two, two_metrics, _ = _replica(operator_factory, namespace, priority=200, extra=NO_DRIFT)
    timeline = WriteTimeline({"one": one_metrics, "two": two_metrics})
    try:
        _create_workloads(kube, namespace, names[HA_WORKLOADS // 2 :], ha_nodes)
        _verify(kube, namespace, names, {"one": (one, one_metrics), "two": (two, two_metrics)}, codes_before)
    finally:
        timeline.stop()
    overlap = timeline.overlap("one", "two")
    print(f"writing: one {timeline.writing('one')}, two {timeline.writing('two')}; overlap {overlap:.2f} s")
    # the higher priority works in the end, the other is paused and stays quiet
    resumed, paused = _logged_at(two, "Resuming operations"), _logged_at(one, "Pausing operations")
    if paused is not None and resumed is not None:
        print(f"both active for {paused - resumed:.2f} s (two resumed -> one paused, from the logs)")
    else:
        print("one never resumed: no overlap this time")
    quiet_since = _writes(one_metrics)
    time.sleep(1.0)
    assert _writes(one_metrics) == quiet_since
    assert _writes(two_metrics) > 0


def test_a_replica_started_while_another_works_takes_over(
    kube: KubeApi, namespace: str, operator_factory: Factory, peering_crds: None, ha_nodes: dict[str, Any]
) -> None:
    names = [f"w{i:02d}" for i in range(HA_WORKLOADS)]
    codes_before = _apiserver_counts(kube)
    old, old_metrics, _ = _replica(operator_factory, namespace, priority=100, extra=NO_DRIFT)
    _wait_log(old, "Resuming operations")
    timeline = WriteTimeline({"old": old_metrics})
    _create_workloads(kube, namespace, names[: HA_WORKLOADS // 2], ha_nodes)
    # NB: as in a rolling upgrade whose new pod drew the higher priority: it takes over mid-work
    new, new_metrics, _ = _replica(operator_factory, namespace, priority=200, extra=NO_DRIFT)
    timeline.ports["new"] = new_metrics
    try:
        _create_workloads(kube, namespace, names[HA_WORKLOADS // 2 :], ha_nodes)
        _verify(kube, namespace, names, {"old": (old, old_metrics), "new": (new, new_metrics)}, codes_before)
    finally:
        timeline.stop()
    overlap = timeline.overlap("old", "new")
    print(f"writing: old {timeline.writing('old')}, new {timeline.writing('new')}; overlap {overlap:.2f} s")
    # both were active at once: the old one paused only on seeing the new one's keep-alive
    resumed, paused = _logged_at(new, "Resuming operations"), _logged_at(old, "Pausing operations")
    assert resumed is not None
    assert paused is not None
    old_spell, new_spell = timeline.writing("old"), timeline.writing("new")
    assert old_spell is not None
    assert new_spell is not None
    print(
        f"both active for {paused - resumed:.2f} s (new resumed -> old paused, from the logs); "
        f"old's last write {old_spell[1] - paused:+.2f} s from its pause, "
        f"new's first write {new_spell[0] - resumed:+.2f} s after its resume"
    )
    # NB: kopf cancels a pausing replica's daemons at once, in-flight passes included: its
    # writes end with the pause (1 s: the sampling period and the scrape under load).
    assert old_spell[1] <= paused + 1.0
    quiet_since = _writes(old_metrics)
    time.sleep(1.0)
    assert _writes(old_metrics) == quiet_since
