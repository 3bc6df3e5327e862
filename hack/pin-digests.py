#!/usr/bin/env python3
"""The release step that pins base images by digest (ADR 0017).

The Dockerfiles name their bases by tag (``FROM python:3.12-slim-bookworm``): no registry is
reachable where they are developed. At release, this resolves each ``FROM image:tag`` of
``runtime-images/*/Dockerfile`` (or the files given) to the digest the registry serves for it now,
through the OCI distribution API, and rewrites the line to ``FROM image:tag@sha256:...``: the
build then uses exactly that content, whatever the tag points at later. For a multi-arch image
the digest is the index's (manifest list), so one pin serves every platform.

    python hack/pin-digests.py [FILE...]            rewrite the FROM lines with the digests
    python hack/pin-digests.py --check [FILE...]    change nothing; exit 1 unless every FROM
                                                    carries the digest its tag resolves to now
    --registry-mirror [REGISTRY=]URL                ask URL instead of REGISTRY (docker.io when
                                                    no REGISTRY= is given); repeatable

How a digest is had (registry API v2): ``HEAD /v2/<repository>/manifests/<tag>`` accepting OCI
indexes, Docker manifest lists and single manifests; on 401 the ``WWW-Authenticate: Bearer``
challenge names a token endpoint (realm), service and scope, from which an anonymous token is
fetched; the answer's ``Docker-Content-Digest`` is the digest (without one: ``GET`` the manifest,
at most 4 MiB, and hash it). No credential is ever sent: only public images (or a mirror that
serves them anonymously). ``localhost``/``127.0.0.1`` registries and ``http://`` mirrors speak
plain HTTP; everything else HTTPS, and a token realm must be HTTPS unless its registry is plain.
A redirect is never followed from HTTPS to plain HTTP, and the token goes only to the origin the
manifest was asked of (not where the registry redirects).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DOCKER_HUB = "docker.io"
DOCKER_HUB_API = "https://registry-1.docker.io"
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
ACCEPT = ", ".join(
    (
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    )
)
MAX_MANIFEST = 4 * 1024 * 1024
MAX_TOKEN_RESPONSE = 64 * 1024
MAX_CHALLENGE = 4096
_HEX = frozenset("0123456789abcdef")


class PinError(Exception):
    """A reference that cannot be resolved, with the reason."""


@dataclass(frozen=True)
class ImageRef:
    """``[registry/]repository[:tag][@digest]`` as Docker reads it."""

    text: str  # as written, without the digest
    registry: str
    repository: str
    tag: str
    digest: str | None

    @classmethod
    def parse(cls, text: str) -> ImageRef:
        name, _, digest = text.partition("@")
        first, slash, rest = name.partition("/")
        if slash and ("." in first or ":" in first or first == "localhost"):
            registry, path = first, rest
        else:
            registry, path = DOCKER_HUB, name
        last = path.rsplit("/", 1)[-1]
        repository, tag = path, "latest"
        if ":" in last:
            repository, _, tag = path.rpartition(":")
        if registry == DOCKER_HUB and "/" not in repository:
            repository = f"library/{repository}"
        if not repository or repository != repository.lower():
            raise PinError(f"{text}: not an image reference")
        return cls(name, registry, repository, tag, digest or None)


def valid_digest(value: str) -> bool:
    algo, _, hexpart = value.partition(":")
    return algo == "sha256" and len(hexpart) == 64 and set(hexpart) <= _HEX


def parse_challenge(header: str) -> tuple[str, dict[str, str]]:
    """``Bearer realm="...",service="..."`` -> ("bearer", {realm, service, ...}); bounded, no regex."""
    if len(header) > MAX_CHALLENGE:
        raise PinError("WWW-Authenticate challenge too long")
    scheme, _, rest = header.strip().partition(" ")
    params: dict[str, str] = {}
    i, n = 0, len(rest)
    while i < n:
        while i < n and rest[i] in " ,":
            i += 1
        eq = rest.find("=", i)
        if eq < 0:
            break
        key = rest[i:eq].strip().lower()
        i = eq + 1
        if i < n and rest[i] == '"':
            value: list[str] = []
            i += 1
            while i < n and rest[i] != '"':
                if rest[i] == "\\" and i + 1 < n:
                    i += 1
                value.append(rest[i])
                i += 1
            i += 1  # the closing quote
            params[key] = "".join(value)
        else:
            end = rest.find(",", i)
            end = n if end < 0 else end
            params[key] = rest[i:end].strip()
            i = end
    return scheme.lower(), params


class Redirects(urllib.request.HTTPRedirectHandler):
    """A registry's redirects: never from HTTPS to anything else (whoever is on the path could
    answer the digest), and the ``Authorization`` header only to the origin that issued it."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: Any,
        code: int,
        msg: str,
        headers: Any,
        newurl: str,
    ) -> urllib.request.Request | None:
        old, new = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
        if old.scheme == "https" and new.scheme != "https":
            raise PinError(f"{req.full_url}: redirected to {newurl[:200]!r}, which is not HTTPS")
        follow = super().redirect_request(req, fp, code, msg, headers, newurl)
        if follow is not None and (old.scheme, old.netloc) != (new.scheme, new.netloc):
            follow.remove_header("Authorization")
        return follow


class Resolver:
    """Tag -> digest through the registry API, with anonymous bearer tokens per repository."""

    def __init__(self, mirrors: dict[str, str], timeout: float = 30.0) -> None:
        self.mirrors = mirrors
        self.timeout = timeout
        self.tokens: dict[tuple[str, str], str] = {}
        self.opener = urllib.request.build_opener(Redirects)

    def base(self, registry: str) -> str:
        if registry in self.mirrors:
            return self.mirrors[registry].rstrip("/")
        if registry == DOCKER_HUB:
            return DOCKER_HUB_API
        host = registry.rsplit(":", 1)[0] if not registry.startswith("[") else registry.split("]")[0] + "]"
        return f"{'http' if host in LOOPBACK else 'https'}://{registry}"

    def _token(self, base: str, repository: str, challenge: str) -> str:
        scheme, params = parse_challenge(challenge)
        realm = params.get("realm", "")
        if scheme != "bearer" or not realm:
            raise PinError(f"{base}: unsupported authentication {challenge[:200]!r} (anonymous bearer only)")
        realm_scheme = urllib.parse.urlsplit(realm).scheme
        if realm_scheme != "https" and not (realm_scheme == "http" and base.startswith("http://")):
            raise PinError(f"{base}: token realm {realm!r} is not HTTPS")
        query = {"scope": params.get("scope") or f"repository:{repository}:pull"}
        if "service" in params:
            query["service"] = params["service"]
        url = f"{realm}{'&' if '?' in realm else '?'}{urllib.parse.urlencode(query)}"
        try:
            with self.opener.open(urllib.request.Request(url), timeout=self.timeout) as resp:
                body = resp.read(MAX_TOKEN_RESPONSE + 1)
        except (urllib.error.URLError, OSError) as exc:
            raise PinError(f"{base}: token request to {realm} failed: {exc}") from None
        if len(body) > MAX_TOKEN_RESPONSE:
            raise PinError(f"{base}: token response from {realm} too large")
        try:
            answer = json.loads(body)
            token = answer.get("token") or answer.get("access_token")
        except (ValueError, AttributeError):
            token = None
        if not isinstance(token, str) or not token:
            raise PinError(f"{base}: token response from {realm} carries no token")
        return token

    def _manifest(self, ref: ImageRef, method: str) -> tuple[str | None, bytes]:
        base = self.base(ref.registry)
        url = f"{base}/v2/{ref.repository}/manifests/{urllib.parse.quote(ref.tag, safe='')}"
        for attempt in range(2):
            headers = {"Accept": ACCEPT}
            token = self.tokens.get((base, ref.repository))
            if token:
                headers["Authorization"] = f"Bearer {token}"
            try:
                request = urllib.request.Request(url, headers=headers, method=method)
                with self.opener.open(request, timeout=self.timeout) as resp:
                    body = resp.read(MAX_MANIFEST + 1) if method == "GET" else b""
                    return resp.headers.get("Docker-Content-Digest"), body
            except urllib.error.HTTPError as exc:
                challenge = exc.headers.get("WWW-Authenticate")
                if exc.code == 401 and challenge and attempt == 0:
                    self.tokens[(base, ref.repository)] = self._token(base, ref.repository, challenge)
                    continue
                if exc.code == 404:
                    raise PinError(f"{ref.text}: not found at {base}") from None
                raise PinError(f"{ref.text}: {base} answered {exc.code} {exc.reason}") from None
            except (urllib.error.URLError, OSError) as exc:
                raise PinError(f"{ref.text}: cannot reach {base}: {exc}") from None
        raise PinError(f"{ref.text}: {base} refused the token it issued")

    def digest(self, ref: ImageRef) -> str:
        """The digest ``ref``'s tag resolves to now."""
        header, _ = self._manifest(ref, "HEAD")
        if header is None:
            _, body = self._manifest(ref, "GET")
            if len(body) > MAX_MANIFEST:
                raise PinError(f"{ref.text}: manifest larger than {MAX_MANIFEST} bytes")
            header = "sha256:" + hashlib.sha256(body).hexdigest()
        if not valid_digest(header):
            raise PinError(f"{ref.text}: the registry answered no sha256 digest ({header[:100]!r})")
        return header


@dataclass(frozen=True)
class FromLine:
    """One ``FROM`` of a Dockerfile: where, and its image reference."""

    index: int  # line index
    start: int  # offset of the reference in the line
    ref: ImageRef


def from_lines(lines: list[str]) -> Iterable[FromLine]:
    """The FROM lines whose image is pulled (not scratch, an earlier stage or an ARG)."""
    stages: set[str] = set()
    for index, line in enumerate(lines):
        words = line.split()
        if not words or words[0].upper() != "FROM":
            continue
        rest = [w for w in words[1:] if not w.startswith("--")]
        if not rest:
            continue
        image = rest[0]
        if len(rest) >= 3 and rest[1].upper() == "AS":
            stages.add(rest[2].lower())
        if image.lower() == "scratch" or image.lower() in stages or "$" in image:
            continue
        start = line.index(image, line.upper().index("FROM") + 4)
        yield FromLine(index, start, ImageRef.parse(image))


def pin_file(path: Path, digest_of: Callable[[ImageRef], str], *, check: bool) -> list[str]:
    """Pin ``path``'s FROM lines (``check``: only report); what changed or is wrong, one line each."""
    lines = path.read_text().splitlines(keepends=True)
    notes: list[str] = []
    for found in from_lines(lines):
        ref = found.ref
        where = f"{path}:{found.index + 1}"
        digest = digest_of(ref)
        if ref.digest == digest:
            continue
        old = "no digest" if ref.digest is None else f"pinned {ref.digest}"
        notes.append(f"{where}: {ref.text} has {old}; the tag resolves to {digest}")
        line = lines[found.index]
        end = found.start + len(ref.text) + (len(ref.digest) + 1 if ref.digest else 0)
        lines[found.index] = f"{line[: found.start]}{ref.text}@{digest}{line[end:]}"
    if notes and not check:
        path.write_text("".join(lines))
    return notes


def _mirrors(values: list[str]) -> dict[str, str]:
    mirrors: dict[str, str] = {}
    for value in values:
        registry, sep, url = value.partition("=")
        if not sep:
            registry, url = DOCKER_HUB, value
        if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
            raise SystemExit(f"--registry-mirror {value!r}: want [REGISTRY=]http(s)://HOST[:PORT]")
        mirrors[registry] = url
    return mirrors


def main(argv: list[str] | None = None) -> int:
    raw = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=raw)
    parser.add_argument(
        "files", nargs="*", type=Path, help="Dockerfiles (default: runtime-images/*/Dockerfile)"
    )
    parser.add_argument("--check", action="store_true", help="change nothing; fail on a missing or stale pin")
    parser.add_argument("--registry-mirror", action="append", default=[], metavar="[REGISTRY=]URL")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per request")
    args = parser.parse_args(argv)
    files = args.files or sorted(ROOT.glob("runtime-images/*/Dockerfile"))
    resolver = Resolver(_mirrors(args.registry_mirror), timeout=args.timeout)
    cache: dict[tuple[str, str, str], str] = {}

    def digest_of(ref: ImageRef) -> str:
        key = (ref.registry, ref.repository, ref.tag)
        if key not in cache:
            cache[key] = resolver.digest(ref)
        return cache[key]

    try:
        notes = [note for path in files for note in pin_file(path, digest_of, check=args.check)]
    except PinError as exc:
        print(f"pin-digests: {exc}", file=sys.stderr)
        return 2
    for note in notes:
        print(note, file=sys.stderr if args.check else sys.stdout)
    return 1 if args.check and notes else 0


if __name__ == "__main__":
    sys.exit(main())
