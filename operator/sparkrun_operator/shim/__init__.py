"""The daemon-compatible HTTP API (``/v1`` of the sparkrun daemon) over Kubernetes resources.

:mod:`.app` is the ASGI application (routes, checks, envelopes), :mod:`.boundary` its
authentication and body limits, :mod:`.identity` callers and permissions, :mod:`.sse` and
:mod:`.streams` the event streams, :mod:`.openapi` and :mod:`.docs` the API description,
:mod:`.aggregated` the Kubernetes aggregated API, :mod:`.server` the wiring and listeners
(``sparkrun-k8s shim serve``). See ``docs/daemon-api.md``.
"""
