"""Redaction of secrets from diagnostic records, results and log lines (ADR 0021, ADR 0037).

Three rules, applied to every JSON value (dict keys and values, list items, strings):

- **by name**: the value of a dict key that names a secret (``token``, ``apiKey``, ``api_key``,
  ``password``, ``authorization``, ``credentials`` ... but not ``tokens``, ``tokenizer``,
  ``author``, ``authentic``), the ``value`` of a ``{"name", "value"}`` pair (environment
  variables, headers) whose name does, and, inside strings (log lines, tracebacks, event
  messages), ``NAME=value`` / ``NAME: value`` / ``"NAME": "value"`` with such a name;
- **by shape**: bearer/basic credentials after ``Bearer``/``Basic``, JSON Web Tokens and the
  well-known token formats (Hugging Face ``hf_``, OpenAI ``sk-``, GitHub ``ghp_``/``github_pat_``,
  AWS access key ids, Slack ``xox.-``);
- **by value**: any occurrence of a known secret value (the values of the Secrets the workloads
  reference, and each of their lines), whatever surrounds it.

Each redacted value becomes ``[redacted]``.

Every string redacted here is a tenant's (its spec, its pods' output), so every pass is linear
in the text (ADR 0037): the patterns are RE2 automata (``google-re2``, no backtracking), run
over the UTF-8 bytes in Latin-1 mode (ASCII classes and case folding; a splice never falls inside
a character: every match starts and ends next to ASCII or is a whole encoded value). Known values
go through at most ``GROUP`` per automaton (one pass each), values longer than ``LONG_VALUE``
through ``bytes.replace`` (two-way search, linear). :meth:`Redactor.apply` runs the work in a
worker thread once characters times passes exceed ``THREAD_AT`` (RE2 releases the GIL while it
matches), so an event loop keeps serving meanwhile (docs/reliability.md, "Tenant strings").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

import re2

__all__ = [
    "GROUP",
    "LONG_VALUE",
    "MAX_KNOWN",
    "MAX_KNOWN_CHARS",
    "MAX_LINES_CHARS",
    "MAX_LINES_PER_VALUE",
    "MIN_VALUE",
    "REDACTED",
    "THREAD_AT",
    "Redactor",
    "off_loop",
    "secret_name",
    "size",
]

T = TypeVar("T")

REDACTED = "[redacted]"
_REDACTED = REDACTED.encode()
#: Smallest known secret value redacted by value (shorter ones would erase ordinary text).
MIN_VALUE = 6
#: Known values per automaton (RE2's DFA stays small and fast up to here; measured in ADR 0037).
GROUP = 64
#: Known values longer than this are replaced with ``bytes.replace`` (linear for long needles).
LONG_VALUE = 4096
#: Known whole values one redactor keeps, and their characters; the lines of multi-line values
#: have a budget of their own, so one Secret of many short lines cannot crowd out the others'
#: values: at most ``2 * MAX_KNOWN / GROUP`` automata besides the long values (docs/reliability.md).
MAX_KNOWN = 512
MAX_KNOWN_CHARS = 4 << 20
MAX_LINES_CHARS = 256 << 10
#: Lines of one multi-line value kept (a PEM key has about 50, a kubeconfig about 20).
MAX_LINES_PER_VALUE = 128
#: Work (characters times passes) above which :meth:`Redactor.apply` uses a worker thread.
THREAD_AT = 64 * 1024


class _Match(Protocol):
    def span(self, group: int = 0) -> tuple[int, int]: ...


class _Pattern(Protocol):
    def finditer(self, text: bytes) -> Iterator[_Match]: ...

    def search(self, text: bytes) -> _Match | None: ...


def _compile(pattern: bytes) -> _Pattern:
    options = re2.Options()
    options.encoding = re2.Options.Encoding.LATIN1
    options.log_errors = False
    compiled: _Pattern = re2.compile(pattern, options)
    return compiled


_N = rb"[A-Za-z0-9_.-]"  # a character of a name (NAME=...)
_SPACE = rb"[\t-\r\x1c-\x1f ]"  # Python's str.isspace() of ASCII
_VALUE = rb"[^\t-\r\x1c-\x1f \"',;&}\]]"
_PLAIN = (
    rb"pass(?:word|wd|phrase)|secret|api[-_.]?key|apikey|access[-_.]?key|private[-_.]?key"
    rb"|credentials?|cookie|session[-_.]?id|bearer|signature"
)
# NB: RE2 has no lookahead. "token" names a secret unless "s" or "iz" follows (tokens,
# tokenizer), "auth"/"authorization" unless "or" or "en" follows (author, authentic): the
# character after the word is matched instead (any but those), or the end: of the key for
# secret_name, of the name's run of characters in NAME=value.
_NAME = _compile(
    rb"(?i)" + _PLAIN
    + rb"|token(?:$|[^si]|i(?:$|[^z]))"
    + rb"|auth(?:orization)?(?:$|[^oe]|o(?:$|[^r])|e(?:$|[^n]))"
)  # fmt: skip
_RUN = (
    rb"(?i:" + _N + rb"*(?:(?:" + _PLAIN + rb")" + _N + rb"*"
    + rb"|token(?:[a-hj-rt-z0-9_.-]" + _N + rb"*|i(?:[a-y0-9_.-]" + _N + rb"*)?)?"
    + rb"|auth(?:orization)?(?:[a-df-np-z0-9_.-]" + _N + rb"*"
    + rb"|o(?:[a-qs-z0-9_.-]" + _N + rb"*)?|e(?:[a-mo-z0-9_.-]" + _N + rb"*)?)?))"
)  # fmt: skip
#: NAME=value, NAME: value, "NAME": "value" ...; group 1 is the value.
_ASSIGNMENT = _compile(
    _RUN + rb"[\"']?(?:" + _SPACE + rb"*[=:]" + _SPACE + rb"*|" + _SPACE + rb"*[\"']?" + _SPACE + rb"*:"
    + _SPACE + rb"*[\"']?)[\"']?(" + _VALUE + rb"+)"
)  # fmt: skip
#: Token shapes, applied one after the other (as a combined pattern, one shape's match could hide
#: the context of another: "sk-...-Bearer <token>"); a bearer/basic credential is group 1 (the
#: scheme is kept).
_BEARER = _compile(rb"\b(?i:bearer|basic)" + _SPACE + rb"+([A-Za-z0-9._~+/=-]{4,})")
_SHAPES = tuple(
    _compile(shape)
    for shape in (
        rb"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*",
        rb"\b(?:hf|ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}",
        rb"\bsk-[A-Za-z0-9_-]{16,}",
        rb"\bxox[abprs]-[A-Za-z0-9-]{10,}",
        rb"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b",
    )
)


def _encode(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _literal(value: str) -> bytes:
    """``value`` as an RE2 pattern (Latin-1 mode: the bytes of its UTF-8, metacharacters quoted)."""
    quoted: bytes = re2.escape(_encode(value))
    return quoted


def _alternation(values: list[str]) -> list[_Pattern | bytes]:
    """One automaton matching any of ``values`` (longest first); each value by itself should
    RE2 refuse the automaton (its memory budget)."""
    if not values:
        return []
    try:
        return [_compile(b"|".join(map(_literal, values)))]
    except re2.error:
        return [_encode(value) for value in values]


def secret_name(name: str) -> bool:
    """Whether ``name`` (a key, variable or header name) names a secret."""
    return _NAME.search(_encode(name)) is not None


def _sub(pattern: _Pattern, data: bytes, group: int = 0) -> bytes:
    """``data`` with each match of ``pattern`` replaced by ``[redacted]`` from the start of its
    ``group`` on, except where that group starts ``[redacted`` (an earlier rule's replacement);
    a group ends where the match does. ``data`` itself when nothing was replaced."""
    pieces: list[bytes] = []
    append = pieces.append  # NB: this loop runs once per match (up to ~130,000 in 1 MiB)
    done = 0
    for start, end in _spans(pattern, data, group):
        if group and data.startswith(b"[redacted", start):
            continue
        append(data[done:start])
        append(_REDACTED)
        done = end
    if not pieces:
        return data
    append(data[done:])
    return b"".join(pieces)


def _spans(pattern: _Pattern, data: bytes, group: int) -> Iterator[tuple[int, int]]:
    """The span of ``group`` in each successive match of ``pattern`` (none empty here).

    NB: google-re2's ``finditer`` builds a match object per match, a third of the time of 1 MiB
    of dense ``token=x`` (ADR 0037); its compiled automaton answers the spans directly, so that
    is used when present (google-re2 1.1), ``finditer`` otherwise (``test_redact_linear`` checks
    which one runs)."""
    native = getattr(pattern, "_regexp", None)
    if native is None or _UNANCHORED is None:
        for found in pattern.finditer(data):
            yield found.span(group)
        return
    match, pos, stop = native.Match, 0, len(data)
    while pos < stop:
        spans = match(_UNANCHORED, data, pos, stop)
        whole = spans[0]
        if whole[0] < 0:
            return
        yield spans[group]
        pos = whole[1] if whole[1] > pos else pos + 1


#: google-re2's "unanchored" argument of its automaton's ``Match`` (``None``: not this version).
_UNANCHORED: Any = getattr(getattr(re2, "_Anchor", None), "UNANCHORED", None)


class Redactor:
    """Redacts by name, shape and known values (see the module docstring)."""

    def __init__(self, values: Iterable[str] = ()) -> None:
        self.values: set[str] = set()  # whole values
        self.lines: set[str] = set()  # the lines of multi-line values
        #: Values and lines not kept (over ``MAX_KNOWN``, ``MAX_KNOWN_CHARS``, ``MAX_LINES_CHARS``):
        #: left to the name and shape rules.
        self.dropped = 0
        self._chars = 0
        self._line_chars = 0
        self._known: list[_Pattern | bytes] | None = None  # compiled when first needed
        for value in values:
            self.add(value)

    def add(self, value: str) -> None:
        value = value.strip()
        if len(value) < MIN_VALUE or value in self.values:
            return
        if len(self.values) >= MAX_KNOWN or self._chars + len(value) > MAX_KNOWN_CHARS:
            self.dropped += 1
            return
        self._chars += len(value)
        self.values.add(value)
        self._known = None
        lines = value.splitlines()
        if len(lines) < 2:
            return
        # Also as it appears inside one log line (multi-line values: each line), while there is
        # room: a Secret of 150,000 short lines would otherwise make 2,300 passes of every string.
        kept = 0
        for line in map(str.strip, lines):
            if len(line) >= MIN_VALUE and line not in self.values and line not in self.lines:
                full = len(self.lines) >= MAX_KNOWN or self._line_chars + len(line) > MAX_LINES_CHARS
                if full or kept >= MAX_LINES_PER_VALUE:
                    self.dropped += 1
                    continue
                kept += 1
                self._line_chars += len(line)
                self.lines.add(line)

    @property
    def passes(self) -> int:
        """How many passes over a string redaction takes (the known values', bearer, the other
        shapes, NAME=value)."""
        return len(self._known_passes()) + 1 + len(_SHAPES) + 1

    def _known_passes(self) -> list[_Pattern | bytes]:
        """The known values, longest first: an automaton per ``GROUP`` values, or a long value."""
        known = self._known
        if known is None:
            known, group = [], []
            for value in sorted(self.values | self.lines, key=lambda v: (-len(v), v)):
                if len(value) > LONG_VALUE:
                    known.append(_encode(value))
                    continue
                group.append(value)
                if len(group) == GROUP:
                    known += _alternation(group)
                    group = []
            known += _alternation(group)
            self._known = known
        return known

    def text(self, value: str) -> str:
        data = original = _encode(value)
        for known in self._known_passes():
            data = data.replace(known, _REDACTED) if isinstance(known, bytes) else _sub(known, data)
        data = _sub(_BEARER, data, 1)
        for shape in _SHAPES:
            data = _sub(shape, data)
        data = _sub(_ASSIGNMENT, data, 1)
        return value if data is original else data.decode("utf-8", "surrogatepass")

    def __call__(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            named = value.get("name")
            pair = isinstance(named, str) and secret_name(named)
            out: dict[Any, Any] = {}
            for key, item in value.items():
                scalar = item is not None and not isinstance(item, dict | list | bool)
                if scalar and (secret_name(str(key)) or (pair and key == "value")):
                    out[key] = REDACTED
                else:
                    out[key] = self(item)
            return out
        if isinstance(value, list | tuple):
            return [self(item) for item in value]
        return value

    async def apply(self, value: Any) -> Any:
        """``self(value)``; in a worker thread when it is large (``THREAD_AT``), so that the
        calling event loop keeps serving meanwhile. Many known values are compiled there too."""
        if self._known is None and self._chars + self._line_chars > THREAD_AT:
            await asyncio.to_thread(self._known_passes)
        return await off_loop(self, value, passes=self.passes)


async def off_loop(call: Callable[[Any], T], value: Any, *, passes: int = 1) -> T:
    """``call(value)``, in a worker thread when ``value`` holds more than ``THREAD_AT``
    characters per pass (its strings, keys and items, counted up to that bound)."""
    if size(value, limit=THREAD_AT // max(1, passes)) * max(1, passes) > THREAD_AT:
        return await asyncio.to_thread(call, value)
    return call(value)


def size(value: Any, *, limit: int) -> int:
    """The characters of ``value``'s strings plus one per item, counted until past ``limit``."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, dict):
            total += len(item)
            stack += item.keys()
            stack += item.values()
        elif isinstance(item, list | tuple):
            total += len(item)
            stack += item
        else:
            total += 1
    return total
