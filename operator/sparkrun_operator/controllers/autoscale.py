"""The autoscaler and the idle policy: a kopf daemon per workload with ``spec.autoscaling`` or
``spec.idle`` (ADR 0045; docs/autoscaling.md).

Every ``scrapeIntervalSeconds`` (the first tick at a random point of the first interval, so that
a thousand workloads do not scrape in lockstep) the daemon reads ``/metrics`` of every Ready
leader of the workload at once (``Engine.load``, bounded in size and time; the leaders come from
the ``iw_pods`` index), keeps a bounded window of those samples, advances the idle clock, and
asks :func:`sparkrun_operator.plan.autoscale.decide` what to do. A decision is written as a JSON
merge patch of ``spec.replicas`` / ``spec.state`` by field manager ``sparkrun-autoscaler``, with
the ``resourceVersion`` it was decided on as a precondition (a conflict: decided again on the
next tick, from the newer object; nothing is written twice), and posted as an Event whose
reason is the action.

The daemon writes no status: it keeps a :class:`~sparkrun_operator.plan.workload.model.ScalingView`
per workload in the memo (``Memo.scaling``), which the workload planner folds into
``status.scaling``, and pokes the workload's full lane only when that view changes (a decision,
the idle clock starting or stopping). In ``External`` mode it decides nothing about load: it
exports ``sparkrun_workload_load_per_replica`` for an HPA or KEDA (``Metrics.export_load``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import random
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

import kopf

from sparkrun_operator.api.resources import INFERENCE_WORKLOAD
from sparkrun_operator.api.workload import ENGINE_PORT, InferenceWorkloadSpec
from sparkrun_operator.controllers import gate, indexes
from sparkrun_operator.controllers.engine import Engine
from sparkrun_operator.controllers.memo import Memo
from sparkrun_operator.controllers.workload_pokes import full_key
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import AUTOSCALER_MANAGER, Kube
from sparkrun_operator.k8s.resources import Resource, resource_of
from sparkrun_operator.plan import autoscale, observe
from sparkrun_operator.plan.autoscale import Decision, ReplicaLoad, Sample
from sparkrun_operator.plan.workload import ObservedJobSet, ObservedPod
from sparkrun_operator.plan.workload.model import ScalingView
from sparkrun_operator.render import keys

WORKLOADS: Resource = resource_of(INFERENCE_WORKLOAD)
WORKLOAD_ID = (INFERENCE_WORKLOAD.group, INFERENCE_WORKLOAD.version, INFERENCE_WORKLOAD.plural)
#: The most samples kept per workload; a window longer than this many scrape intervals is
#: thinned (:meth:`Autoscaler.remember`).
MAX_SAMPLES: Final = 1024
#: Idle this long before the idle clock reaches the planner (``status.scaling.idleSince``).
PUBLISH_IDLE_SECONDS: Final = 60.0
#: Leaders of one workload scraped at once.
SCRAPE_CONCURRENCY: Final = 32

log = logging.getLogger("sparkrun.operator.autoscale")


def wanted(spec: Mapping[str, Any] | None) -> bool:
    """Whether a workload's spec asks for the autoscaler (``autoscaling`` or ``idle`` set)."""
    spec = spec or {}
    return bool(spec.get("autoscaling") or spec.get("idle"))


def interval_of(spec: InferenceWorkloadSpec) -> int:
    """Seconds between two scrapes: ``autoscaling``'s, else ``idle``'s."""
    if spec.autoscaling is not None:
        return spec.autoscaling.scrape_interval_seconds
    return spec.idle.scrape_interval_seconds if spec.idle is not None else 15


def keep_seconds(spec: InferenceWorkloadSpec) -> float:
    """How far back samples are kept: the longest window and an interval more."""
    auto = spec.autoscaling
    longest = max(auto.scale_up_window_seconds, auto.scale_down_window_seconds) if auto is not None else 0
    return float(longest + 2 * interval_of(spec))


@dataclass
class Autoscaler:
    """One workload's window, idle clock and last decision (the daemon's memory)."""

    namespace: str
    name: str
    kube: Kube
    samples: deque[Sample] = field(default_factory=deque)
    idle_since: dt.datetime | None = None
    #: The last decision this daemon wrote, and the resourceVersion it was decided on (no
    #: decision until the watch shows a newer one).
    last: Decision | None = None
    last_at: dt.datetime | None = None
    decided_on: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)

    def remember(self, sample: Sample, spec: InferenceWorkloadSpec) -> None:
        """Add ``sample`` and advance the idle clock; drop samples older than the longest window
        and, past :data:`MAX_SAMPLES`, every second one of the older half (the newer half, which
        the scale-up window reads, keeps every scrape)."""
        previous = self.samples[-1] if self.samples else None
        self.idle_since = autoscale.advance_idle(previous, sample, self.idle_since)
        samples = self.samples
        samples.append(sample)
        horizon = sample.at - dt.timedelta(seconds=keep_seconds(spec))
        while len(samples) > 1 and samples[1].at <= horizon:
            samples.popleft()  # NB: the newest sample at or before the horizon stays (coverage)
        if len(samples) > MAX_SAMPLES:
            ordered = list(samples)
            half = len(ordered) // 2
            older = ordered[:half]
            self.samples = deque([*older[:1], *older[2::2], *ordered[half:]])

    def view(self, spec: InferenceWorkloadSpec, now: dt.datetime) -> ScalingView:
        """What the planner is told (``status.scaling``). The idle clock only once it has run
        :func:`publish_idle_after` (a workload with a request every few seconds would otherwise
        cost a full pass and a status write at every scrape), and from then on its true start."""
        last = self.last
        idle_since = self.idle_since
        if idle_since is not None and (now - idle_since).total_seconds() < publish_idle_after(spec):
            idle_since = None
        return ScalingView(
            decision=last.record(self.last_at.replace(microsecond=0))
            if last is not None and self.last_at is not None
            else None,
            idle_since=idle_since.replace(microsecond=0) if idle_since is not None else None,
            scraped=True,
            resume_replicas=last.resume_replicas if last is not None else None,
        )


def publish_idle_after(spec: InferenceWorkloadSpec) -> float:
    """Seconds idle before the idle clock is published: :data:`PUBLISH_IDLE_SECONDS`, or half
    the idle policy's shortest step when that is sooner."""
    steps = [
        seconds
        for seconds in ((spec.idle.sleep_after_seconds, spec.idle.zero_after_seconds) if spec.idle else ())
        if seconds is not None
    ]
    return min([PUBLISH_IDLE_SECONDS, *(step / 2 for step in steps)])


def leaders(
    pods: Iterable[ObservedPod], jobsets: Iterable[ObservedJobSet], spec: InferenceWorkloadSpec
) -> list[ObservedPod]:
    """The pods to scrape: a Ready leader of each of the workload's own JobSets, one per JobSet,
    at most ``replicas + rollout.maxSurge`` (by JobSet name). Anyone who may create pods in the
    namespace can label one as a leader of the workload, and each scrape reads up to 2 MiB: the
    JobSets bound what the operator reads to the replicas it made."""
    own = {j.name for j in jobsets}
    chosen: dict[str, ObservedPod] = {}
    for pod in sorted(pods, key=lambda p: (p.jobset, p.name)):
        ready = pod.role == keys.ROLE_LEADER and pod.ready and pod.ip and not pod.deleting
        if ready and pod.jobset in own and pod.jobset not in chosen:
            chosen[pod.jobset] = pod
    return list(chosen.values())[: max(1, spec.replicas) + spec.rollout.max_surge]


def engine_url(ip: str) -> str:
    """The engine's base URL at a pod IP (an IPv6 one in brackets)."""
    return f"http://[{ip}]:{ENGINE_PORT}" if ":" in ip else f"http://{ip}:{ENGINE_PORT}"


async def scrape(ctx: Memo, pods: list[ObservedPod]) -> tuple[ReplicaLoad, ...]:
    """``/metrics`` of every pod of ``pods`` (:func:`leaders`), at most :data:`SCRAPE_CONCURRENCY`
    at once, and at most ``Memo.scrapes`` across every workload."""
    engine = Engine(ctx.http, timeout=ctx.config.engine_timeout)
    limit = asyncio.Semaphore(SCRAPE_CONCURRENCY)

    async def one(pod: ObservedPod) -> ReplicaLoad:
        async with limit, ctx.scrapes:
            return ReplicaLoad(pod.jobset, await engine.load(engine_url(str(pod.ip))))

    return tuple(await asyncio.gather(*(one(p) for p in pods)))


def _last_decision_time(body: Mapping[str, Any]) -> dt.datetime | None:
    scaling = (body.get("status") or {}).get("scaling") or {}
    return observe.parse_time((scaling.get("lastDecision") or {}).get("time"))


def patch_of(decision: Decision, spec: InferenceWorkloadSpec, version: str) -> dict[str, Any]:
    """The merge patch of ``decision``: only the fields it changes (the autoscaler then owns no
    field it did not write), with ``version`` as the precondition."""
    changes: dict[str, Any] = {}
    if decision.to_replicas != spec.replicas:
        changes["replicas"] = decision.to_replicas
    if decision.state != spec.state:
        changes["state"] = decision.state
    return {"metadata": {"resourceVersion": version}, "spec": changes}


async def write(
    ctx: Memo,
    state: Autoscaler,
    *,
    body: Mapping[str, Any],
    spec: InferenceWorkloadSpec,
    decision: Decision,
    version: str | None = None,
) -> bool:
    """Patch ``decision`` into the spec, with ``version`` (default: the resourceVersion of
    ``body``), the one ``spec`` was read at, as the precondition, and remember it; ``False`` when
    the apiserver refused it (409: the workload changed meanwhile, the next tick decides again
    from the newer object)."""
    if version is None:
        version = str((body.get("metadata") or {}).get("resourceVersion") or "")
    patch = patch_of(decision, spec, version)
    try:
        async with ctx.write_gate.slot(gate.ACTION):
            await state.kube.merge_patch(WORKLOADS, state.name, patch, state.namespace)
    except errors.KubeConflict:
        log.debug("autoscaler: %s/%s: %s not written, changed meanwhile", *state.key, decision.action)
        return False
    except errors.KubeError as error:
        log.warning("autoscaler: %s/%s: %s not written: %s", *state.key, decision.action, error)
        return False
    state.last, state.last_at, state.decided_on = decision, autoscale_now(), version
    return True


async def act(
    ctx: Memo,
    state: Autoscaler,
    *,
    body: kopf.Body,
    spec: InferenceWorkloadSpec,
    decision: Decision,
    version: str,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> bool:
    """:func:`write` ``decision`` (made from ``spec``, read at ``version``) and post its Event;
    whether it was written."""
    if not await write(ctx, state, body=body, spec=spec, decision=decision, version=version):
        return False
    message = f"{decision.from_replicas} -> {decision.to_replicas} replicas: {decision.message}"
    kopf.event(body, type="Normal", reason=decision.action, message=message[:1024])
    logger.info("autoscaler: %s: %s", decision.action, message)
    return True


def autoscale_now() -> dt.datetime:
    """Now, in UTC, with sub-second precision (windows of a few seconds)."""
    return dt.datetime.now(dt.UTC)


def export(ctx: Memo, key: tuple[str, str], spec: InferenceWorkloadSpec, sample: Sample) -> None:
    """``sparkrun_workload_load_per_replica`` of a workload in External mode; none otherwise, or
    when no replica answered."""
    auto = spec.autoscaling
    loads = sample.answered
    if auto is None or auto.mode != "External" or not loads:
        ctx.metrics.forget_load(key)
        return
    figures = sample.figures()
    ctx.metrics.export_load(
        key,
        waiting=figures.waiting / len(loads),
        kv_cache_usage=figures.kv_cache_usage,
        cap=ctx.config.load_metric_workloads,
    )


async def tick(
    ctx: Memo,
    state: Autoscaler,
    *,
    body: kopf.Body,
    indices: Mapping[str, Any],
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> InferenceWorkloadSpec:
    """One scrape, the window and idle clock moved on, a decision written if one is due, and
    the planner told when its view changed; the spec it ran under.

    NB: kopf's ``body`` is live (the watch replaces it while the scrape is awaited): the spec
    and the resourceVersion the decision is written with are read together, before it, so a
    change meanwhile (the gateway's wake, a user's edit) refuses the decision (409)."""
    version = (body.get("metadata") or {}).get("resourceVersion")
    spec = InferenceWorkloadSpec.model_validate(dict(body.get("spec") or {}))
    pods = (
        []
        if spec.state == "Stopped"
        else leaders(_pods(indices, "iw_pods", state.key), _pods(indices, "iw_jobsets", state.key), spec)
    )
    loads = await scrape(ctx, pods) if pods else ()
    now = autoscale_now()
    sample = Sample(at=now, state=spec.state, replicas=spec.replicas, loads=loads)
    state.remember(sample, spec)
    export(ctx, state.key, spec, sample)
    if version is None or version != state.decided_on:  # NB: else the watch lags our own write
        times = [t for t in (_last_decision_time(body), state.last_at) if t is not None]
        decision = autoscale.decide(
            spec=spec,
            samples=tuple(state.samples),
            idle_since=state.idle_since,
            last_decision=max(times) if times else None,
            now=now,
        )
        if decision is not None:
            await act(
                ctx, state, body=body, spec=spec, decision=decision, version=str(version or ""), logger=logger
            )
    view = state.view(spec, now)
    if ctx.scaling.get(state.key) != view:
        ctx.scaling[state.key] = view
        ctx.triggers.poke(full_key(*state.key))
    return spec


def _pods(indices: Mapping[str, Any], name: str, key: tuple[str, str]) -> list[Any]:
    """What index ``name`` holds for the workload ``key``."""
    index = indices.get(name)
    if index is None or key not in index:
        return []
    return list(index[key])


async def run(
    ctx: Memo,
    *,
    namespace: str,
    name: str,
    body: kopf.Body,
    indices: Mapping[str, Any],
    stopped: kopf.DaemonStopped,
    logger: logging.Logger | logging.LoggerAdapter[Any],
) -> None:
    """Tick every scrape interval until ``stopped``; the first tick at a random point of the
    first interval. The idle clock starts again at the first scrape: ``status.scaling.idleSince``
    is not taken back, because nothing says what the engines did while no daemon watched them (an
    operator restart, a leader change, ``spec.idle`` set again): a workload busy meanwhile would
    otherwise be put to sleep or to zero on its first scrape."""
    state = Autoscaler(namespace=namespace, name=name, kube=ctx.kube.as_manager(AUTOSCALER_MANAGER))
    try:
        spec = InferenceWorkloadSpec.model_validate(dict(body.get("spec") or {}))
        delay = random.uniform(0, interval_of(spec))
        while not stopped:
            await _wait(stopped, delay)
            if stopped:
                break
            try:
                spec = await tick(ctx, state, body=body, indices=indices, logger=logger)
            except (errors.KubeError, ValueError) as error:
                logger.warning("autoscaler: tick failed: %s: %s", type(error).__name__, error)
            delay = interval_of(spec)
    finally:
        ctx.metrics.forget_load(state.key)
        if ctx.scaling.pop(state.key, None) is not None:
            ctx.triggers.poke(full_key(*state.key))


async def _wait(stopped: kopf.DaemonStopped, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stopped``."""
    stopper = asyncio.ensure_future(stopped.wait())
    try:
        await asyncio.wait({stopper}, timeout=seconds)
    finally:
        stopper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await stopper


def register(registry: kopf.OperatorRegistry) -> None:
    """The autoscaler's daemon, for workloads whose spec sets ``autoscaling`` or ``idle`` (kopf
    stops it when neither is set any more, and when the workload goes)."""

    @kopf.daemon(
        *WORKLOAD_ID,
        id="iw-autoscale",
        registry=registry,
        cancellation_timeout=5.0,
        when=lambda spec, **_: wanted(spec),
    )
    async def iw_autoscale(
        *,
        namespace: str | None,
        name: str,
        body: kopf.Body,
        memo: Any,
        stopped: kopf.DaemonStopped,
        logger: logging.Logger | logging.LoggerAdapter[Any],
        **kwargs: Any,
    ) -> None:
        assert namespace is not None  # a namespaced kind
        await run(
            memo.ctx,
            namespace=namespace,
            name=name,
            body=body,
            indices=indexes.pick(kwargs),
            stopped=stopped,
            logger=logger,
        )
