"""``/openapi.json``: every registered operation (enabled or not) and the infrastructure routes.

Shaped like the reference daemon's document: per operation ``<name>Request`` / ``<name>Result``
components, an alias path per operation carrying ``x-sparkrun-operation`` (with ``result``
pointing at the final result schema; a job alias's 202 response describes its acknowledgement),
the envelopes ``DaemonJob`` (successful results discriminated by operation and version),
``DaemonPrompt``, ``DaemonInfo``, ``DaemonEvent``, ``DaemonJobSnapshot``,
``DaemonOperationError`` and ``DaemonJobAccepted``, and ``x-sparkrun-operations``. This project
adds ``enabled``/``availability`` to ``x-sparkrun-operation`` so tools can see why an operation is
disabled on Kubernetes. Built once per process (the catalog is immutable).
"""

from __future__ import annotations

import copy
from typing import Any

from sparkrun_operator.ops.catalog import Catalog, Operation

__all__ = ["build"]

_ERRORS = {
    "401": "Authentication required.",
    "403": "Insufficient permission, disabled feature, or rejected trust request.",
    "404": "Requested resource was not found.",
    "408": "Request body timed out.",
    "409": "Conflicting request, exhausted admission capacity, or daemon maintenance.",
    "410": "Requested event history is no longer retained.",
    "413": "Request body exceeds the configured limit.",
    "422": "Invalid JSON or operation arguments.",
    "429": "The caller's job quota or rate limit is exhausted; retry after Retry-After seconds.",
    "500": "Operation failed; see daemon diagnostics.",
    "502": "Target hosts are unreachable.",
    "503": "The Kubernetes API is unavailable or throttling the daemon; retryable.",
    "504": "Operation timed out.",
}


def _ref(name: str) -> dict[str, str]:
    return {"$ref": "#/components/schemas/" + name}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _error_responses(*codes: str) -> dict[str, Any]:
    return {
        code: {"description": _ERRORS[code], "content": _json(_ref("DaemonOperationError"))}
        for code in (codes or tuple(c for c in _ERRORS if c != "410"))
    }


def _identifier() -> dict[str, Any]:
    return {"name": "identifier", "in": "path", "required": True, "schema": {"type": "string"}}


def _operation_path(op: Operation) -> dict[str, Any]:
    kind_text = "Submits a job (HTTP 202)." if op.kind == "job" else "Returns the result directly (HTTP 200)."
    availability = op.availability
    description = (
        f"{op.description}\n\n{kind_text} Requires {op.scope} permission. Alias of POST /v1/ops/{op.name}."
    )
    if not availability.enabled:
        disabled = f"{availability.reason} {availability.alternative}"
        description += f"\n\nDisabled on Kubernetes ({availability.code}): {disabled}"
    responses = _error_responses()
    if op.kind == "job":
        responses["202"] = {
            "description": "Job accepted. Follow events_url or GET /v1/jobs/{job_id} for completion and the "
            "final result.",
            "content": _json(_ref("DaemonJobAccepted")),
        }
    else:
        responses["200"] = {"description": "Operation result.", "content": _json(_ref(op.name + "Result"))}
    body: dict[str, Any] = {
        "tags": [op.name.split(".")[0] if op.owner == "core" else "plugin: " + op.owner],
        "summary": op.name,
        "description": description,
        "operationId": "sparkrun." + op.name,
        "requestBody": {"required": True, "content": _json(_ref(op.name + "Request"))},
        "responses": responses,
        "security": [{"BearerAuth": []}],
        "x-sparkrun-operation": {
            "name": op.name,
            "owner": op.owner,
            "local_name": op.local_name,
            "kind": op.kind,
            "cacheable": op.cacheable,
            "scope": op.scope,
            "version": op.version,
            "feature_flag": op.feature_flag,
            "secret": op.secret,
            "result": _ref(op.name + "Result"),
            "enabled": availability.enabled,
            "availability": {
                "code": availability.code,
                "reason": availability.reason,
                "alternative": availability.alternative,
            },
        },
    }
    if op.kind == "job":
        body["parameters"] = [
            {
                "name": "Idempotency-Key",
                "in": "header",
                "required": False,
                "schema": {"type": "string", "maxLength": 200},
                "description": "Retry key shared with /v1/ops/{name}; the same principal and request return "
                "the same job.",
            },
            {
                "name": "X-Sparkrun-Client",
                "in": "header",
                "required": False,
                "schema": {"type": "string"},
                "description": "Optional client label; does not affect authorization or job ownership.",
            },
        ]
    return {"post": body}


def _route(
    summary: str,
    operation_id: str,
    responses: dict[str, Any],
    *,
    parameters: list[dict[str, Any]] | None = None,
    body: dict[str, Any] | None = None,
    security: list[Any] | None = None,
) -> dict[str, Any]:
    """One operation object, its keys in the document's order."""
    route: dict[str, Any] = {"summary": summary, "operationId": operation_id}
    if parameters is not None:
        route["parameters"] = parameters
    if body is not None:
        route["requestBody"] = {"required": True, "content": _json(body)}
    route["responses"] = responses
    if security is not None:
        route["security"] = security
    return route


def _path_param(name: str, schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "schema": schema or {"type": "string"}}


def _ok(schema: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"description": "Successful response", "content": _json({} if schema is None else schema)}


def _closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """A closed object schema (no additional properties)."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


def _sse(description: str, event_schema: str | None = None) -> dict[str, Any]:
    response: dict[str, Any] = {
        "description": description,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }
    if event_schema is not None:
        response["x-sparkrun-event-schema"] = _ref(event_schema)
    return response


def _info_routes() -> dict[str, Any]:
    """Health, info and the generic operation routes."""
    errors = _error_responses("401", "403", "404", "409", "413", "422")
    return {
        "/v1/health": {"get": _route("Health", "health", {"200": _ok()}, security=[])},
        "/v1/info": {"get": _route("Info", "info", {"200": _ok(_ref("DaemonInfo"))})},
        "/v1/ops": {"get": _route("Operations", "operations", {"200": _ok()})},
        "/v1/ops/{name}": {
            "post": _route(
                "Operation",
                "operation",
                {"200": _ok(), **errors},
                parameters=[_path_param("name")],
                body={"type": "object"},
            )
        },
    }


def _job_routes() -> dict[str, Any]:
    """The job history, one job, its cancellation, its prompt answers and its diagnostic bundle."""
    job_array = {"type": "array", "items": _ref("DaemonJob")}
    limit = {"type": "integer", "default": 200}
    query = [
        {"name": "state", "in": "query", "required": False, "schema": {"type": "string"}},
        {"name": "limit", "in": "query", "required": False, "schema": limit},
    ]
    one = [_identifier()]
    job = {"200": _ok(_ref("DaemonJob"))}
    answer = _closed({"prompt_id": {"type": "string"}, "value": {}}, ["prompt_id", "value"])
    bundle = {
        "description": "Redacted NDJSON diagnostic bundle. Download after the job finishes; "
        "retained with job history.",
        "content": {"application/x-ndjson": {"schema": {"type": "string", "format": "binary"}}},
    }
    return {
        "/v1/jobs": {"get": _route("Jobs", "jobs", {"200": _ok(job_array)}, parameters=query)},
        "/v1/jobs/{identifier}": {
            "get": _route("Job", "job", {**job, **_error_responses("403", "404")}, parameters=one),
            "delete": _route(
                "Cancel", "cancel", {**job, **_error_responses("403", "404", "409")}, parameters=one
            ),
        },
        "/v1/jobs/{identifier}/input": {
            "post": _route(
                "Answer",
                "answer",
                {"200": _ok(_closed({}, [])), **_error_responses("403", "404", "409", "422")},
                parameters=one,
                body=answer,
            )
        },
        "/v1/jobs/{identifier}/artifacts/diagnostics": {
            "get": _route(
                "Diagnostic Bundle",
                "diagnostic_bundle",
                {"200": bundle, **_error_responses("403", "404", "409")},
                parameters=one,
            )
        },
    }


def _event_routes() -> dict[str, Any]:
    """Server-sent event streams: one job's events, all jobs' snapshots, logs and monitor."""
    framed = "Server-sent events; each data frame follows the declared envelope."
    last_event = {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}}
    kind = _path_param("kind", {"type": "string", "enum": ["logs", "monitor"]})
    return {
        "/v1/jobs/{identifier}/events": {
            "get": _route(
                "Events",
                "events",
                {"200": _sse(framed, "DaemonEvent"), **_error_responses("403", "404", "410", "422")},
                parameters=[_identifier(), last_event],
            )
        },
        "/v1/events": {
            "get": _route("Global Events", "global_events", {"200": _sse(framed, "DaemonJobSnapshot")})
        },
        "/v1/streams/{kind}": {
            "get": _route(
                "Stream",
                "stream",
                {"200": _sse("Server-sent events."), **_error_responses("404", "422")},
                parameters=[kind],
            )
        },
    }


def _control_routes() -> dict[str, Any]:
    """Reservations, snapshots, maintenance, shutdown and the docs page."""
    acknowledge = _closed({"acknowledge_effects": {"enum": [True]}}, ["acknowledge_effects"])
    return {
        "/v1/reservations": {"get": _route("Reservations", "reservations", {"200": _ok()})},
        "/v1/reservations/{owner}/reconcile": {
            "post": _route(
                "Reconcile",
                "reconcile",
                {"200": _ok(), **_error_responses("403", "404", "409", "422")},
                parameters=[_path_param("owner")],
                body=acknowledge,
            )
        },
        "/v1/snapshots/{name}": {
            "get": _route(
                "Snapshot",
                "snapshot",
                {"200": _ok(), **_error_responses("404")},
                parameters=[_path_param("name")],
            )
        },
        "/v1/maintenance": {
            "post": _route(
                "Maintenance",
                "maintenance",
                {"200": _ok(), **_error_responses("403", "422")},
                body=_closed({"drain": {"type": "boolean"}}, ["drain"]),
            )
        },
        "/v1/shutdown": {
            "post": _route(
                "Shutdown", "shutdown", {"200": _ok(), **_error_responses("403", "422")}, body=_closed({}, [])
            )
        },
        "/docs": {"get": _route("Docs", "docs", {"200": {"description": "Swagger UI"}})},
    }


def _infrastructure() -> dict[str, Any]:
    """The fixed routes, in the order the document lists them."""
    return {**_info_routes(), **_job_routes(), **_event_routes(), **_control_routes()}


def build(catalog: Catalog, *, version: str) -> dict[str, Any]:
    """The complete OpenAPI 3.1 document."""
    operations = sorted(catalog, key=lambda op: op.name)
    schemas: dict[str, Any] = {
        "HTTPValidationError": {
            "type": "object",
            "properties": {"detail": {"type": "array", "items": _ref("ValidationError")}},
        },
        "ValidationError": {
            "type": "object",
            "properties": {
                "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                "msg": {"type": "string"},
                "type": {"type": "string"},
            },
            "required": ["loc", "msg", "type"],
        },
    }
    for name, envelope in catalog.envelopes.items():
        schemas[name] = copy.deepcopy(dict(envelope))
    schemas["DaemonJob"]["allOf"] = [
        {
            "if": {
                "properties": {
                    "operation": {"enum": [op.name]},
                    "version": {"enum": [op.version]},
                    "state": {"enum": ["succeeded"]},
                }
            },
            "then": {"properties": {"result": _ref(op.name + "Result")}},
        }
        for op in operations
        if op.kind == "job"
    ]
    for op in operations:
        schemas[op.name + "Request"] = op.request_schema
        schemas[op.name + "Result"] = op.result_schema
    paths = _infrastructure()
    for op in operations:
        if op.http_path:
            paths[op.http_path] = _operation_path(op)
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Sparkrun daemon API (Kubernetes shim)",
            "version": "1",
            "description": "The sparkrun daemon API served over Kubernetes resources by sparkrun-operator "
            f"{version}. Jobs are DaemonJob objects; authentication is Kubernetes authentication.",
        },
        "paths": paths,
        "components": {
            "schemas": schemas,
            "securitySchemes": {
                "BearerAuth": {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A Kubernetes bearer token (ServiceAccount or user token), checked with "
                    "TokenReview; permissions come from RBAC on sparkrun.dev/daemonoperations.",
                }
            },
        },
        "security": [{"BearerAuth": []}],
        "x-sparkrun-operations": {
            op.name: {
                "request": _ref(op.name + "Request"),
                "kind": op.kind,
                "cacheable": op.cacheable,
                "version": op.version,
                "result": _ref(op.name + "Result"),
                "http_path": op.http_path,
                "owner": op.owner,
                "local_name": op.local_name,
                "enabled": op.enabled,
            }
            for op in operations
        },
    }
