"""What an endpoint answered about a revision, checked before any of it names a path (issue 23).

The commit, each file's path and its blob id or sha256 become paths on the cache volume
(``snapshots/<commit>/<path>``, ``blobs/<etag>``, ``sparkrun/manifests/<folder>/<commit>.json``),
and an endpoint may be a caller's own server, as may the origin recorded in an imported manifest.
So a commit must be 40 lowercase hex digits, a blob id 40 and a sha256 64, and a path relative,
``/``-separated, without ``.``, ``..`` or empty parts, backslashes or control characters, at most
``api.paths.MAX_PATH`` characters; anything else fails the command (exit code 1) before a byte is
written, naming the value cut (``api/clip.py``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final

from sparkrun_operator.api.clip import echo
from sparkrun_operator.api.paths import safe_relative_path
from sparkrun_operator.runtime import hferrors
from sparkrun_operator.runtime.hfcache import FileEntry, Manifest

_COMMIT: Final = re.compile(r"^[0-9a-f]{40}$")
_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")


def _refuse(what: str, value: object) -> hferrors.DownloadError:
    return hferrors.DownloadError(
        hferrors.EXIT_FAILED, f"the endpoint answered an invalid {what}: {echo(value, 120)}"
    )


def commit(value: object) -> str:
    """``value`` when it is a full commit id."""
    if not isinstance(value, str) or not _COMMIT.match(value):
        raise _refuse("commit", value)
    return value


def path(value: object) -> str:
    """``value`` when it is a safe relative file path (``api/paths.py``)."""
    if not safe_relative_path(value):
        raise _refuse("file path", value)
    assert isinstance(value, str)
    return value


def entries(files: Iterable[FileEntry]) -> list[FileEntry]:
    """``files`` when every path, blob id and sha256 is well formed."""
    checked = []
    for entry in files:
        path(entry.path)
        if not _COMMIT.match(entry.blob_id) and not (entry.lfs and _SHA256.match(entry.blob_id)):
            raise _refuse(f"blob id of {echo(entry.path, 120)}", entry.blob_id)
        if entry.sha256 is not None and not _SHA256.match(entry.sha256):
            raise _refuse(f"sha256 of {echo(entry.path, 120)}", entry.sha256)
        checked.append(entry)
    return checked


def manifest(found: Manifest) -> Manifest:
    """``found`` (read from the volume, perhaps imported) when its commit and files are well formed."""
    commit(found.commit)
    entries(found.files)
    return found
