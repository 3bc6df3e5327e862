"""Who serves a model name: the one rule the gateway and the workload planner share.

Every InferenceWorkload claims model names: its served name and its aliases, as the one naming
rule gives them (``plan/served.py``: ``status.model`` once the operator resolved the workload and
its recipe; a recipe-based workload not resolved yet claims nothing). Names are global (clients
send only ``model``), so two workloads, in any namespaces, may claim one name. Then:

**the oldest claim keeps the name** — the workload with the earliest
``metadata.creationTimestamp``; equal (or missing) timestamps are ordered by namespace, then
name. A served name and an alias rank alike: a newer workload can never take a name that an older
one already routes, whichever kind of name it is, so no tenant can divert another's traffic by
creating a workload. A claim without a timestamp (a routing file) ranks after every timestamped
one.

The loser keeps every name it does win; the gateway routes it by those, and the planner reports
the lost ones on the workload's ``Routable`` condition (reason ``NameConflict``, naming the
winner).

Before any of that, the administrator's name policy (``api/namepolicy.py``: prefixes per
namespace) decides which names a workload may claim at all: a name outside its namespace's
prefixes is **withheld** (:attr:`Claim.withheld`): it is not among the claim's
:attr:`~Claim.names`, so it neither wins nor blocks a name in the names index or the gateway's
table, whatever the workload's age; the planner reports it as ``Routable=False``,
``NameNotAllowed``. Oldest-claim settles conflicts only between allowed claims. Pure: no I/O.
"""

from __future__ import annotations

import datetime as dt
import functools
import operator
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sparkrun_operator.api import namepolicy
from sparkrun_operator.api.namepolicy import NamePolicy
from sparkrun_operator.plan import served

_LAST = dt.datetime.max.replace(tzinfo=dt.UTC)


@dataclass(frozen=True, kw_only=True)
class Claim:
    """The model names one workload claims."""

    namespace: str
    name: str
    served: str
    aliases: tuple[str, ...] = ()
    created: dt.datetime | None = None
    #: Names the workload serves but its namespace may not claim (the name policy): never
    #: among :attr:`names`.
    withheld: frozenset[str] = frozenset()

    # NB: cached (a frozen dataclass keeps them in its __dict__, outside eq and hash): a pass
    # compares one claim with every rival sharing a name, and many workloads may share one.
    @functools.cached_property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @functools.cached_property
    def names(self) -> tuple[str, ...]:
        """The names claimed: the served name and the aliases, less the withheld ones."""
        every = (self.served, *self.aliases)
        return tuple(n for n in every if n not in self.withheld) if self.withheld else every

    @functools.cached_property
    def _rank(self) -> str:
        # NB: one string that sorts as (created, namespace, name) would: a fixed-width UTC time,
        # then the names separated by NUL (which no Kubernetes name contains), so "a" < "ab".
        when = self.created or _LAST
        when = when.astimezone(dt.UTC) if when.tzinfo else when  # naive: UTC, as _time reads it
        created = when.strftime("%Y-%m-%dT%H:%M:%S.%f")
        return f"{created}\0{self.namespace}\0{self.name}"

    def rank(self) -> str:
        """Smaller wins (see the module docs): compare ranks only with each other."""
        return self._rank


@dataclass(frozen=True, kw_only=True)
class Conflict:
    """A name ``loser`` claims that ``winner`` keeps."""

    model: str
    alias: bool
    winner: Claim

    def describe(self) -> str:
        kind = "alias" if self.alias else "served name"
        return f"{kind} {self.model!r} is served by {self.winner.key} (older claim)"


_RANK = operator.attrgetter("_rank")  # Claim.rank() without a Python call per claim


def _time(value: Any) -> dt.datetime | None:
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def claim_of(
    obj: Mapping[str, Any], names: served.Served | None = None, *, policy: NamePolicy = namepolicy.OPEN
) -> Claim | None:
    """The claim of a raw InferenceWorkload (``None`` without a name, or without names yet:
    :func:`~sparkrun_operator.plan.served.of_workload`, or ``names`` when the caller has them
    already), the names ``policy`` refuses its namespace withheld. A workload being deleted
    still claims: callers that ignore such workloads skip them."""
    meta = obj.get("metadata") or {}
    if not meta.get("name"):
        return None
    found = names if names is not None else served.of_workload(obj)
    if found is None:
        return None
    return claim_for(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta["name"]),
        created=_time(meta.get("creationTimestamp")),
        names=found,
        policy=policy,
    )


def claim_for(
    *,
    namespace: str,
    name: str,
    created: dt.datetime | None,
    names: served.Served,
    policy: NamePolicy = namepolicy.OPEN,
) -> Claim:
    """The claim of the workload ``namespace/name`` serving ``names`` (the planner's own claim,
    from the names it has just resolved), the names ``policy`` refuses ``namespace`` withheld."""
    aliases = tuple(a for a in dict.fromkeys(names.aliases) if a != names.served_name)
    return Claim(
        namespace=namespace,
        name=name,
        served=names.served_name,
        aliases=aliases,
        created=created,
        withheld=frozenset(policy.refused(namespace, (names.served_name, *aliases))),
    )


def owners(claims: Iterable[Claim]) -> dict[str, Claim]:
    """Model name -> the claim that keeps it."""
    out: dict[str, Claim] = {}
    for claim in claims:
        for model in claim.names:
            held = out.get(model)
            if held is None or (held.key != claim.key and claim.rank() < held.rank()):
                out[model] = claim
    return out


def conflicts(claim: Claim, holders: Callable[[str], Iterable[Claim]]) -> list[Conflict]:
    """The names of ``claim`` that another claim keeps (the rule of :func:`owners`), where
    ``holders(model)`` gives every claim of one name (the names index; it may include ``claim``):
    one pass over each of the claim's names."""
    out = []
    mine = claim.rank()
    for model in claim.names:
        # NB: min() with a C-level key: this runs on every planning of every workload, over
        # every claim of its names (1,000 workloads may serve one model). Ranks of two claims
        # tie only for one workload (its namespace and name are part of the rank).
        oldest = min(holders(model), key=_RANK, default=None)
        if oldest is not None and oldest.key != claim.key and oldest.rank() < mine:
            out.append(Conflict(model=model, alias=model != claim.served, winner=oldest))
    return out
