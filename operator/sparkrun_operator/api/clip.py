"""Bounded echoes of tenant and upstream text in messages (issue 23). Pure.

Every message that quotes text the product did not write (a caller's URL, an upstream server's
error body, a tool's report) goes through :func:`clip`, so a hostile value cannot make a job
error, an event or a status condition unbounded (docs/reliability.md lists the figures).
"""

from __future__ import annotations

from typing import Final

#: What marks text that was cut.
ELLIPSIS: Final = "…"
#: A caller's value quoted in a message (a URL, a name): characters.
ECHO_MAX: Final = 256
#: What an upstream server wrote (an error body) inside a message: characters.
SERVER_TEXT_MAX: Final = 1024
#: One error message: a tool's report, a daemon error's detail (a job's error), a status message.
MESSAGE_MAX: Final = 4096
#: How far back a cut may move so that one secret-shaped word (a run of the characters of
#: tokens, keys and base64: the redaction recognises a secret only whole, and a half one would
#: escape it) is not cut in half: at most this, or a quarter of the limit.
_WORD_BACKOFF: Final = 256
_WORD: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.+/=")


def clip(text: str, limit: int = MESSAGE_MAX) -> str:
    """``text`` itself when it has at most ``limit`` characters, else its beginning and
    :data:`ELLIPSIS`, ``limit`` characters in all. When the cut falls inside a secret-shaped
    word, it moves back to the word's start if that is near (:data:`_WORD_BACKOFF`)."""
    if len(text) <= limit:
        return text
    keep = max(0, limit - len(ELLIPSIS))
    head = text[:keep]
    if keep and text[keep] in _WORD and head[-1] in _WORD:
        window = min(_WORD_BACKOFF, keep // 4)
        start = keep
        while start > keep - window and head[start - 1] in _WORD:
            start -= 1
        if start > keep - window:
            head = head[:start]
    return head + ELLIPSIS


def echo(value: object, limit: int = ECHO_MAX) -> str:
    """A caller's value quoted in a message: its ``repr`` (quotes and escapes, so no raw line
    break), of at most ``limit`` characters of the value."""
    return repr(clip(str(value), limit))
