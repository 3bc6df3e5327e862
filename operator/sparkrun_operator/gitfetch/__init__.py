"""Bounded, shallow git fetches of recipe registries, in memory (ADR 0052): dulwich in the
operator's process, never a ``git`` program or a Job.

``fetch_tree(GitSource, FetchLimits) -> GitTree`` (``resolve_commit``: the ref's commit from
the refs alone); failures are ``GitFetchError(kind, message)``
with ``kind`` one of ``unreachable``, ``not_found``, ``auth``, ``too_large``, ``timeout``,
``invalid``. Sits beside ``k8s``: imports ``api``, ``recipe`` (the manifest's subpaths),
``safeload`` and ``errors``, nothing above.
"""

from sparkrun_operator.gitfetch.fetch import fetch_tree, resolve_commit
from sparkrun_operator.gitfetch.source import (
    MAX_CONCURRENT_FETCHES,
    FetchLimits,
    GitFetchError,
    GitSource,
    GitTree,
)

__all__ = [
    "MAX_CONCURRENT_FETCHES",
    "FetchLimits",
    "GitFetchError",
    "GitSource",
    "GitTree",
    "fetch_tree",
    "resolve_commit",
]
