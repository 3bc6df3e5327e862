"""Which pods the autoscaler scrapes (``controllers/autoscale.py``, :func:`leaders`).

The ``iw_pods`` index holds every pod of the workload's namespace that carries the workload's
labels, and anyone who may create pods there can set those. Each scrape reads up to 2 MiB
(``METRICS_MAX_BYTES``) every ``scrapeIntervalSeconds`` (1 s allowed): a tenant's CPU-only pods
labelled as leaders of its own autoscaled workload, without a GPU, had the operator read and
parse gigabytes a second on the loop every workload shares. Only a Ready leader of one of the
workload's own JobSets is asked, one per JobSet, at most ``replicas + rollout.maxSurge``."""

from __future__ import annotations

import httpx

from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.controllers.autoscale import engine_url, leaders
from sparkrun_operator.plan.workload import ObservedJobSet, ObservedPod


def spec(replicas: int, surge: int = 1) -> InferenceWorkloadSpec:
    return InferenceWorkloadSpec.model_validate(
        {"model": {"name": "Qwen/Qwen3-0.6B"}, "replicas": replicas, "rollout": {"maxSurge": surge}}
    )


def pod(name: str, jobset: str, *, role: str = "leader", ready: bool = True) -> ObservedPod:
    return ObservedPod(name=name, jobset=jobset, role=role, ready=ready, ip="10.0.0.1")


def jobset(name: str) -> ObservedJobSet:
    return ObservedJobSet(name=name, uid=f"uid-{name}", replica=None, revision="r1")


def test_only_leaders_of_the_workloads_own_jobsets_are_scraped() -> None:
    own = [jobset("w-r1-0"), jobset("w-r1-1")]
    pods = [
        pod("w-r1-0-leader", "w-r1-0"),
        pod("w-r1-0-worker", "w-r1-0", role="worker"),
        pod("w-r1-1-leader", "w-r1-1", ready=False),
        *(pod(f"fake-{i}", f"fake-{i}") for i in range(500)),  # the tenant's own labelled pods
    ]
    assert [p.name for p in leaders(pods, own, spec(2))] == ["w-r1-0-leader"]


def test_one_leader_per_jobset_and_at_most_replicas_plus_surge() -> None:
    own = [jobset(f"w-r1-{i}") for i in range(10)]
    pods = [pod(f"w-r1-{i}-leader-{copy}", f"w-r1-{i}") for i in range(10) for copy in range(3)]
    chosen = leaders(pods, own, spec(3, surge=2))
    assert len(chosen) == 5
    assert len({p.jobset for p in chosen}) == 5
    assert len(leaders(pods, own, spec(0, surge=0))) == 1


def test_an_ipv6_leader_has_a_url_that_parses() -> None:
    """An IPv6 pod IP unbracketed is an invalid URL (``httpx.InvalidURL``, not an ``HTTPError``):
    every tick of the workload failed and the daemon with it, on an IPv6 cluster."""
    for ip in ("fd00:10:244::7", "10.244.0.7"):
        url = httpx.URL(f"{engine_url(ip)}/metrics")
        assert (url.host, url.port, url.path) == (ip, 8000, "/metrics")
