"""What to fetch, within which limits, what comes back, and how a fetch fails.

A registry URL is ``https``, ``http`` or ``git`` only (``file://``, ``ssh`` and ``ext::``
would reach the operator's own files or run programs), with no user information in it: the
credentials come from a Secret, as :class:`GitSource` ``username``/``password``, and go only to
the URL's origin. Messages quote the URL (which never holds a credential) cut at
``api.clip.ECHO_MAX`` characters, and a message built from a server's or a library's text has
the password and username scrubbed out before anyone reads it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final, Literal
from urllib.parse import urlsplit

from sparkrun_operator.api.clip import clip, echo
from sparkrun_operator.api.credentials import origin_of
from sparkrun_operator.errors import SparkrunError

KIB: Final = 1024
MIB: Final = 1024 * KIB
#: Fetches running at once in this process; more wait (within their own deadline).
MAX_CONCURRENT_FETCHES: Final = 2
#: The ref a registry's ``ref`` names when it is a commit: 40 lowercase hex digits.
COMMIT_SHA: Final = re.compile(r"[0-9a-f]{40}")
_REF: Final = re.compile(r"[A-Za-z0-9._/-]{1,255}")
_GIT_HOST: Final = re.compile(r"[a-z0-9_]([a-z0-9_.-]{0,251}[a-z0-9_])?")
_SCHEMES: Final = ("https", "http", "git")

Kind = Literal["unreachable", "not_found", "auth", "too_large", "timeout", "invalid"]


@dataclass(frozen=True)
class GitSource:
    """A repository, the ref to fetch (``None``: the remote's HEAD; a branch, a tag or a full
    40-hex commit), the subpath the caller reads, and the credentials for its origin."""

    url: str
    ref: str | None = None
    subpath: str = ""
    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class FetchLimits:
    """Bounds of one fetch: bytes received (the pack and what precedes it), bytes the pack
    inflates to, files returned, the size of one file, the whole call's seconds, tree entries
    walked and the length of a path."""

    max_pack_bytes: int = 32 * MIB
    max_files: int = 4096
    max_file_bytes: int = 1 * MIB
    timeout_s: float = 60.0
    #: The pack's objects inflated, and their number: at these bounds one fetch holds about
    #: 100 MiB (dulwich keeps ~500 bytes per object besides its data), so that
    #: MAX_CONCURRENT_FETCHES of them fit in the operator's 512 MiB with the rest of it.
    max_inflated_bytes: int = 64 * MIB
    max_objects: int = 50_000
    #: Tree entries walked under the registry's paths (a pack of a few trees that name each
    #: other's subtrees again and again walks as millions of directories).
    max_entries: int = 65_536
    #: The longest path returned (``RecipeRegistry`` status and annotations quote paths).
    max_path_chars: int = 1024


@dataclass(frozen=True)
class GitTree:
    """The fetched commit and its files: every blob under the subpath, plus
    ``.sparkrun/registry.yaml`` and the subpaths that manifest declares, by path relative to the
    repository root (POSIX). ``skipped``: paths left out and why (a symlink, a submodule, a file
    over the size limit); ``modes``: each file's git mode (``0o100755`` for an executable)."""

    commit: str
    files: Mapping[str, bytes]
    skipped: Mapping[str, str] = field(default_factory=dict)
    modes: Mapping[str, int] = field(default_factory=dict)


class GitFetchError(SparkrunError):
    """A fetch that failed: ``kind`` says how, the message says what (never a credential)."""

    def __init__(self, kind: Kind, message: str) -> None:
        super().__init__(message)
        self.kind: Kind = kind
        self.message = message


def shown(url: str) -> str:
    """``url`` as messages quote it: cut, and any user information replaced by ``***`` (a URL
    that holds one is refused, and the refusal must not repeat it)."""
    scheme, sep, rest = url.partition("://")
    if sep:
        authority, slash, path = rest.partition("/")
        if "@" in authority:
            url = f"{scheme}://***@{authority.rsplit('@', 1)[1]}{slash}{path}"
    return echo(url)


def scrub(text: str, source: GitSource) -> str:
    """``text`` (a server's or a library's) cut, with the source's credentials taken out."""
    for secret in (source.password, source.username):
        if secret and len(secret) >= 3:
            text = text.replace(secret, "***")
    return clip(text)


def check_source(source: GitSource) -> None:
    """Refuse a URL, ref or subpath a fetch must not follow (``GitFetchError("invalid")``)."""
    url = source.url
    if not isinstance(url, str) or not url or len(url) > 2048:
        raise GitFetchError(
            "invalid", "the registry URL must be an https, http or git URL of at most 2048 characters"
        )
    scheme = url.split(":", 1)[0].lower()
    if scheme not in _SCHEMES or not url.lower().startswith(f"{scheme}://"):
        raise GitFetchError(
            "invalid", f"registry URL {shown(url)}: only https://, http:// and git:// are fetched"
        )
    if scheme == "git":
        _check_git_url(url)
    elif "@" in url.split("://", 1)[1].split("/", 1)[0]:
        raise GitFetchError(
            "invalid", f"registry URL {shown(url)}: no user information (credentials come from a Secret)"
        )
    else:
        try:
            origin_of(url, what="registry URL")
        except ValueError:
            raise GitFetchError(
                "invalid", f"registry URL {shown(url)} is not a plain https or http URL"
            ) from None
    if not urlsplit(url).path.strip("/"):
        raise GitFetchError("invalid", f"registry URL {shown(url)} names no repository path")
    if source.ref is not None and (not _REF.fullmatch(source.ref) or ".." in source.ref):
        raise GitFetchError("invalid", f"ref {echo(source.ref)} is not a branch, tag or commit name")
    check_subpath(source.subpath)
    if source.password is not None and source.username is None:
        raise GitFetchError("invalid", "a password needs a username")


def _check_git_url(url: str) -> None:
    if any(c in url for c in "@\\?# \t\r\n") or not url.isascii():
        raise GitFetchError(
            "invalid", f"registry URL {shown(url)}: no user information, query, fragment or whitespace"
        )
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 -- raises on an invalid port
    except ValueError:
        raise GitFetchError("invalid", f"registry URL {shown(url)}: invalid port") from None
    if not _GIT_HOST.fullmatch((parts.hostname or "").lower()):
        raise GitFetchError("invalid", f"registry URL {shown(url)}: invalid host")


def check_subpath(subpath: str) -> None:
    """A subpath is relative, ``/``-separated, without ``.``/``..`` segments or backslashes."""
    if not subpath or subpath == "/":
        return
    segments = subpath.strip("/").split("/")
    if (
        len(subpath) > 1024
        or subpath.startswith("/")
        or "\\" in subpath
        or any(s in ("", ".", "..") or not s.isprintable() for s in segments)
    ):
        raise GitFetchError(
            "invalid", f"subpath {echo(subpath)} must be a relative path inside the repository"
        )


def normal_subpath(subpath: str) -> str:
    """``""`` for the repository root (``""`` or ``/``), else the path without outer slashes."""
    return subpath.strip("/")
