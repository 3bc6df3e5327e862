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
    "500": "Operation failed; see daemon diagnostics.",
    "502": "Target hosts are unreachable.",
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


def _infrastructure() -> dict[str, Any]:
    ok = {"description": "Successful response", "content": _json({})}
    job_array = {"type": "array", "items": _ref("DaemonJob")}
    empty_object = {"type": "object", "properties": {}, "required": [], "additionalProperties": False}
    sse = {"text/event-stream": {"schema": {"type": "string"}}}
    return {
        "/v1/health": {
            "get": {"summary": "Health", "operationId": "health", "responses": {"200": ok}, "security": []}
        },
        "/v1/info": {
            "get": {
                "summary": "Info",
                "operationId": "info",
                "responses": {
                    "200": {"description": "Successful response", "content": _json(_ref("DaemonInfo"))}
                },
            }
        },
        "/v1/ops": {"get": {"summary": "Operations", "operationId": "operations", "responses": {"200": ok}}},
        "/v1/ops/{name}": {
            "post": {
                "summary": "Operation",
                "operationId": "operation",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "requestBody": {"required": True, "content": _json({"type": "object"})},
                "responses": {"200": ok, **_error_responses("401", "403", "404", "409", "413", "422")},
            }
        },
        "/v1/jobs": {
            "get": {
                "summary": "Jobs",
                "operationId": "jobs",
                "parameters": [
                    {"name": "state", "in": "query", "required": False, "schema": {"type": "string"}},
                    {
                        "name": "limit",
                        "in": "query",
                        "required": False,
                        "schema": {"type": "integer", "default": 200},
                    },
                ],
                "responses": {"200": {"description": "Successful response", "content": _json(job_array)}},
            }
        },
        "/v1/jobs/{identifier}": {
            "get": {
                "summary": "Job",
                "operationId": "job",
                "parameters": [_identifier()],
                "responses": {
                    "200": {"description": "Successful response", "content": _json(_ref("DaemonJob"))},
                    **_error_responses("403", "404"),
                },
            },
            "delete": {
                "summary": "Cancel",
                "operationId": "cancel",
                "parameters": [_identifier()],
                "responses": {
                    "200": {"description": "Successful response", "content": _json(_ref("DaemonJob"))},
                    **_error_responses("403", "404", "409"),
                },
            },
        },
        "/v1/jobs/{identifier}/input": {
            "post": {
                "summary": "Answer",
                "operationId": "answer",
                "parameters": [_identifier()],
                "requestBody": {
                    "required": True,
                    "content": _json(
                        {
                            "type": "object",
                            "properties": {"prompt_id": {"type": "string"}, "value": {}},
                            "required": ["prompt_id", "value"],
                            "additionalProperties": False,
                        }
                    ),
                },
                "responses": {
                    "200": {"description": "Successful response", "content": _json(empty_object)},
                    **_error_responses("403", "404", "409", "422"),
                },
            }
        },
        "/v1/jobs/{identifier}/artifacts/diagnostics": {
            "get": {
                "summary": "Diagnostic Bundle",
                "operationId": "diagnostic_bundle",
                "parameters": [_identifier()],
                "responses": {
                    "200": {
                        "description": "Redacted NDJSON diagnostic bundle. Download after the job finishes; "
                        "retained with job history.",
                        "content": {
                            "application/x-ndjson": {"schema": {"type": "string", "format": "binary"}}
                        },
                    },
                    **_error_responses("403", "404", "409"),
                },
            }
        },
        "/v1/jobs/{identifier}/events": {
            "get": {
                "summary": "Events",
                "operationId": "events",
                "parameters": [
                    _identifier(),
                    {
                        "name": "Last-Event-ID",
                        "in": "header",
                        "required": False,
                        "schema": {"type": "string"},
                    },
                ],
                "responses": {
                    "200": {
                        "description": "Server-sent events; each data frame follows the declared envelope.",
                        "content": sse,
                        "x-sparkrun-event-schema": _ref("DaemonEvent"),
                    },
                    **_error_responses("403", "404", "410", "422"),
                },
            }
        },
        "/v1/events": {
            "get": {
                "summary": "Global Events",
                "operationId": "global_events",
                "responses": {
                    "200": {
                        "description": "Server-sent events; each data frame follows the declared envelope.",
                        "content": sse,
                        "x-sparkrun-event-schema": _ref("DaemonJobSnapshot"),
                    }
                },
            }
        },
        "/v1/streams/{kind}": {
            "get": {
                "summary": "Stream",
                "operationId": "stream",
                "parameters": [
                    {
                        "name": "kind",
                        "in": "path",
                        "required": True,
                        "schema": {"type": "string", "enum": ["logs", "monitor"]},
                    }
                ],
                "responses": {
                    "200": {"description": "Server-sent events.", "content": sse},
                    **_error_responses("404", "422"),
                },
            }
        },
        "/v1/reservations": {
            "get": {"summary": "Reservations", "operationId": "reservations", "responses": {"200": ok}}
        },
        "/v1/reservations/{owner}/reconcile": {
            "post": {
                "summary": "Reconcile",
                "operationId": "reconcile",
                "parameters": [
                    {"name": "owner", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "requestBody": {
                    "required": True,
                    "content": _json(
                        {
                            "type": "object",
                            "properties": {"acknowledge_effects": {"enum": [True]}},
                            "required": ["acknowledge_effects"],
                            "additionalProperties": False,
                        }
                    ),
                },
                "responses": {"200": ok, **_error_responses("403", "404", "409", "422")},
            }
        },
        "/v1/snapshots/{name}": {
            "get": {
                "summary": "Snapshot",
                "operationId": "snapshot",
                "parameters": [
                    {"name": "name", "in": "path", "required": True, "schema": {"type": "string"}}
                ],
                "responses": {"200": ok, **_error_responses("404")},
            }
        },
        "/v1/maintenance": {
            "post": {
                "summary": "Maintenance",
                "operationId": "maintenance",
                "requestBody": {
                    "required": True,
                    "content": _json(
                        {
                            "type": "object",
                            "properties": {"drain": {"type": "boolean"}},
                            "required": ["drain"],
                            "additionalProperties": False,
                        }
                    ),
                },
                "responses": {"200": ok, **_error_responses("403", "422")},
            }
        },
        "/v1/shutdown": {
            "post": {
                "summary": "Shutdown",
                "operationId": "shutdown",
                "requestBody": {"required": True, "content": _json(empty_object)},
                "responses": {"200": ok, **_error_responses("403", "422")},
            }
        },
        "/docs": {
            "get": {
                "summary": "Docs",
                "operationId": "docs",
                "responses": {"200": {"description": "Swagger UI"}},
            }
        },
    }


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
