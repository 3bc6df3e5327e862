"""HTTP/1.1 request handling of the local Hub (stdlib ``ThreadingHTTPServer``, exact Content-Length)."""

from __future__ import annotations

import json
import socket
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, quote, unquote, urlsplit

from sparkrun_testbed.hfhub import metadata
from sparkrun_testbed.hfhub.faults import Fault
from sparkrun_testbed.hfhub.repo import Repo, RepoType, _FileMeta

if TYPE_CHECKING:
    from sparkrun_testbed.hfhub.hub import Hub

_CHUNK = 1 << 20
_TYPES: dict[str, RepoType] = {"models": "model", "datasets": "dataset"}


class HubError(Exception):
    """An error answer: status, ``X-Error-Code`` (may be empty), message, extra headers."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.headers = headers or {}


class HubHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, address: tuple[str, int], hub: Hub, *, cdn: bool = False) -> None:
        self.hub = hub
        self.cdn = cdn
        super().__init__(address, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: HubHTTPServer
    server_version = "sparkrun-hfhub/1"

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.hub.verbose:
            super().log_message(format, *args)

    # -- plumbing -----------------------------------------------------------------------------

    @property
    def hub(self) -> Hub:
        return self.server.hub

    def _token(self) -> str | None:
        value = self.headers.get("authorization", "")
        return value[7:].strip() if value.lower().startswith("bearer ") else None

    def _send(self, status: int, body: bytes, headers: dict[str, str], key: str | None = None) -> None:
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD" and body:
            self.wfile.write(body)
            if key is not None:
                self.hub.faults.add_bytes(key, len(body))

    def _json(
        self, status: int, body: Any, headers: dict[str, str] | None = None, key: str | None = None
    ) -> None:
        data = json.dumps(body).encode()
        self._send(status, data, {"Content-Type": "application/json", **(headers or {})}, key)

    def _error(self, err: HubError, key: str | None) -> None:
        headers = dict(err.headers)
        if err.code:
            headers["X-Error-Code"] = err.code
        headers["X-Error-Message"] = err.message
        if self.command in ("POST", "DELETE"):
            self.close_connection = True  # the request body may be unread
        if key is not None:
            self.hub.faults.count(key, self.command, err.status)
        self._json(err.status, {"error": err.message}, headers)

    def _dispatch(self) -> None:
        url = urlsplit(self.path)
        raw = url.path
        query = parse_qs(url.query)
        key: str | None = None
        self._key: str | None = None
        try:
            if raw.startswith("/_admin/"):
                self._admin(raw, query)
                return
            if self.server.cdn:
                key = self._cdn(raw)
                return
            key = self._route(raw, query)
        except HubError as err:
            self._error(err, key if key is not None else self._key)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    def do_GET(self) -> None:
        self._dispatch()

    def do_HEAD(self) -> None:
        self._dispatch()

    def do_POST(self) -> None:
        self._dispatch()

    def do_DELETE(self) -> None:
        self._dispatch()

    # -- Hub routes ---------------------------------------------------------------------------

    def _find_repo(self, repo_type: RepoType, segments: list[str]) -> tuple[Repo, list[str]]:
        """The repo named by the first one or two path segments, and the rest of the segments."""
        for n in (2, 1):
            repo_id = "/".join(unquote(s) for s in segments[:n])
            repo = self.hub.repos.get((repo_type, repo_id))
            if repo is not None and len(segments) >= n:
                return repo, segments[n:]
        status = 404 if self.hub.token_valid(self._token()) else 401
        raise HubError(
            status,
            "RepoNotFound",
            f"Repository Not Found for url: {self.path}. Please make sure you specified the correct "
            "`repo_id` and `repo_type`. If you are trying to access a private or gated repo, make sure "
            "you are authenticated.",
        )

    def _check_access(self, repo: Repo, *, files: bool) -> None:
        token = self._token()
        if repo.private and not self.hub.token_valid(token):
            raise HubError(
                401,
                "RepoNotFound",
                f"Repository Not Found for url: {self.path}. If you are trying to access a private or "
                "gated repo, make sure you are authenticated.",
            )
        if repo.gated and files and not self.hub.token_granted(repo, token):
            if token is None:
                message = (
                    f"Access to model {repo.repo_id} is restricted. You must have access to it and be "
                    "authenticated to access it. Please log in."
                )
                raise HubError(401, "GatedRepo", message)
            message = (
                f"Access to model {repo.repo_id} is restricted and you are not in the authorized list. "
                f"Visit {self.hub.url}/{repo.repo_id} to ask for access."
            )
            raise HubError(403, "GatedRepo", message)

    def _resolve_rev(self, repo: Repo, revision: str) -> str:
        sha = repo.resolve(revision)
        if sha is None:
            raise HubError(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return sha

    def _status_faults(self, key: str) -> None:
        for fault in self.hub.faults.take(key, self.command, ("status",), limit=1):
            headers = {}
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
            raise HubError(fault.status, "", f"injected fault: HTTP {fault.status}", headers)

    def _route(self, raw: str, query: dict[str, list[str]]) -> str | None:
        segments = raw.strip("/").split("/")
        if segments[0] == "api" and len(segments) >= 3 and segments[1] in _TYPES:
            repo, rest = self._find_repo(_TYPES[segments[1]], segments[2:])
            key = self._key = f"api:{repo.repo_id}"
            self._status_faults(key)
            self._check_access(repo, files=False)
            self._api(repo, rest, query, key)
            return key
        repo_type: RepoType = "model"
        if segments[0] == "datasets":
            repo_type, segments = "dataset", segments[1:]
        if "resolve" in segments:
            repo, rest = self._find_repo(repo_type, segments)
            if len(rest) >= 3 and rest[0] == "resolve":
                path = "/".join(unquote(s) for s in rest[2:])
                key = self._key = f"{repo.repo_id}/{path}"
                self._status_faults(key)
                self._check_access(repo, files=True)
                sha = self._resolve_rev(repo, unquote(rest[1]))
                self._file(repo, sha, path, key)
                return key
        raise HubError(404, "", f"no route for {raw}")

    def _api(self, repo: Repo, rest: list[str], query: dict[str, list[str]], key: str) -> None:
        if not rest or rest[0] == "revision":
            revision = unquote("/".join(rest[1:])) if rest else "main"
            sha = self._resolve_rev(repo, revision or "main")
            blobs = query.get("blobs", ["false"])[0].lower() == "true"
            body = metadata.revision_info(repo, sha, blobs=blobs)
            self.hub.faults.count(key, self.command, 200)
            self._json(200, body, key=key)
        elif rest[0] == "tree" and len(rest) >= 2:
            sha = self._resolve_rev(repo, unquote(rest[1]))
            prefix = "/".join(unquote(s) for s in rest[2:])
            recursive = query.get("recursive", ["false"])[0].lower() == "true"
            entries = metadata.tree_entries(repo, sha, prefix, recursive=recursive)
            if entries is None:
                raise HubError(
                    404, "EntryNotFound", f"{prefix} does not exist on {rest[1]}", {"X-Repo-Commit": sha}
                )
            self._tree_page(entries, query, key)
        elif rest == ["refs"]:
            self.hub.faults.count(key, self.command, 200)
            self._json(200, metadata.refs(repo), key=key)
        else:
            raise HubError(404, "", f"no route for {self.path}")

    def _tree_page(self, entries: list[dict[str, Any]], query: dict[str, list[str]], key: str) -> None:
        start = int(query.get("cursor", ["0"])[0] or 0)
        size = self.hub.tree_page_size
        headers: dict[str, str] = {}
        if start + size < len(entries):
            url = urlsplit(self.path)
            params = "&".join(f"{k}={quote(v[0])}" for k, v in query.items() if k != "cursor")
            nxt = f"{self.hub.url}{url.path}?{params}&cursor={start + size}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self.hub.faults.count(key, self.command, 200)
        self._json(200, entries[start : start + size], headers, key=key)

    def _file(self, repo: Repo, sha: str, path: str, key: str) -> None:
        meta = repo.tree(sha).get(path)
        if meta is None:
            raise HubError(404, "EntryNotFound", f"{path} does not exist on {sha}", {"X-Repo-Commit": sha})
        headers = {
            "ETag": f'"{meta.etag}"',
            "X-Repo-Commit": sha,
            "Accept-Ranges": "bytes",
            "Content-Type": "application/octet-stream",
            "Content-Disposition": f'inline; filename="{quote(path.rsplit("/", 1)[-1])}"',
        }
        if meta.file.lfs:
            headers["X-Linked-Etag"] = f'"{meta.sha256}"'
            headers["X-Linked-Size"] = str(meta.file.size)
            if self.hub.cdn_url is not None:
                headers["Location"] = f"{self.hub.cdn_url}/cdn/{meta.sha256}"
                self.hub.faults.count(key, self.command, 302)
                self._send(302, b"", headers)
                return
        self._body(meta, key, headers)

    def _cdn(self, raw: str) -> str:
        digest = raw.removeprefix("/cdn/")
        found = self.hub.lfs_blob(digest)
        if found is None:
            raise HubError(404, "", f"no blob {digest}")
        meta, key = found
        self._key = key
        if "authorization" in self.headers:
            self.hub.cdn_authorization_seen += 1
        self._status_faults(key)
        self._body(meta, key, {"ETag": f'"{meta.sha256}"', "Content-Type": "application/octet-stream"})
        return key

    # -- bodies with faults -------------------------------------------------------------------

    def _range(self, size: int, ignore: bool) -> tuple[int, int, bool]:
        """(first, last+1, partial) of the requested Range; raises 416 past the end."""
        value = self.headers.get("range")
        if not value or ignore or not value.startswith("bytes="):
            return 0, size, False
        spec = value[6:].split(",")[0].strip()
        first_s, _, last_s = spec.partition("-")
        if not first_s:
            n = int(last_s)
            return max(0, size - n), size, True
        first = int(first_s)
        if first >= size:
            raise HubError(416, "", "Requested Range Not Satisfiable", {"Content-Range": f"bytes */{size}"})
        last = min(int(last_s), size - 1) if last_s else size - 1
        return first, last + 1, True

    def _body(self, meta: _FileMeta, key: str, headers: dict[str, str]) -> None:
        data = meta.file.data
        faults = self.hub.faults
        ignore = bool(faults.take(key, self.command, ("ignore_range",))) if "range" in self.headers else False
        first, end, partial = self._range(len(data), ignore)
        status = 206 if partial else 200
        if partial:
            headers["Content-Range"] = f"bytes {first}-{end - 1}/{len(data)}"
        faults.count(key, self.command, status)
        self.send_response(status)
        for name, value in headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(end - first))
        self.end_headers()
        if self.command == "HEAD":
            return
        active = faults.take(key, "GET", ("drop", "corrupt", "slow"))
        self._stream(memoryview(data), first, end, key, active)

    def _stream(self, view: memoryview, first: int, end: int, key: str, active: list[Fault]) -> None:
        drop = next((f.after_bytes for f in active if f.kind == "drop"), None)
        corrupt = [f.offset for f in active if f.kind == "corrupt"]
        rate = min((f.rate for f in active if f.kind == "slow"), default=0.0)
        chunk = _CHUNK if rate <= 0 else max(1024, min(_CHUNK, int(rate / 20)))
        started = time.monotonic()
        sent = 0
        pos = first
        while pos < end:
            stop = min(end, pos + chunk)
            if drop is not None and sent + (stop - pos) > drop:
                stop = pos + (drop - sent)
            piece: bytes | bytearray | memoryview = view[pos:stop]
            hits = [o for o in corrupt if pos <= o < stop]
            if hits:
                mutable = bytearray(piece)
                for offset in hits:
                    mutable[offset - pos] ^= 0xFF
                piece = mutable
            if piece:
                self.wfile.write(piece)
                self.hub.faults.add_bytes(key, len(piece))
            sent += stop - pos
            pos = stop
            if drop is not None and sent >= drop:
                self._cut()
                return
            if rate > 0:
                ahead = sent / rate - (time.monotonic() - started)
                if ahead > 0:
                    time.sleep(ahead)

    def _cut(self) -> None:
        """Close the connection abruptly in the middle of a body."""
        self.close_connection = True
        try:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    # -- admin --------------------------------------------------------------------------------

    def _read_json(self) -> Any:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"{}")
        except json.JSONDecodeError as err:
            raise HubError(400, "", f"invalid JSON: {err}") from err

    def _admin(self, raw: str, query: dict[str, list[str]]) -> None:
        route = (self.command, raw.rstrip("/"))
        if route == ("GET", "/_admin/health"):
            self._json(200, {"ok": True})
        elif route == ("GET", "/_admin/stats"):
            self._json(200, self.hub.stats_json())
        elif route == ("POST", "/_admin/stats/reset"):
            self._read_json()
            self.hub.faults.reset_stats()
            self._json(200, {"ok": True})
        elif route == ("GET", "/_admin/faults"):
            self._json(200, [f.to_json() for f in self.hub.faults.active()])
        elif route == ("POST", "/_admin/faults"):
            try:
                fault = self.hub.faults.add(Fault.from_json(self._read_json()))
            except (TypeError, ValueError) as err:
                raise HubError(400, "", str(err)) from err
            self._json(201, fault.to_json())
        elif route == ("DELETE", "/_admin/faults"):
            self.hub.faults.clear()
            self._json(200, {"ok": True})
        elif route == ("GET", "/_admin/repos"):
            self._json(200, {r.repo_id: metadata.summary(r) for r in self.hub.repos.values()})
        else:
            raise HubError(404, "", f"no admin route {self.command} {raw}")
