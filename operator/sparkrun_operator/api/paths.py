"""File paths inside a model revision, as the cache lays them out (pure; issue 23).

A revision's file paths become paths on the cache volume (``snapshots/<commit>/<path>``), and
they come from whoever answered as the Hub (perhaps a caller's own server) or from a manifest a
caller imported. So a path is relative and ``/``-separated, without ``.``, ``..`` or empty
parts, backslashes or control characters, and at most :data:`MAX_PATH` characters: checked by
the downloader on what an endpoint answered (``runtime/hubanswer.py``) and by ``model_cache.import``
on the manifest it is given, at submission (``ops/executors/modelcache/files.py``).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["MAX_PATH", "safe_relative_path"]

#: The longest file path of a revision (a repository's own paths are far shorter).
MAX_PATH: Final = 1024
_UNSAFE: Final = re.compile(r"[\x00-\x1f\x7f\\]")


def safe_relative_path(value: object) -> bool:
    """Whether ``value`` is a file path that stays inside the directory it is joined to."""
    if not isinstance(value, str) or not value or len(value) > MAX_PATH or _UNSAFE.search(value):
        return False
    return not any(part in ("", ".", "..") for part in value.split("/"))
