"""The daemon operations: what the daemon-compatible API can do, independent of HTTP.

- :mod:`.catalog`: the 94 operations (names, kinds, scopes, aliases, request/result schemas,
  availability on Kubernetes), from generated package data (ADR 0005);
- :mod:`.schema`: validation of arguments (the daemon's rules and wording) and results;
- :mod:`.errors`: the error vocabulary (HTTP status, envelope, error types);
- :mod:`.jobs`: daemon jobs as DaemonJob objects (ids, digests, status transitions, envelopes,
  retention), pure;
- :mod:`.jobstore`: the shim's side of jobs (submit idempotently, list, cancel, answer);
- :mod:`.runner`: executing a job to a terminal state (for the DaemonJob controller) or a query
  inline (for the shim);
- :mod:`.executors`: one executor per enabled operation, acting on Kubernetes resources;
- :mod:`.context`, :mod:`.kube`, :mod:`.leases`: what executors get, shared reads, executor
  liveness.

Used by the shim (HTTP) and by the DaemonJob controller (execution); imports neither.
"""
