"""Job routes: ``/v1/jobs`` and ``/v1/jobs/{id}`` (GET, DELETE, ``/input``, ``/artifacts/diagnostics``)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from sparkrun_operator.k8s.resources import SECRETS
from sparkrun_operator.ops import jobs as joblib
from sparkrun_operator.ops.errors import Conflict, Invalid
from sparkrun_operator.shim.state import ShimState, json_reply

__all__ = ["JobRoutes"]


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
        return json_reply(await self._visible_jobs(caller, state=state, limit=min(max(limit, 1), 1000)))

    async def get_job(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        # NB: the cache leaves large results out (k8s/daemonjobs.py): this reads them.
        return json_reply(self._public(await self.cache.full(obj)))

    async def cancel_job(self, request: Request, identifier: str) -> Response:
        obj, _ = await self._job_access(request, identifier)
        await self.gate.require(self.caller(request), "operate")
        return json_reply(self._public(await self.jobs.cancel(obj)))

    async def answer(self, request: Request, identifier: str) -> Response:
        obj, op = await self._job_access(request, identifier)
        data = await self._body(request)
        if set(data) != {"prompt_id", "value"} or not isinstance(data["prompt_id"], str):
            raise Invalid("Expected prompt_id and value")
        prompt = (obj.get("status") or {}).get("prompt") or {}
        if prompt.get("id") != data["prompt_id"]:
            answered = any(
                a.get("promptId") == data["prompt_id"] for a in obj.get("spec", {}).get("answers") or ()
            )
            if not answered:
                raise Conflict("Prompt expired or unavailable")
        secret = prompt.get("kind") == "secret"
        await self.gate.require(self.caller(request), op.scope if op else "admin", secret=secret)
        await self.jobs.answer(obj, data["prompt_id"], data["value"])
        return json_reply({})

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
