"""Downloader failures: exit codes, actionable messages, and retries of transient Hub errors.

Exit codes of ``python -m sparkrun_operator.runtime.download`` (the controller maps them to
conditions; ``retryable`` ones may succeed when run again):

====  =====================  =========  ===================================================
code  reason                 retryable  meaning
====  =====================  =========  ===================================================
0     -                      -          done (inspect: every file is present and valid)
1     Failed                 no         an unexpected error (the message says which)
2     InvalidArguments       no         bad command line
3     AuthenticationRequired no         gated or private repository: no token, or the token
                                        has no access
4     RepositoryNotFound     no         no such repository on that endpoint
5     RevisionNotFound       no         no such branch, tag or commit
6     EntryNotFound          no         the Hub listed a file it then does not serve
7     VerificationFailed     yes        files missing or invalid (inspect), or still invalid
                                        after a fresh download
8     HubUnavailable         yes        connection errors, timeouts, 429 or 5xx after retries
9     StorageError           no         the cache volume is full, read-only or not writable
10    NotCached              no         inspect/repair: no manifest for that revision
====  =====================  =========  ===================================================

An endpoint's own words (``huggingface_hub`` puts the server's error body into its exception
text) are quoted in a message cut at ``SERVER_TEXT_MAX`` characters, and a whole message at
``MESSAGE_MAX`` (``api/clip.py``): a hostile endpoint answering megabytes cannot make the
report, the job error or the ModelCache's status unbounded.
"""

from __future__ import annotations

import errno
import time
from collections.abc import Callable
from typing import TypeVar

import httpx2
from huggingface_hub import errors as hf_errors

from sparkrun_operator.api.clip import ECHO_MAX, MESSAGE_MAX, SERVER_TEXT_MAX, clip

T = TypeVar("T")

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_AUTH = 3
EXIT_REPO_NOT_FOUND = 4
EXIT_REVISION_NOT_FOUND = 5
EXIT_ENTRY_NOT_FOUND = 6
EXIT_INVALID = 7
EXIT_UNAVAILABLE = 8
EXIT_STORAGE = 9
EXIT_NOT_CACHED = 10

REASONS: dict[int, str] = {
    EXIT_FAILED: "Failed",
    EXIT_USAGE: "InvalidArguments",
    EXIT_AUTH: "AuthenticationRequired",
    EXIT_REPO_NOT_FOUND: "RepositoryNotFound",
    EXIT_REVISION_NOT_FOUND: "RevisionNotFound",
    EXIT_ENTRY_NOT_FOUND: "EntryNotFound",
    EXIT_INVALID: "VerificationFailed",
    EXIT_UNAVAILABLE: "HubUnavailable",
    EXIT_STORAGE: "StorageError",
    EXIT_NOT_CACHED: "NotCached",
}
RETRYABLE = frozenset({EXIT_INVALID, EXIT_UNAVAILABLE})
_TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})
_STORAGE_ERRNOS = frozenset({errno.ENOSPC, errno.EROFS, errno.EACCES, errno.EPERM, errno.EDQUOT})


class DownloadError(Exception):
    """A failure with an exit code and a message that names what to do (at most ``MESSAGE_MAX``
    characters)."""

    def __init__(self, code: int, message: str) -> None:
        message = clip(message, MESSAGE_MAX)
        super().__init__(message)
        self.code = code
        self.message = message

    @property
    def reason(self) -> str:
        return REASONS.get(self.code, "Failed")

    @property
    def retryable(self) -> bool:
        return self.code in RETRYABLE


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _said(exc: BaseException) -> str:
    """An exception's text, which may quote the server's answer: at most ``SERVER_TEXT_MAX``."""
    return clip(str(exc), SERVER_TEXT_MAX)


def is_transient(exc: BaseException) -> bool:
    for err in _chain(exc):
        if isinstance(err, httpx2.TransportError | TimeoutError | ConnectionError):
            return True
        if isinstance(err, hf_errors.HfHubHTTPError) and _status(err) in _TRANSIENT_STATUS:
            return True
    return False


def retry_after(exc: BaseException) -> float | None:
    for err in _chain(exc):
        response = getattr(err, "response", None)
        value = getattr(response, "headers", {}).get("retry-after") if response is not None else None
        if value:
            try:
                return float(value)
            except ValueError:
                return None
    return None


def classify(
    exc: BaseException, *, repo: str, revision: str, endpoint: str, has_token: bool
) -> DownloadError:
    """Map a library or OS exception to a :class:`DownloadError` with an actionable message."""
    chain = _chain(exc)
    endpoint = clip(endpoint, ECHO_MAX)  # NB: a caller's URL: quoted cut
    where = f"{repo} on {endpoint}"
    for err in chain:
        if isinstance(err, DownloadError):
            return err
        if isinstance(err, hf_errors.GatedRepoError):
            if has_token:
                return DownloadError(
                    EXIT_AUTH,
                    f"{where} is gated and the token has no access to it: accept the repository's conditions "
                    f"at {endpoint}/{repo} with the account that owns the token, or use another token.",
                )
            return DownloadError(
                EXIT_AUTH,
                f"{where} is gated: set source.huggingFace.tokenSecretRef to a Secret holding a token of an "
                f"account that accepted its conditions at {endpoint}/{repo}.",
            )
        if isinstance(err, hf_errors.RevisionNotFoundError):
            return DownloadError(
                EXIT_REVISION_NOT_FOUND,
                f"revision {revision!r} not found in {where}: use an existing branch, tag or full commit "
                "(see the repository's refs).",
            )
        if isinstance(err, hf_errors.RemoteEntryNotFoundError):
            return DownloadError(
                EXIT_ENTRY_NOT_FOUND, f"a file of {where} at {revision} is not served: {_said(err)}"
            )
        if isinstance(err, hf_errors.RepositoryNotFoundError) or (
            isinstance(err, hf_errors.HfHubHTTPError) and _status(err) in (401, 403)
        ):
            hint = (
                "check the repository id, and that the token's account can read it"
                if has_token
                else "check the repository id; a private repository needs source.huggingFace.tokenSecretRef"
            )
            code = EXIT_REPO_NOT_FOUND if isinstance(err, hf_errors.RepositoryNotFoundError) else EXIT_AUTH
            return DownloadError(code, f"{where} was not found or is not accessible: {hint}.")
    for err in chain:
        if isinstance(err, OSError) and err.errno in _STORAGE_ERRNOS:
            return DownloadError(EXIT_STORAGE, f"cannot write the cache volume: {_said(err)}")
    if is_transient(exc) or any(isinstance(e, hf_errors.LocalEntryNotFoundError) for e in chain):
        said = _said(exc)
        return DownloadError(EXIT_UNAVAILABLE, f"{endpoint} is unavailable for {repo}: {said}; retry later.")
    return DownloadError(EXIT_FAILED, f"downloading {where} failed: {type(exc).__name__}: {_said(exc)}")


def with_retries(
    fn: Callable[[], T],
    *,
    attempts: int = 5,
    base: float = 1.0,
    cap: float = 30.0,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Call ``fn``, retrying transient errors (honouring ``Retry-After``) with capped backoff."""
    delay = base
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except Exception as exc:
            if attempt == attempts or not is_transient(exc):
                raise
            wait = retry_after(exc)
            sleep(min(cap, wait if wait is not None else delay))
            delay = min(cap, delay * 2)
    raise AssertionError("unreachable")
