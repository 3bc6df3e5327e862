"""Drain and replace, decided (ADR 0049): which serving group moves next, one at a time.

Pure (time is passed in). Input: the cluster's ``spec.drain`` and previous ``status.drain``, its
member nodes, and every serving group (one JobSet per replica) with a pod on a member node. Output:
the new ``status.drain`` and at most one eviction to make now.

- **Drained nodes** are members cordoned (``spec.unschedulable``) or carrying the
  ``node.kubernetes.io/unschedulable`` taint (what ``kubectl cordon`` adds). Other NoSchedule
  taints are not a drain (pools are tainted for dedication: the pods there tolerate them), nor
  NoExecute ones (the taint manager evicts what does not tolerate them), nor a NotReady node by
  itself (the group's own failure handling and the node lifecycle controller cover it). A
  NotReady node that is also cordoned is drained, but an eviction there does not complete while
  its kubelet is gone: the group is Blocked after ``groupTimeoutSeconds``.
- **When**: ``mode: OnRequest`` drains for a ``spec.drain.request`` token the status has not
  finished (``status.drain.request``); ``Automatic`` always, whenever a member is drained.
- **One at a time**: a group is Moving from the pass that takes it out of routing (its leader pods
  listed in ``unrouted``, which the workload's status carries to the gateway) until it is Ready
  again off the drained nodes. Its pod on a drained node is evicted only ``settleSeconds`` after it
  left the routing, so requests in flight finish. No other group moves meanwhile, and none at all
  while a group that was evicted is not back (``Blocked``: it cannot be placed, or not Ready in
  ``groupTimeoutSeconds``; it moves on by itself once it is Ready).
- **Never the last ready replica**: a group whose workload has no other ready group is Blocked
  (not touched) unless ``allowLastReplica``; it is checked again every pass. An eviction the API
  refuses (a PodDisruptionBudget: 429) puts the group back into routing, Blocked, and it is tried
  again after :data:`RETRY_REFUSED`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from sparkrun_operator.api.clip import clip
from sparkrun_operator.api.drain import (
    GROUP_MESSAGE_MAX_LENGTH,
    MAX_GROUP_NODES,
    MAX_GROUPS,
    MAX_NODES,
    MAX_UNROUTED,
    ClusterDrainStatus,
    DrainSpec,
    DrainState,
    GroupDrain,
    WorkloadDrainStatus,
)
from sparkrun_operator.plan.cluster import ObservedNode
from sparkrun_operator.plan.workload.model import ObservedPod
from sparkrun_operator.render import keys

#: The taint ``kubectl cordon`` (the node controller) puts on an unschedulable node.
UNSCHEDULABLE_TAINT: Final = "node.kubernetes.io/unschedulable"
#: After an eviction was refused (a PodDisruptionBudget), the group is tried again this much later.
RETRY_REFUSED: Final = dt.timedelta(seconds=30)
#: How often a pass is needed while a drain waits on the clock (settle, retry, timeout).
POLL_SECONDS: Final = 5.0
TERMINAL_PHASES: Final = frozenset({"Succeeded", "Failed"})

GroupKey = tuple[str, str, int]


@dataclass(frozen=True, kw_only=True)
class ObservedGroup:
    """A serving group (one replica's JobSet), listed while its JobSet exists."""

    namespace: str
    workload: str
    replica: int
    jobset: str
    #: Its pods that are not terminal (Succeeded/Failed).
    pods: tuple[ObservedPod, ...] = ()
    #: Other groups of the same workload whose leader is Ready (and not being deleted).
    other_ready: int = 0

    @property
    def key(self) -> GroupKey:
        return (self.namespace, self.workload, self.replica)


@dataclass(frozen=True)
class Eviction:
    """Evict one pod (Eviction API) of the group ``key``."""

    key: GroupKey
    namespace: str
    pod: str


@dataclass(frozen=True)
class DrainPlan:
    """The new ``status.drain`` (``None``: no drain configured) and the eviction to make now."""

    status: ClusterDrainStatus | None
    evict: Eviction | None = None
    requeue_after: float | None = None


EvictionOutcome = Literal["evicted", "refused", "gone"]


def drained_nodes(members: Iterable[ObservedNode]) -> list[str]:
    """The member nodes being drained: cordoned or with the unschedulable taint (sorted)."""
    return sorted(n.name for n in members if n.unschedulable or UNSCHEDULABLE_TAINT in n.taints)


def _live(group: ObservedGroup) -> list[ObservedPod]:
    return [p for p in group.pods if not p.deleting and p.phase not in TERMINAL_PHASES]


def on_drained(group: ObservedGroup, drained: set[str]) -> list[ObservedPod]:
    """The group's live pods on a drained node."""
    return [p for p in _live(group) if p.node in drained]


def _nodes(pods: Iterable[ObservedPod]) -> list[str]:
    return sorted({p.node for p in pods if p.node})[:MAX_GROUP_NODES]


def _leaders(group: ObservedGroup) -> list[str]:
    return sorted(p.name for p in _live(group) if p.role == keys.ROLE_LEADER)[:MAX_UNROUTED]


@dataclass
class _Pass:
    """One planning pass's working state."""

    spec: DrainSpec
    drained: set[str]
    groups: Mapping[GroupKey, ObservedGroup]
    now: dt.datetime
    entries: dict[GroupKey, GroupDrain] = field(default_factory=dict)
    evict: Eviction | None = None
    #: Seconds until the clock decides something (a settle ending), at most :data:`POLL_SECONDS`.
    wake: float = POLL_SECONDS

    def put(self, entry: GroupDrain, **changes: object) -> GroupDrain:
        changed = entry.model_copy(update=changes)
        if "message" in changes:
            changed = changed.model_copy(
                update={"message": clip(str(changes["message"]), GROUP_MESSAGE_MAX_LENGTH)}
            )
        self.entries[entry.key] = changed
        return changed


def _active(spec: DrainSpec, previous: ClusterDrainStatus | None) -> bool:
    """Whether a drain runs: Automatic always; OnRequest for a request not finished yet."""
    if spec.mode == "Automatic":
        return True
    if spec.request is None:
        return False
    if previous is None or previous.request != spec.request:
        return True
    return previous.state != "Done"


def plan_drain(
    *,
    spec: DrainSpec | None,
    previous: ClusterDrainStatus | None,
    members: Sequence[ObservedNode],
    groups: Sequence[ObservedGroup],
    now: dt.datetime,
) -> DrainPlan:
    """The drain's next step (see the module docs)."""
    if spec is None:
        return DrainPlan(status=None)
    if spec.allow_last_replica_for is not None and spec.allow_last_replica_for == spec.request:
        spec = spec.model_copy(update={"allow_last_replica": True})  # for this request only
    if not _active(spec, previous):
        idle = previous or ClusterDrainStatus(request=spec.request)
        return DrainPlan(status=idle)
    fresh = previous is None or previous.request != spec.request or previous.state in ("Idle", "Done")
    drained = drained_nodes(members)
    if fresh and previous is not None and previous.state == "Done" and not _needed(groups, set(drained)):
        # Automatic, nothing new: keep the last report (answering the request, if any)
        return DrainPlan(status=previous.model_copy(update={"request": spec.request}))
    work = _Pass(spec=spec, drained=set(drained), groups={g.key: g for g in groups}, now=now)
    if not fresh and previous is not None:
        work.entries = {e.key: e for e in previous.groups}
    _admit(work)
    _advance(work)
    status = _summary(work, spec=spec, previous=None if fresh else previous, drained=drained)
    requeue = work.wake if status.state in ("Draining", "Blocked") else None
    return DrainPlan(status=status, evict=work.evict, requeue_after=requeue)


def _needed(groups: Iterable[ObservedGroup], drained: set[str]) -> bool:
    return any(on_drained(g, drained) for g in groups)


def _admit(work: _Pass) -> None:
    """Every group with a live pod on a drained node gets an entry (Pending), a Ready one again."""
    for key, group in sorted(work.groups.items()):
        if not on_drained(group, work.drained):
            continue
        entry = work.entries.get(key)
        if entry is None:
            work.put(
                GroupDrain(
                    namespace=group.namespace,
                    workload=group.workload,
                    replica=group.replica,
                    jobset=group.jobset,
                    state="Pending",
                    from_nodes=_nodes(_live(group)),
                    message="waits its turn",
                    since=work.now,
                )
            )
        elif entry.state == "Ready":
            work.put(
                entry, state="Pending", jobset=group.jobset, message="on a drained node again", since=work.now
            )


def _advance(work: _Pass) -> None:
    """Follow the moving group; start the next one when none moves and none is stuck."""
    for key, entry in sorted(work.entries.items()):
        if _holds(entry):
            _follow(work, key, entry)
        elif entry.state in ("Pending", "Blocked"):
            _recheck(work, key, entry)
    if any(_holds(e) for e in work.entries.values()):
        return
    pending = sorted(
        (e for e in work.entries.values() if e.state == "Pending"),
        key=lambda e: (e.since or work.now, *e.key),
    )
    for entry in pending:
        if _start(work, entry):
            return


def _stuck(entry: GroupDrain) -> bool:
    """Whether ``entry``'s group was evicted and is not back (Blocked after its eviction)."""
    return entry.state == "Blocked" and entry.evicted_at is not None


def _holds(entry: GroupDrain) -> bool:
    """Whether ``entry`` holds the drain: it moves, or was evicted and is not back."""
    return entry.state == "Moving" or _stuck(entry)


def _recheck(work: _Pass, key: GroupKey, entry: GroupDrain) -> None:
    """A Pending or (untouched) Blocked group: done when it left the drained nodes by itself;
    a last-replica block lifts once another replica is ready; a refused one is retried."""
    group = work.groups.get(key)
    if group is None:
        _gone(work, entry)
        return
    if not on_drained(group, work.drained):
        work.put(
            entry, state="Ready", unrouted=[], message="no pod on a drained node any more", since=work.now
        )
        return
    if entry.state != "Blocked":
        return
    refused = entry.unrouted_at is not None
    if refused and entry.since is not None and work.now - entry.since < RETRY_REFUSED:
        return
    if refused or group.other_ready > 0 or work.spec.allow_last_replica:
        work.put(entry, state="Pending", message="tried again", since=work.now)


def _start(work: _Pass, entry: GroupDrain) -> bool:
    """Take ``entry``'s group out of routing (Moving), unless it is its workload's last ready
    replica; whether it started."""
    key = entry.key
    group = work.groups[key]
    if group.other_ready == 0 and not work.spec.allow_last_replica:
        _last_replica(work, entry)
        return False
    live = _live(group)
    work.put(
        entry,
        state="Moving",
        jobset=group.jobset,
        from_nodes=_nodes(live),
        pods=len(live),
        unrouted=_leaders(group),
        unrouted_at=work.now,
        evicted_at=None,
        ready_at=None,
        to_nodes=[],
        message=f"out of routing; evicted in {work.spec.settle_seconds} s",
        since=work.now,
    )
    if work.spec.settle_seconds == 0:
        _evict_when_settled(work, key, work.entries[key])
    return True


def _last_replica(work: _Pass, entry: GroupDrain) -> None:
    """Block ``entry``: its workload has no other ready replica (back into routing, untouched)."""
    work.put(
        entry,
        state="Blocked",
        unrouted=[],
        unrouted_at=None,
        message=f"the only ready replica of {entry.namespace}/{entry.workload}: moving it stops "
        "serving the model; it moves once another replica is ready, or with allowLastReplica",
        since=work.now,
    )


def _follow(work: _Pass, key: GroupKey, entry: GroupDrain) -> None:
    """The moving group: evict once settled, then wait until it is Ready off the drained nodes."""
    group = work.groups.get(key)
    if group is None and entry.evicted_at is None:
        _gone(work, entry)
        return
    if entry.evicted_at is None:
        _evict_when_settled(work, key, entry)
        return
    # NB: an evicted group may vanish for a moment (its workload's controller makes a failed
    # JobSet again): it is waited for like a restarting one, and taken as gone after the timeout
    pods = _live(group) if group is not None else []
    deleting = [p for p in group.pods if p.deleting] if group is not None else []
    on_bad = [p for p in pods if p.node in work.drained]
    ready = (
        not deleting
        and not on_bad
        and len(pods) >= max(entry.pods, 1)
        and all(p.ready for p in pods)
        and any(p.role == keys.ROLE_LEADER for p in pods)
    )
    if ready:
        work.put(
            entry,
            state="Ready",
            to_nodes=_nodes(pods),
            unrouted=[],
            ready_at=work.now,
            message=f"Ready again on {', '.join(_nodes(pods))}",
            since=work.now,
        )
        return
    stuck = sorted({p.unschedulable for p in pods if p.node is None and p.unschedulable})
    timeout = dt.timedelta(seconds=work.spec.group_timeout_seconds)
    if stuck and not deleting:
        _block(work, entry, f"{len(stuck)} kind(s) of pods cannot be placed: {stuck[0]}")
    elif work.now - entry.evicted_at >= timeout:
        if group is None:
            _gone(work, entry)
        else:
            _block(work, entry, f"not Ready {work.spec.group_timeout_seconds} s after the eviction")
    elif entry.state != "Moving":
        work.put(entry, state="Moving", message="restarting off the drained nodes", since=work.now)
    else:
        scheduled = sum(1 for p in pods if p.node)
        ready_n = sum(1 for p in pods if p.ready)
        message = (
            f"restarting: {len(pods)} pods, {scheduled} placed, {ready_n} ready, {len(deleting)} stopping"
        )
        if entry.message != message:
            work.put(entry, message=message)


def _gone(work: _Pass, entry: GroupDrain) -> None:
    """The group's JobSet is gone (its workload deleted or scaled in): nothing left to move."""
    message = "the group is gone (its workload deleted or scaled in)"
    work.put(entry, state="Ready", unrouted=[], message=message, since=work.now)


def _block(work: _Pass, entry: GroupDrain, message: str) -> None:
    if entry.state != "Blocked" or entry.message != message:
        work.put(entry, state="Blocked", message=message, since=work.now)


def _evict_when_settled(work: _Pass, key: GroupKey, entry: GroupDrain) -> None:
    """Ask for the eviction of the group's pod on a drained node once ``settleSeconds`` passed."""
    group = work.groups[key]
    targets = sorted(on_drained(group, work.drained), key=lambda p: p.name)
    if not targets:
        live = _live(group)
        if len(live) >= entry.pods and all(p.ready for p in live):
            # the node was uncordoned meanwhile: nothing to move
            work.put(
                entry, state="Ready", unrouted=[], message="no pod on a drained node any more", since=work.now
            )
        else:
            # its pod there went already (evicted by a pass that did not record it, or deleted)
            work.put(
                entry, evicted_at=work.now, message="its pod on the drained node is gone; the group restarts"
            )
        return
    left = 0.0
    if entry.unrouted_at is not None:
        left = work.spec.settle_seconds - (work.now - entry.unrouted_at).total_seconds()
    if left > 0:
        work.wake = min(work.wake, left)
    elif group.other_ready == 0 and not work.spec.allow_last_replica:
        # NB: the other replicas went unready while this one settled out of routing
        _last_replica(work, entry)
    elif work.evict is None:
        work.evict = Eviction(key=key, namespace=entry.namespace, pod=targets[0].name)


def after_eviction(
    status: ClusterDrainStatus, eviction: Eviction, outcome: EvictionOutcome, *, detail: str, now: dt.datetime
) -> ClusterDrainStatus:
    """``status`` with the outcome of ``eviction``: evicted (or the pod was gone already: the
    group restarts either way), or refused (back into routing, Blocked, retried later)."""
    groups: list[GroupDrain] = []
    for entry in status.groups:
        if entry.key != eviction.key:
            groups.append(entry)
        elif outcome == "refused":
            message = clip(
                f"eviction of pod {eviction.pod} refused: {detail}; back in routing", GROUP_MESSAGE_MAX_LENGTH
            )
            groups.append(
                entry.model_copy(
                    update={"state": "Blocked", "unrouted": [], "message": message, "since": now}
                )
            )
        else:
            message = clip(
                f"pod {eviction.pod} evicted; the group restarts off the drained nodes",
                GROUP_MESSAGE_MAX_LENGTH,
            )
            groups.append(entry.model_copy(update={"evicted_at": now, "message": message}))
    updated = status.model_copy(update={"groups": groups})
    return updated.model_copy(update={"state": _state(groups, True), "message": _message(groups)})


def _state(groups: Sequence[GroupDrain], done_if_empty: bool) -> DrainState:
    """Blocked while an evicted group is not back, Draining while a group moves or waits, Blocked
    when only blocked ones are left, else Done (Idle: an Automatic drain with nothing drained and
    nothing moved)."""
    states = {g.state for g in groups}
    if any(_stuck(g) for g in groups):
        return "Blocked"  # an evicted group is not back: nothing else moves
    if states & {"Moving", "Pending"}:
        return "Draining"
    if "Blocked" in states:
        return "Blocked"
    return "Done" if groups or done_if_empty else "Idle"


def _message(groups: Sequence[GroupDrain]) -> str:
    counts: dict[str, int] = {}
    for g in groups:
        counts[g.state] = counts.get(g.state, 0) + 1
    if not counts:
        return "no serving group on a drained node"
    parts = [f"{counts[s]} {s.lower()}" for s in ("Ready", "Moving", "Pending", "Blocked") if s in counts]
    blocked = next((g for g in groups if g.state == "Blocked"), None)
    tail = (
        f"; {blocked.namespace}/{blocked.workload} replica {blocked.replica}: {blocked.message}"
        if blocked
        else ""
    )
    return clip(f"groups: {', '.join(parts)}{tail}", 1024)


def _summary(
    work: _Pass, *, spec: DrainSpec, previous: ClusterDrainStatus | None, drained: list[str]
) -> ClusterDrainStatus:
    """The status: entries bounded (the moving or evicted one first, then the other unfinished
    ones, then the most recent Ready ones), listed by key."""
    ordered = sorted(work.entries.values(), key=lambda e: e.key)
    unfinished = sorted((e for e in ordered if e.state != "Ready"), key=lambda e: not _holds(e))
    finished = sorted(
        (e for e in ordered if e.state == "Ready"), key=lambda e: e.since or work.now, reverse=True
    )
    kept = (unfinished + finished)[:MAX_GROUPS]
    kept_keys = {e.key for e in kept}
    kept = [e for e in ordered if e.key in kept_keys]
    remaining = sum(1 for e in unfinished if e.key not in kept_keys)
    state = _state(kept, spec.mode == "OnRequest" or bool(drained)) if not remaining else "Draining"
    started: dt.datetime | None = previous.started if previous is not None and previous.started else work.now
    if state == "Idle":
        started = None  # NB: an Automatic drain with nothing drained: the same status every pass
    finished_at = None
    if state == "Done":
        finished_at = previous.finished if previous is not None and previous.finished else work.now
    return ClusterDrainStatus(
        request=spec.request,
        state=state,
        nodes=drained[:MAX_NODES],
        groups=kept,
        remaining=remaining,
        message=_message(kept),
        started=started,
        finished=finished_at,
    )


def workload_views(cluster: str, raw: Any) -> dict[tuple[str, str], WorkloadDrainStatus]:
    """Each listed workload's groups in ``cluster``'s drain, keyed ``(namespace, workload)``, from
    the cluster's raw ``status.drain`` (which the cluster controller writes): parsed once per
    cluster change, where the ``iw_drains`` index records it, never per workload pass. A record
    that does not parse counts as no drain."""
    if not isinstance(raw, Mapping):
        return {}
    try:
        parsed = ClusterDrainStatus.model_validate(raw)
    except ValueError:
        return {}
    mine: dict[tuple[str, str], list[GroupDrain]] = {}
    for g in parsed.groups:
        mine.setdefault((g.namespace, g.workload), []).append(g)
    return {
        key: WorkloadDrainStatus(cluster=cluster, request=parsed.request, state=parsed.state, groups=groups)
        for key, groups in mine.items()
    }


def own_first(views: Iterable[WorkloadDrainStatus], cluster: str | None) -> WorkloadDrainStatus | None:
    """The workload's drain among the clusters' ``views`` of it: its own cluster's (``cluster``)
    first, since another one may still list it from before the workload moved; else the first
    by cluster name."""
    return min(views, key=lambda v: (v.cluster != cluster, v.cluster), default=None)


def unrouted_of(workload: Mapping[str, Any]) -> frozenset[str]:
    """The pods the gateway must not route to, from a raw InferenceWorkload: the leaders its
    ``status.drain`` lists for groups that move (bounded reads of a status only the operator
    writes)."""
    status = workload.get("status")
    drain = status.get("drain") if isinstance(status, Mapping) else None
    groups = drain.get("groups") if isinstance(drain, Mapping) else None
    pods: set[str] = set()
    for group in groups[:MAX_GROUPS] if isinstance(groups, list) else []:
        if not isinstance(group, Mapping) or group.get("state") not in ("Moving", "Blocked"):
            continue
        names = group.get("unrouted")
        shown = names[:MAX_UNROUTED] if isinstance(names, list) else []
        pods.update(n for n in shown if isinstance(n, str))
    return frozenset(pods)


DrainEvent = tuple[Literal["Normal", "Warning"], str, str]


def transitions(previous: ClusterDrainStatus | None, current: ClusterDrainStatus | None) -> list[DrainEvent]:
    """``(type, reason, message)`` of the Kubernetes Events a status change calls for: a group
    that started moving, was evicted, is Ready again or Blocked (``kubectl describe ic``)."""
    if current is None:
        return []
    before = {g.key: g for g in previous.groups} if previous else {}
    events: list[DrainEvent] = []
    for g in current.groups:
        old = before.get(g.key)
        what = f"{g.namespace}/{g.workload} replica {g.replica}: {g.message}"
        if old is None or old.state != g.state:
            if g.state == "Moving":
                events.append(("Normal", "DrainMoving", what))
            elif g.state == "Ready":
                events.append(("Normal", "DrainMoved", what))
            elif g.state == "Blocked":
                events.append(("Warning", "DrainBlocked", what))
        elif g.evicted_at is not None and old.evicted_at is None:
            events.append(("Normal", "DrainEvicted", what))
    return events[:16]
