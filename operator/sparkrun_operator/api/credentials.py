"""Where the credentials the operator holds may be sent (ADR 0040).

Pure. An administrator lists, per credential, the endpoints it may go to
(``--credential-endpoints``, chart value ``operator.credentials.allowedEndpoints``); anything
that attaches such a credential first asks :meth:`CredentialEndpoints.permits`. An endpoint
elsewhere gets anonymous requests. Matching is by origin only: the scheme, the lowercased host
and the port (the scheme's default when absent) are equal; paths do not matter. URLs are parsed
with :func:`urllib.parse.urlsplit`, never matched as strings, and refused outright when a client
could read them differently from this parser: user information (``https://huggingface.co@evil``),
backslashes, whitespace or control characters, a query or fragment, a host outside ASCII letters,
digits, ``.``, ``-`` and ``_`` (or a bracketed IPv6 address), or an invalid port. A host may
end in one dot (a fully qualified name, resolved without the DNS search path): it is another
origin than the name without it. Messages quote a URL cut at ``api.clip.ECHO_MAX`` characters.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from sparkrun_operator.api.clip import ECHO_MAX, clip, echo

#: The operator's Hugging Face Hub token (``--hub-token-secret``).
HUGGING_FACE: Final = "huggingFace"
#: Every credential the operator can hold, and where each may go unless the administrator says.
DEFAULT_ALLOWED: Final[Mapping[str, tuple[str, ...]]] = {HUGGING_FACE: ("https://huggingface.co",)}
#: The chart value that sets the allowlist (named in every refusal and notice).
SETTING: Final = "operator.credentials.allowedEndpoints"
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_HOST = re.compile(r"^[a-z0-9_]([a-z0-9_.-]*[a-z0-9_])?$")
_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")


@dataclass(frozen=True, order=True)
class Origin:
    """``scheme://host:port``, normalized."""

    scheme: str
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        default = _DEFAULT_PORTS[self.scheme] == self.port
        return f"{self.scheme}://{host}" if default else f"{self.scheme}://{host}:{self.port}"


def origin_of(url: str, *, what: str = "endpoint", path: bool = True) -> Origin:
    """The origin of an http(s) ``url``; ``ValueError`` (naming ``what``) for anything a client
    could read differently. ``path=False``: nothing after the authority but an optional ``/``."""
    if not isinstance(url, str) or not url:
        raise ValueError(f"{what} must be an http(s) URL")
    shown = echo(url)  # NB: a caller's URL (up to 64K characters) is quoted cut, never whole
    if _UNSAFE.search(url) or not url.isascii():
        raise ValueError(f"{what} {shown}: no whitespace, control characters, backslashes or non-ASCII")
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. brackets around something that is not an IPv6 address
        raise ValueError(f"{what} {shown}: invalid host") from None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not url.lower().startswith(f"{scheme}://"):
        raise ValueError(f"{what} {shown} must be an http(s) URL")
    if "@" in parts.netloc:
        raise ValueError(f"{what} {shown}: user information (user@host) is not allowed")
    if parts.query or parts.fragment or "?" in url or "#" in url:
        raise ValueError(f"{what} {shown}: no query or fragment")
    if not path and parts.path not in ("", "/"):
        raise ValueError(f"{what} {shown}: scheme, host and port only (no path)")
    try:
        port = parts.port
    except ValueError:
        raise ValueError(f"{what} {shown}: invalid port") from None
    host = (parts.hostname or "").lower()
    if not _valid_host(host, bracketed=parts.netloc.startswith("[")):
        raise ValueError(f"{what} {shown}: invalid host")
    return Origin(scheme, host, port if port is not None else _DEFAULT_PORTS[scheme])


def _valid_host(host: str, *, bracketed: bool) -> bool:
    if bracketed:
        try:
            return ipaddress.ip_address(host).version == 6
        except ValueError:
            return False
    # NB: one trailing dot makes the name fully qualified: the resolver skips the search path
    # (a pod's ndots:5 tries hf.internal.<ns>.svc.cluster.local, ... first, which whoever creates
    # a namespace "internal" answers). It stays in the host, so "a.b." and "a.b" are two origins:
    # each resolves where the other might not (ADR 0040).
    name = host[:-1] if host.endswith(".") else host
    return len(name) <= 253 and _HOST.match(name) is not None and ".." not in name


@dataclass(frozen=True)
class CredentialEndpoints:
    """Per credential, the origins it may be sent to (a credential not listed goes nowhere)."""

    allowed: Mapping[str, frozenset[Origin]] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, Iterable[str]]) -> CredentialEndpoints:
        """From ``{credential: [scheme://host[:port], ...]}``; ``ValueError`` for an unknown
        credential or an entry that is not an origin."""
        if not isinstance(raw, Mapping):
            raise ValueError('an object such as {"huggingFace": ["https://huggingface.co"]}')
        allowed: dict[str, frozenset[Origin]] = {}
        for credential, urls in raw.items():
            if credential not in DEFAULT_ALLOWED:
                known = ", ".join(DEFAULT_ALLOWED)
                raise ValueError(f"unknown credential {echo(credential)} (known: {known})")
            if isinstance(urls, str) or not isinstance(urls, Iterable):
                raise ValueError(f"{echo(credential)}: a list of endpoints")
            allowed[credential] = frozenset(
                origin_of(u, what=f"{credential} endpoint", path=False) for u in urls
            )
        return cls(allowed)

    @classmethod
    def default(cls) -> CredentialEndpoints:
        return cls.parse(DEFAULT_ALLOWED)

    def origins(self, credential: str) -> list[str]:
        """The allowed origins of ``credential``, as URLs, sorted."""
        return [str(o) for o in sorted(self.allowed.get(credential, ()))]

    def permits(self, credential: str, url: str) -> bool:
        """Whether ``credential`` may be sent to ``url`` (a URL that does not parse: never)."""
        try:
            return origin_of(url) in self.allowed.get(credential, frozenset())
        except ValueError:
            return False

    def to_wire(self) -> dict[str, list[str]]:
        return {credential: self.origins(credential) for credential in sorted(self.allowed)}


def withheld(credential: str, url: str, allowed: Iterable[str]) -> str:
    """The notice when ``credential`` is not sent to ``url`` (quoted cut at ``ECHO_MAX``)."""
    listed = ", ".join(allowed) or "none"
    return (
        f"the operator's {credential} credential is not sent to {clip(url, ECHO_MAX)}: it goes only "
        f"to the endpoints of {SETTING}.{credential} ({listed}); requests there are anonymous"
    )
