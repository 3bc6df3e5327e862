"""Job routes: ``/v1/jobs`` and ``/v1/jobs/{id}`` (GET, DELETE, ``/input``, ``/artifacts/diagnostics``)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from sparkrun_operator.api.resources import DAEMON_JOB
from sparkrun_operator.k8s.resources import SECRETS
from sparkrun_operator.ops import answerlog, ifmatch, paging
from sparkrun_operator.ops import jobs as joblib
from sparkrun_operator.ops.errors import Conflict, Invalid, PreconditionFailed
from sparkrun_operator.shim.paging import asked, page_headers
from sparkrun_operator.shim.state import ShimState, json_reply

__all__ = ["REPLAYED_HEADER", "JobRoutes"]

#: The answer's response header saying whether it was a replay (``true``) or the answer (``false``).
REPLAYED_HEADER = "x-sparkrun-replayed"


class JobRoutes(ShimState):
    """The job history, one job, its cancellation, prompt answers and diagnostic bundle."""

    async def list_jobs(self, request: Request) -> Response:
        caller = self.caller(request)
        await self.gate.require(caller, "read")
        state = request.query_params.get("state")
        raw_limit = request.query_params.get("limit", "200")
        try:
            limit = int(raw_limit)
        except ValueError:
            return json_reply(
                {
                    "detail": [
                        {
                            "type": "int_parsing",
                            "loc": ["query", "limit"],
                            "msg": "Input should be a valid integer, unable to parse string as an integer",
                            "input": raw_limit,
                        }
                    ]
                },
                422,
            )
        ask = asked(
            request,
            route="/v1/jobs",
            filters={"state": state},
            principal=caller.principal,
            parts=paging.JOBS.parts,
            cursor_only=True,
            keep={"state": state},
        )
        if ask is None:
            return json_reply(await self._visible_jobs(caller, state=state, limit=min(max(limit, 1), 1000)))
        rows, after = await self._visible_job_page(caller, state=state, after=ask.after, limit=ask.limit)
        reply = json_reply(rows)
        reply.headers.update(page_headers(ask, after))
        return reply

    async def get_job(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        include = request.query_params.getlist("include")
        if include not in ([], ["answers"]):
            raise Invalid("request.include: unsupported value (only answers)")
        # NB: the cache leaves large results out (k8s/daemonjobs.py): this reads them.
        full = await self.cache.full(obj)
        body = self._public(full)
        if include:  # an extension (issue 29): the reference's Job has no other field
            body["answers"] = answerlog.public_answers(full)
        reply = json_reply(body)
        reply.headers["ETag"] = ifmatch.etag(str(full["metadata"].get("resourceVersion") or ""))
        return reply

    async def cancel_job(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        await self.gate.require(self.caller(request), "operate")
        precondition = await self._if_match(request, obj)
        return json_reply(self._public(await self.jobs.cancel(obj, if_match=precondition)))

    async def answer(self, request: Request, identifier: str) -> Response:
        obj, op = await self._job_access(request, identifier)
        data = await self._body(request)
        if set(data) != {"prompt_id", "value"} or not isinstance(data["prompt_id"], str):
            raise Invalid("Expected prompt_id and value")
        comments = request.headers.getlist(answerlog.COMMENT_HEADER)
        if len(comments) > 1:
            raise Invalid("X-Sparkrun-Comment: at most one")
        comment = answerlog.check_comment(comments[0] if comments else None)
        prompt = (obj.get("status") or {}).get("prompt") or {}
        previous = next(
            (a for a in obj.get("spec", {}).get("answers") or () if a.get("promptId") == data["prompt_id"]),
            None,
        )
        if prompt.get("id") != data["prompt_id"] and previous is None:
            raise Conflict("Prompt expired or unavailable")
        # NB: a replay of a secret answer compares values: it needs the secret permission too.
        secret = prompt.get("kind") == "secret" or (previous is not None and "secretRef" in previous)
        caller = self.caller(request)
        await self.gate.require(caller, op.scope if op else "admin", secret=secret)
        precondition = await self._if_match(request, obj)
        replayed = await self.jobs.answer(
            obj, data["prompt_id"], data["value"], by=caller.principal, comment=comment, if_match=precondition
        )
        # NB: the body stays the reference's {} (its schema allows no field): the replay is a header.
        reply = json_reply({})
        reply.headers[REPLAYED_HEADER] = "true" if replayed else "false"
        return reply

    async def diagnostics(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        if joblib.state_of(obj) not in joblib.TERMINAL:
            raise Conflict("Diagnostic bundle is available after the job finishes")
        found = await self.rest.get(SECRETS, f"{identifier}-diagnostics", self.config.settings.namespace)
        if found is None:
            return json_reply({"detail": "Diagnostic bundle not found"}, 404)
        from sparkrun_operator.ops.executors.diagnostics import read_bundle

        return Response(
            read_bundle(found),
            media_type="application/x-ndjson",
            headers={"content-disposition": f'attachment; filename="diagnostics-{identifier}.ndjson"'},
        )

    async def _if_match(self, request: Request, obj: dict[str, Any]) -> str | None:
        """The request's If-Match against the job (ADR 0049): 422 malformed, 412 stale; the
        resourceVersion the job's write must still find (``None``: no header, or ``*``)."""
        given = ifmatch.header_of(request.headers.getlist("if-match"))
        try:
            return ifmatch.check_object(given, obj, kind=DAEMON_JOB.kind)
        except PreconditionFailed:
            # NB: the cache may lag what GET /v1/jobs/{id} read (it fetches large results)
            fresh = await self.jobs.daemonjobs.get(obj["metadata"]["name"])
            if fresh is None:
                raise
            return ifmatch.check_object(given, fresh, kind=DAEMON_JOB.kind)
