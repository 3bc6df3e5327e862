"""A synchronous client of the daemon-compatible API (the shim, or a sparkrun daemon).

    from sparkrun_operator.client import Client

    with Client("https://shim.example:8443", token=token, ca_cert="/etc/ca.pem") as client:
        client.info()                                   # checks HTTP protocol 1
        ack = client.submit("cluster.create", {"name": "lab", "hosts": ["n1"]}, key="create-lab-1")
        result = client.wait(ack["job_id"])             # polls; raises JobFailed on failure
        for event in client.events(ack["job_id"]):      # SSE replay from the start
            print(event)

Contract:

- every non-2xx answer raises :class:`DaemonError` with the status and the decoded body
  (``detail`` and, when present, the typed ``error``);
- :meth:`Client.wait` returns the result of a succeeded job and raises :class:`JobFailed` for
  failed, cancelled or lost jobs, :class:`TimeoutError` when ``timeout`` passes; with a
  ``prompt`` callback it answers pending prompts (``prompt(prompt) -> value``);
- :meth:`Client.events` yields the job's SSE payloads until the stream ends, resuming with
  ``Last-Event-ID`` after a dropped connection; a ``gap`` payload is yielded as is (fetch the
  job, then resume).
"""

from __future__ import annotations

import json
import ssl
import time
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import httpx

from sparkrun_operator.retry import Backoff

__all__ = ["TERMINAL", "Client", "DaemonError", "JobFailed"]

TERMINAL = frozenset({"succeeded", "failed", "cancelled", "lost"})
#: Between reconnects of an event stream that dropped.
RECONNECT_BACKOFF = Backoff(initial=0.5, maximum=5.0)
PROTOCOL = 1


class DaemonError(RuntimeError):
    """A non-2xx answer."""

    def __init__(self, status: int, body: Any) -> None:
        detail = body.get("detail") if isinstance(body, dict) else None
        super().__init__(detail if isinstance(detail, str) else f"daemon API returned HTTP {status}")
        self.status = status
        self.body = body

    @property
    def error_type(self) -> str | None:
        error = self.body.get("error") if isinstance(self.body, dict) else None
        return error.get("type") if isinstance(error, dict) else None


class JobFailed(DaemonError):
    """A job ended ``failed``, ``cancelled`` or ``lost``; ``job`` is its final envelope."""

    def __init__(self, job: dict[str, Any]) -> None:
        super().__init__(409, job.get("error") or {"detail": job.get("state", "failed")})
        self.job = job


class Client:
    """One daemon API endpoint and credential."""

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        ca_cert: str | None = None,
        timeout: float = 30.0,
        client_label: str = "sparkrun-k8s",
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"X-Sparkrun-Client": client_label}
        if token:
            headers["Authorization"] = "Bearer " + token
        verify: Any = ssl.create_default_context(cafile=ca_cert) if ca_cert else True
        self._http = httpx.Client(
            base_url=url.rstrip("/"), headers=headers, verify=verify, timeout=timeout, transport=transport
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def request(
        self, method: str, path: str, body: Any = None, *, headers: dict[str, str] | None = None
    ) -> Any:
        """One JSON request; the decoded answer. Raises :class:`DaemonError`."""
        content = json.dumps(body).encode() if body is not None else None
        all_headers = {"Content-Type": "application/json", **(headers or {})}
        response = self._http.request(method, path, content=content, headers=all_headers)
        try:
            decoded = response.json() if response.content else None
        except ValueError:
            decoded = {"detail": response.text[:2000]}
        if response.status_code >= 400:
            raise DaemonError(response.status_code, decoded)
        return decoded

    def info(self) -> dict[str, Any]:
        """``GET /v1/info``; raises ``ValueError`` unless it speaks protocol 1."""
        info: dict[str, Any] = self.request("GET", "/v1/info")
        if info.get("protocol") != PROTOCOL:
            raise ValueError(f"unsupported daemon protocol {info.get('protocol')!r}")
        return info

    def operations(self) -> list[dict[str, Any]]:
        ops: list[dict[str, Any]] = self.request("GET", "/v1/ops")
        return ops

    def submit(self, name: str, arguments: dict[str, Any] | None = None, *, key: str | None = None) -> Any:
        """``POST /v1/ops/{name}``: a query's result, or a job's ``{job_id, events_url}``."""
        headers = {"Idempotency-Key": key} if key else None
        return self.request("POST", "/v1/ops/" + quote(name, safe="."), arguments or {}, headers=headers)

    def call(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        *,
        key: str | None = None,
        timeout: float | None = None,
    ) -> Any:
        """Run an operation to its result (waiting for jobs)."""
        answer = self.submit(name, arguments, key=key)
        if isinstance(answer, dict) and set(answer) == {"job_id", "events_url"}:
            return self.wait(answer["job_id"], timeout=timeout)
        return answer

    def job(self, job_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.request("GET", "/v1/jobs/" + quote(job_id, safe=""))
        return found

    def jobs(self, *, state: str | None = None, limit: int = 200) -> list[dict[str, Any]]:
        params = f"?limit={limit}" + (f"&state={quote(state)}" if state else "")
        rows: list[dict[str, Any]] = self.request("GET", "/v1/jobs" + params)
        return rows

    def cancel(self, job_id: str) -> dict[str, Any]:
        found: dict[str, Any] = self.request("DELETE", "/v1/jobs/" + quote(job_id, safe=""))
        return found

    def answer(self, job_id: str, prompt_id: str, value: Any) -> None:
        self.request(
            "POST", f"/v1/jobs/{quote(job_id, safe='')}/input", {"prompt_id": prompt_id, "value": value}
        )

    def wait(
        self,
        job_id: str,
        *,
        timeout: float | None = None,
        prompt: Callable[[dict[str, Any]], Any] | None = None,
        poll: float = 0.25,
    ) -> Any:
        """The job's result once it succeeds (see the module docstring)."""
        deadline = time.monotonic() + timeout if timeout else None
        answered: set[str] = set()
        while True:
            job = self.job(job_id)
            if job["state"] == "succeeded":
                return job["result"]
            if job["state"] in TERMINAL:
                raise JobFailed(job)
            pending = job.get("prompt")
            if pending and prompt is not None and pending["prompt_id"] not in answered:
                self.answer(job_id, pending["prompt_id"], prompt(pending))
                answered.add(pending["prompt_id"])
                continue
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {job_id} is still {job['state']}; inspect it before retrying")
            time.sleep(poll)

    def events(self, job_id: str, *, after: int = 0, reconnects: int = 5) -> Iterator[dict[str, Any]]:
        """The job's SSE payloads (replayed after ``after``), resuming after drops."""
        cursor = after
        attempts = 0
        while True:
            headers = {"Last-Event-ID": str(cursor)} if cursor else {}
            ended = False
            try:
                with self._http.stream(
                    "GET", f"/v1/jobs/{quote(job_id, safe='')}/events", headers=headers, timeout=None
                ) as response:
                    if response.status_code >= 400:
                        response.read()
                        raise DaemonError(response.status_code, response.json())
                    for line in response.iter_lines():
                        if not line.startswith("data: "):
                            continue
                        payload = json.loads(line[6:])
                        if isinstance(payload.get("id"), int):
                            cursor = payload["id"]
                        yield payload
                        if payload.get("type") == "gap":
                            return
                    ended = True
            except httpx.TransportError:
                attempts += 1
                if attempts > reconnects:
                    raise
                time.sleep(RECONNECT_BACKOFF.delay(attempts - 1))
                continue
            if ended:
                return
