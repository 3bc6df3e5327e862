"""kopf's diff base, built only for the kinds that have change handlers.

On every watch event of every resource it watches, kopf builds the object's "essence" (a deep
copy of the whole body, then pruned) to diff it against the last handled one, whether or not
any change handler (``on.create``/``on.update``/``on.field``) exists for that resource. Only
Recipes have such handlers here; workloads, pods, JobSets and the rest are followed with event
handlers, indexes and daemons, which never look at the diff. At 300 workloads that deep copy
was about 9% of the operator's CPU (``bench.scale`` under py-spy); this storage returns an empty
essence for every other kind, so kopf diffs nothing for them.

A body without ``kind`` (never seen from kopf's watches and lists, which set it) gets the full
essence, as before.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any, cast

import kopf


class ChangeHandledKindsDiffBase(kopf.AnnotationsDiffBaseStorage):
    """:class:`kopf.AnnotationsDiffBaseStorage` for ``kinds`` ((group, kind) pairs) only."""

    def __init__(self, *, kinds: Collection[tuple[str, str]], prefix: str, key: str) -> None:
        super().__init__(prefix=prefix, key=key)
        self.kinds = frozenset(kinds)

    def build(self, *, body: Any, extra_fields: Iterable[Any] | None = None) -> kopf.BodyEssence:
        kind = body.get("kind")
        group = str(body.get("apiVersion") or "").rpartition("/")[0]
        if kind is not None and (group, kind) not in self.kinds:
            return cast(kopf.BodyEssence, {})
        return super().build(body=body, extra_fields=extra_fields)
