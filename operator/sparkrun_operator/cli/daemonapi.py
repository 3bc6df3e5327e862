"""The CLI's transport to the daemon API (ADR 0060): ``daemon``, ``stop``, ``sleep`` and ``wake``.

By default every request goes through kube-apiserver's aggregated path
(:data:`~sparkrun_operator.api.meta.DAEMON_API_PREFIX` ``/v1/...``) on the project's one client
(:class:`~sparkrun_operator.k8s.client.Kube`), so whatever the kubeconfig authenticates with
(client certificates, exec plugins, tokens, OIDC) works and no daemon credential exists apart from
the cluster's. ``--url`` talks to the shim's own listener instead (a laptop with no kubeconfig,
or a cluster without the APIService); it needs a bearer token, read from ``--token-file`` or
``$SPARKRUN_DAEMON_TOKEN``, never from the command line (``ps`` shows every process's argv).

    async with daemon_transport(args) as api:
        info = await api.get("/v1/info")
        result = await api.call("workloads.list", {})          # a job is followed to its end

Contract:

- a refusal of the daemon (its ``{"detail", "error": {"type", ...}}`` envelope) or of the
  apiserver in front of it raises :class:`~sparkrun_operator.cli.common.CliError` with one line
  and the exit code of :func:`exit_code_for` (401 3, 403 5, 404 4, 409/422 5, 400 2, 429 5 with
  the advised delay, 5xx and no answer 3); a job that ends failed, cancelled or lost raises exit 1
  with its typed error; a wait past ``timeout`` raises exit 3 and names the job (it goes on);
- every answer is read up to :data:`MAX_BODY` bytes and every event line up to :data:`MAX_LINE`
  (longer ones are refused, never buffered); the token file up to :data:`MAX_TOKEN_BYTES`;
- ``--url`` is ``https://`` (``http://`` only to a loopback address: a bearer token never
  crosses a network in clear text, so never through ``$HTTP_PROXY`` either), without
  credentials, query or fragment; redirects are not followed (the token goes only where the
  user pointed).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import os
import ssl
import stat
import sys
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any, Final
from urllib.parse import quote, urlsplit

import httpx

from sparkrun_operator.api.meta import DAEMON_API_PREFIX
from sparkrun_operator.cli import common
from sparkrun_operator.cli.common import CliError
from sparkrun_operator.k8s import errors
from sparkrun_operator.k8s.client import Kube

__all__ = [
    "TOKEN_ENV",
    "DaemonApi",
    "add_daemon_options",
    "daemon_transport",
    "exit_code_for",
    "refusal",
]

#: The environment variable holding the bearer token for ``--url``.
TOKEN_ENV: Final = "SPARKRUN_DAEMON_TOKEN"
#: The largest answer read (a job listing of 1000 jobs with results fits).
MAX_BODY: Final = 16 * 1024 * 1024
#: The longest server-sent event line kept.
MAX_LINE: Final = 1024 * 1024
MAX_TOKEN_BYTES: Final = 16 * 1024
#: Seconds between polls of a job being waited for.
POLL_SECONDS: Final = 0.5
#: Seconds of one request (a stream waits longer: see :data:`STREAM_IDLE_SECONDS`).
REQUEST_SECONDS: Final = 30.0
#: A stream with nothing (not even the shim's heartbeat) for this long is given up.
STREAM_IDLE_SECONDS: Final = 120.0
TERMINAL: Final = frozenset({"succeeded", "failed", "cancelled", "lost"})
#: The longest detail printed of a refusal.
MAX_DETAIL: Final = 2000
CLIENT_LABEL: Final = "sparkrun-k8s"


def add_daemon_options(parser: argparse.ArgumentParser, *, chosen_by: str | None = None) -> None:
    """``--url``, ``--token-file``, ``--ca-cert`` (and the cluster options the aggregated path
    needs). ``chosen_by``: the option that chooses the daemon API where it is not the verb's
    default path (``"--daemon"`` for stop/sleep/wake, whose default runs in this process); the
    help group then says so instead of calling the aggregated API the default."""
    # NB: no abbreviations: `--token SECRET` must not be taken for --token-file (a token in argv)
    parser.allow_abbrev = False
    common.add_cluster_options(parser, namespaced=False)
    aggregated = (
        "through kube-apiserver (the aggregated API daemon.sparkrun.dev), with the kubeconfig's credentials"
    )
    listener = (
        "the shim's own listener, with a bearer token from "
        f"--token-file or ${TOKEN_ENV} (never on the command line)"
    )
    if chosen_by is None:
        about = f"Default: {aggregated}. With --url: {listener}."
    else:
        about = (
            f"With {chosen_by} (not this verb's default path): {aggregated}. "
            f"With --url (implies {chosen_by}): {listener}."
        )
    group = parser.add_argument_group("daemon API transport", about)
    group.add_argument("--url", default=None, help="the shim's own listener, e.g. https://shim.example:8443")
    group.add_argument(
        "--token-file", default=None, metavar="PATH", help=f"bearer token for --url (default: ${TOKEN_ENV})"
    )
    group.add_argument(
        "--ca-cert", default=None, metavar="PEM", help="CA bundle that signed --url's certificate"
    )


def exit_code_for(status: int) -> int:
    """The CLI's exit code for a daemon (or apiserver) answer ``status`` (0: no answer)."""
    if status == 400:
        return common.EXIT_USAGE
    if status == 404:
        return common.EXIT_NOT_FOUND
    if status in (403, 409, 412, 422, 429):
        return common.EXIT_REFUSED
    if status == 401 or status == 0 or status >= 500:
        return common.EXIT_UNREACHABLE
    return common.EXIT_REFUSED


def _clip(text: str) -> str:
    text = str(common.printable(text))
    return text if len(text) <= MAX_DETAIL else text[:MAX_DETAIL] + "..."


def describe_error(body: Any, fallback: str) -> str:
    """One line from a daemon error envelope (``type: detail``) or an apiserver ``Status``."""
    if not isinstance(body, dict):
        return _clip(fallback)
    detail = body.get("detail")
    if detail is None:
        detail = body.get("message")  # NB: kube-apiserver's own Status (RBAC on the aggregated path)
    if not isinstance(detail, str):
        detail = json.dumps(detail, default=str)[:MAX_DETAIL] if detail is not None else fallback
    error = body.get("error")
    kind = error.get("type") if isinstance(error, dict) else None
    return _clip(f"{kind}: {detail}" if isinstance(kind, str) and kind else detail)


def refusal(status: int, body: Any, *, fallback: str = "", retry_after: float | None = None) -> CliError:
    """The :class:`CliError` of a non-2xx answer (``status`` 0: none came)."""
    message = describe_error(body, fallback or (f"HTTP {status}" if status else "no answer"))
    if status == 429:
        attrs = (body.get("error") or {}).get("attrs") if isinstance(body, dict) else None
        advised = (attrs or {}).get("retry_after_seconds") if isinstance(attrs, dict) else None
        seconds = advised if isinstance(advised, int | float) else retry_after
        message += f" (retry after {seconds:g} s)" if isinstance(seconds, int | float) else " (retry later)"
    return CliError(message, exit_code_for(status))


def job_refusal(job: Mapping[str, Any]) -> CliError:
    """Exit 1 for a job that ended without succeeding, with its typed error."""
    state = str(job.get("state") or "failed")
    error = job.get("error")
    why = describe_error(error, state) if error else state
    return CliError(f"job {common.printable(str(job.get('id', '')))} {state}: {why}", common.EXIT_NO)


class DaemonApi:
    """The daemon API on one transport (see the module docstring); subclasses send."""

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any,
        headers: Mapping[str, str],
    ) -> Any:
        raise NotImplementedError

    def _lines(self, path: str, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
        raise NotImplementedError

    async def close(self) -> None:
        """Release the connection."""

    async def get(self, path: str, query: Mapping[str, Any] | None = None) -> Any:
        return await self._send("GET", path, query=query, body=None, headers={})

    async def post(self, path: str, body: Any, *, key: str | None = None) -> Any:
        headers = {"Idempotency-Key": key} if key else {}
        return await self._send("POST", path, query=None, body=body, headers=headers)

    async def delete(self, path: str) -> Any:
        return await self._send("DELETE", path, query=None, body=None, headers={})

    async def stream(self, path: str, *, after: int = 0) -> AsyncIterator[dict[str, Any]]:
        """The JSON payloads of a server-sent event stream (``data:`` lines; comments and ids
        skipped), replayed after event ``after``, until the server ends it."""
        headers = {"Last-Event-ID": str(after)} if after else {}
        async for raw in self._lines(path, headers):
            line = raw.rstrip(b"\r\n")
            if not line.startswith(b"data:"):
                continue
            try:
                payload = json.loads(line[5:])
            except ValueError as error:
                raise CliError(f"the event stream sent a line that is not JSON: {error}", 3) from error
            if isinstance(payload, dict):
                yield payload

    async def job(self, job_id: str) -> dict[str, Any]:
        found = await self.get("/v1/jobs/" + quote(job_id, safe=""))
        if not isinstance(found, dict):
            raise CliError(f"job {job_id}: the daemon answered something other than a job", 3)
        return found

    async def wait(self, job_id: str, *, timeout: float | None = None) -> dict[str, Any]:  # noqa: ASYNC109
        """The job's final envelope (polled; a Ctrl-C says the job goes on and how to look)."""
        deadline = time.monotonic() + timeout if timeout else None
        try:
            while True:
                job = await self.job(job_id)
                if job.get("state") in TERMINAL:
                    return job
                if deadline is not None and time.monotonic() >= deadline:
                    raise CliError(
                        f"job {job_id} is still {job.get('state')} after {timeout:g} s; it goes on "
                        f"(sparkrun-k8s daemon job {job_id})",
                        common.EXIT_UNREACHABLE,
                    )
                await asyncio.sleep(POLL_SECONDS)
        except asyncio.CancelledError:
            shown = common.printable(job_id)  # NB: the daemon chose it
            sys.stderr.write(
                f"job {shown} goes on: follow it with `sparkrun-k8s daemon events -f {shown}`, "
                f"cancel it with `sparkrun-k8s daemon cancel {shown}`\n"
            )
            raise

    async def submit(self, name: str, arguments: Mapping[str, Any], *, key: str | None = None) -> Any:
        """``POST /v1/ops/{name}``: a query's result, or a job's ``{job_id, events_url}``."""
        return await self.post("/v1/ops/" + quote(name, safe="."), dict(arguments), key=key)

    async def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        key: str | None = None,
        wait: bool = True,
        timeout: float | None = None,  # noqa: ASYNC109 (a poll deadline, not a cancel scope)
    ) -> Any:
        """Run an operation: a query's result; a job's result once it succeeded (``wait``), else
        its acknowledgement ``{job_id, events_url}``."""
        answer = await self.submit(name, arguments, key=key)
        if not (wait and is_job_ack(answer)):
            return answer
        job = await self.wait(str(answer["job_id"]), timeout=timeout)
        if job.get("state") != "succeeded":
            raise job_refusal(job)
        return job.get("result")


def is_job_ack(answer: Any) -> bool:
    """Whether ``answer`` is a job's acknowledgement (202 ``{job_id, events_url}``)."""
    return isinstance(answer, dict) and set(answer) == {"job_id", "events_url"}


class _Aggregated(DaemonApi):
    """Through kube-apiserver, with the kubeconfig's credentials."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any,
        headers: Mapping[str, str],
    ) -> Any:
        try:
            return await self.kube.request(
                method,
                DAEMON_API_PREFIX + path,
                query=query,
                body=body,
                headers={"X-Sparkrun-Client": CLIENT_LABEL, **headers},
                max_bytes=MAX_BODY,
                request_timeout=REQUEST_SECONDS,
            )
        except errors.KubeError as error:
            raise _from_kube(error) from error

    async def _lines(self, path: str, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
        try:
            async for line in self.kube.stream_lines(
                DAEMON_API_PREFIX + path, headers=headers, read_timeout=STREAM_IDLE_SECONDS, max_line=MAX_LINE
            ):
                yield line
        except errors.KubeError as error:
            raise _from_kube(error) from error

    async def close(self) -> None:
        await self.kube.close()


def _from_kube(error: errors.KubeError) -> CliError:
    """A refusal on the aggregated path: the daemon's own envelope when the shim answered, the
    apiserver's ``Status`` when it did (with a hint when the APIService is missing or down)."""
    if error.status == 0 or 200 <= error.status < 300:  # NB: no answer, or one over MAX_BODY
        return CliError(f"the daemon API cannot be read: {error.message}", common.EXIT_UNREACHABLE)
    retry_after = getattr(error, "retry_after", None)
    found = refusal(error.status, error.body, fallback=error.message, retry_after=retry_after)
    body = error.body if isinstance(error.body, dict) else {}
    if body.get("kind") == "Status" and error.status in (404, 503):
        # NB: the apiserver's own answer: no APIService for the group, or its service is not ready
        found = CliError(
            f"{found} (is the aggregated API v1alpha1.daemon.sparkrun.dev installed and Available? "
            "`kubectl get apiservice v1alpha1.daemon.sparkrun.dev`; or use --url)",
            found.code,
        )
    return found


class _Direct(DaemonApi):
    """The shim's own listener (``--url``), with a bearer token."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def _send(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, Any] | None,
        body: Any,
        headers: Mapping[str, str],
    ) -> Any:
        content = json.dumps(body).encode() if body is not None else None
        params = {k: str(v) for k, v in (query or {}).items() if v is not None}
        all_headers = {"Content-Type": "application/json", "Accept": "application/json", **headers}
        try:
            async with self.http.stream(
                method, path, params=params, content=content, headers=all_headers
            ) as response:
                raw = await _read_bounded(response)
        except httpx.HTTPError as error:
            raise CliError(
                f"{self.http.base_url} cannot be reached: {type(error).__name__}: {error}", 3
            ) from error
        decoded = _decode(raw)
        if 300 <= response.status_code < 400:
            raise CliError(
                f"{self.http.base_url} answered a redirect ({response.status_code}), not followed: the "
                "token goes only to --url",
                common.EXIT_UNREACHABLE,
            )
        if response.status_code >= 400:
            retry_after = errors.retry_after_of(response.headers.get("Retry-After"))
            raise refusal(response.status_code, decoded, retry_after=retry_after)
        return decoded

    async def _lines(self, path: str, headers: Mapping[str, str]) -> AsyncIterator[bytes]:
        timeout = httpx.Timeout(REQUEST_SECONDS, read=STREAM_IDLE_SECONDS)
        all_headers = {"Accept": "text/event-stream", **headers}
        try:
            async with self.http.stream("GET", path, headers=all_headers, timeout=timeout) as response:
                if response.status_code >= 400:
                    raise refusal(response.status_code, _decode(await _read_bounded(response)))
                async for line in split_lines(response.aiter_bytes(), max_line=MAX_LINE):
                    yield line
        except httpx.HTTPError as error:
            raise CliError(
                f"{self.http.base_url} cannot be reached: {type(error).__name__}: {error}", 3
            ) from error

    async def close(self) -> None:
        await self.http.aclose()


async def _read_bounded(response: httpx.Response) -> bytes:
    chunks = bytearray()
    async for chunk in response.aiter_bytes():
        chunks += chunk
        if len(chunks) > MAX_BODY:
            raise CliError(f"the daemon's answer is larger than {MAX_BODY} bytes", common.EXIT_UNREACHABLE)
    return bytes(chunks)


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return {"detail": raw[:MAX_DETAIL].decode("utf-8", "replace")}


async def split_lines(chunks: AsyncIterator[bytes], *, max_line: int) -> AsyncIterator[bytes]:
    """``chunks`` split after each newline; a line longer than ``max_line`` is refused (exit 3)."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        while (end := pending.find(b"\n")) >= 0:
            yield pending[: end + 1]
            pending = pending[end + 1 :]
        if len(pending) > max_line:
            raise CliError(f"an event line is longer than {max_line} bytes", common.EXIT_UNREACHABLE)
    if pending:
        yield pending


def check_url(url: str) -> str:
    """``url`` if the CLI may send a bearer token to it (module docstring); else exit 2."""
    parts = urlsplit(url)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise CliError(f"--url {url!r}: expected https://HOST[:PORT]", common.EXIT_USAGE)
    if parts.username is not None or parts.password is not None or parts.query or parts.fragment:
        raise CliError("--url takes no credentials, query or fragment", common.EXIT_USAGE)
    if parts.scheme == "http" and not _loopback(parts.hostname):
        raise CliError(
            "--url: plain http only to a loopback address (the bearer token would cross the network in "
            "clear text); use https",
            common.EXIT_USAGE,
        )
    return url.rstrip("/")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token(path: str | None, environ: Mapping[str, str] = os.environ) -> str:
    """The bearer token: the first line of ``path`` (at most :data:`MAX_TOKEN_BYTES`), else
    ``$SPARKRUN_DAEMON_TOKEN``; exit 2 when neither gives one."""
    if path:
        source = f"--token-file {path}"
        token = common.read_bounded(path, MAX_TOKEN_BYTES, what=source).decode("utf-8", "replace").strip()
        _warn_if_shared(path)
    else:
        token = environ.get(TOKEN_ENV, "").strip()
        source = f"${TOKEN_ENV}"
    if not token:
        raise CliError(
            f"--url needs a bearer token: --token-file PATH or ${TOKEN_ENV} ({source} is empty)", 2
        )
    if any(c in token for c in "\r\n\0") or not token.isprintable():
        raise CliError(f"{source}: the token holds control characters", common.EXIT_USAGE)
    return token


def _warn_if_shared(path: str) -> None:
    """A regular token file that group or others may read is named on stderr, as ssh names a key
    (the token is still used: the user decides)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) and mode & 0o077:
        shown = common.printable(path)
        sys.stderr.write(
            f"warning: --token-file {shown} is readable by other users of this machine "
            f"(mode {stat.S_IMODE(mode):o}): chmod 600 {shown}\n"
        )


@asynccontextmanager
async def daemon_transport(args: argparse.Namespace) -> AsyncIterator[DaemonApi]:
    """The transport ``args`` choose (:func:`add_daemon_options`), closed at the end."""
    api: DaemonApi
    if getattr(args, "url", None):
        url = check_url(args.url)
        token = await asyncio.to_thread(read_token, args.token_file)
        verify: Any = True
        if args.ca_cert:
            try:
                verify = await asyncio.to_thread(ssl.create_default_context, cafile=args.ca_cert)
            except (OSError, ssl.SSLError) as error:
                raise CliError(f"--ca-cert {args.ca_cert}: {error}", common.EXIT_USAGE) from error
        http = httpx.AsyncClient(
            base_url=url,
            headers={"Authorization": "Bearer " + token, "X-Sparkrun-Client": CLIENT_LABEL},
            verify=verify,
            timeout=REQUEST_SECONDS,
            follow_redirects=False,
            # NB: plain http (loopback only) never through $HTTP_PROXY: a proxy would read the token
            trust_env=url.startswith("https://"),
        )
        api = _Direct(http)
    else:
        if getattr(args, "token_file", None) or getattr(args, "ca_cert", None):
            raise CliError("--token-file and --ca-cert go with --url (the default uses the kubeconfig)", 2)
        api = _Aggregated(await common.connect(args))
    try:
        yield api
    finally:
        await api.close()
