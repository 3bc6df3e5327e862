"""The trust boundary of DaemonJobs (ADR 0021), on the testbed with the real shim and operator.

- admission (``manifests/daemonjob-admission.yaml``): a namespace editor who may create
  DaemonJobs directly cannot name another principal (an admin) or another manager;
- the executor checks the principal's scope again before executing: a job whose principal
  lacks the operation's scope fails with a ``PermissionError`` and has no effect;
- operations that take a namespace act there only when the principal itself may
  (``plugins.k8s.jobset_status`` / ``stop_jobset`` in another namespace).
"""

from __future__ import annotations

import copy
import json
import secrets
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.pluginops import OPERATIONS
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from tests.shim.conftest import API, REPO, Daemon
from tests.shim.harness import with_digest

POLICY = REPO / "manifests" / "daemonjob-admission.yaml"
SHIM_USER = "system:serviceaccount:sparkrun-system:sparkrun-shim"


def _whoami(kube: KubeApi) -> str:
    review = kube.request(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    ).json()
    return str(review["status"]["userInfo"]["username"])


def _token(kube: KubeApi, namespace: str, name: str) -> str:
    answer = kube.request(
        "POST",
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        json={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}},
    ).json()
    return str(answer["status"]["token"])


def _job(
    namespace: str, operation: str, principal: str, arguments: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": API,
        "kind": "DaemonJob",
        "metadata": {"name": secrets.token_hex(16), "namespace": namespace},
        "spec": with_digest(
            {"operation": operation, "arguments": arguments, "principal": {"username": principal}, **spec}
        ),
    }


@pytest.fixture(scope="module")
def policy(daemon: Daemon) -> Iterator[str]:
    """The shipped admission policy, bound to this module's namespace only (the testbed is shared);
    the shim here runs as the testbed's admin, which takes the shim ServiceAccount's place."""
    docs = [d for d in yaml.safe_load_all(POLICY.read_text()) if d]
    assert [d["kind"] for d in docs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    name = "sparkrun-daemonjob-principal-" + daemon.namespace
    shim_user = _whoami(daemon.kube)
    vap, binding = copy.deepcopy(docs)
    vap["metadata"]["name"] = name
    for variable in vap["spec"]["variables"]:
        variable["expression"] = variable["expression"].replace(SHIM_USER, shim_user)
    assert any(shim_user in v["expression"] for v in vap["spec"]["variables"])
    binding["metadata"]["name"] = name
    binding["spec"]["policyName"] = name
    binding["spec"]["matchResources"] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": daemon.namespace}}
    }
    daemon.kube.apply(vap)
    daemon.kube.apply(binding)
    yield name
    daemon.kube.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicyBinding", name)
    daemon.kube.delete("admissionregistration.k8s.io/v1", "ValidatingAdmissionPolicy", name)


@pytest.fixture(scope="module")
def editor(daemon: Daemon) -> Iterator[KubeApi]:
    """A namespace editor: may create and read DaemonJobs in the namespace, holds no daemon scope."""
    ns = daemon.namespace
    daemon.kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "editor", "namespace": ns}}
    )
    daemon.kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "daemonjob-editor", "namespace": ns},
            "rules": [
                {
                    "apiGroups": ["sparkrun.dev"],
                    "resources": ["daemonjobs"],
                    "verbs": ["get", "list", "create", "update", "patch"],
                }
            ],
        }
    )
    daemon.kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "daemonjob-editor", "namespace": ns},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "daemonjob-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": "editor", "namespace": ns}],
        }
    )
    testbed = daemon.runner.testbed
    with KubeApi(
        server=testbed.server, ca_pem=testbed.ca_pem, token=_token(daemon.kube, ns, "editor")
    ) as client:
        yield client


def _refused(call: Any) -> ApiError:
    try:
        call()
    except ApiError as error:
        return error
    raise AssertionError("the apiserver accepted it")


def test_editor_cannot_submit_as_another_principal(daemon: Daemon, policy: str, editor: KubeApi) -> None:
    ns = daemon.namespace
    admin = daemon.env.username("admin")
    me = f"system:serviceaccount:{ns}:editor"
    # The policy takes effect within a few seconds of its creation; probe with an operation that
    # does not exist (harmless if it gets through: the executor fails it).
    deadline = time.monotonic() + 30
    while True:
        try:
            editor.create(_job(ns, "probe.nothing", admin, {}))
        except ApiError as error:
            refused = error
            break
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.5)
    assert refused.status == 403, refused

    for operation, arguments in [
        ("cluster.create", {"name": "nowhere-" + secrets.token_hex(3), "hosts": ["gpu-0"]}),
        ("plugins.k8s.configure_service_account", {"name": "stolen", "namespace": ns}),
    ]:
        error = _refused(lambda op=operation, a=arguments: editor.create(_job(ns, op, admin, a)))
        assert error.status == 403
        assert "spec.principal must be the creator" in str(error), error
    # Claiming groups it does not have, or another manager, is refused as well.
    claimed = _job(ns, "plugins.k8s.kueue_status", me, {})
    claimed["spec"]["principal"]["groups"] = ["system:masters"]
    assert _refused(lambda: editor.create(claimed)).status == 403
    managed = _job(ns, "plugins.k8s.kueue_status", me, {}, manager="automation")
    assert "spec.manager" in str(_refused(lambda: editor.create(managed)))
    # As itself the editor may create a job, and it cannot change the principal afterwards.
    own = editor.create(
        _job(ns, "cluster.create", me, {"name": "nowhere-" + secrets.token_hex(3), "hosts": ["gpu-0"]})
    )
    # NB: a merge patch, not a PUT of the created object: the operator writes the job's status
    # meanwhile, and a PUT carrying the old resourceVersion then meets a 409 before admission.
    path = f"/apis/{API}/namespaces/{ns}/daemonjobs/{own['metadata']['name']}"
    merge = {"content-type": "application/merge-patch+json"}
    patch = {"spec": {"principal": {"username": admin}}}
    error = _refused(lambda: editor.request("PATCH", path, json=patch, headers=merge))
    assert error.status in (403, 422), error
    # ... and the executor refuses it: the editor holds no daemon scope.
    job = _wait_failed(daemon, own["metadata"]["name"])
    assert job["status"]["error"]["type"] == "PermissionError"
    assert daemon.kube.get(API, "InferenceCluster", own["spec"]["arguments"]["name"]) is None
    assert daemon.kube.get("v1", "ServiceAccount", "stolen", namespace=ns) is None


def _wait_failed(daemon: Daemon, name: str, timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = daemon.job_object(name)
        state = (found.get("status") or {}).get("state")
        if state in {"succeeded", "failed", "cancelled", "lost"}:
            assert state == "failed", found.get("status")
            return found
        assert time.monotonic() < deadline, found.get("status")
        time.sleep(0.2)


@pytest.mark.parametrize("who", ["nobody", "reader"])
def test_executor_refuses_a_principal_without_the_scope(daemon: Daemon, who: str) -> None:
    # Written directly by a trusted identity (the testbed's admin, exempt from the policy as the
    # shim is): the principal holds no admin scope, e.g. it lost it after submitting.
    ns = daemon.namespace
    account = "granted-" + secrets.token_hex(3)
    obj = daemon.kube.create(
        _job(
            ns,
            "plugins.k8s.configure_service_account",
            daemon.env.username(who),
            {"name": account, "namespace": ns},
        )
    )
    job = _wait_failed(daemon, obj["metadata"]["name"])
    error = job["status"]["error"]
    assert error["type"] == "PermissionError", error
    assert (error.get("details") or {}).get("reason") == "principal_lacks_scope", error
    assert daemon.kube.get("v1", "ServiceAccount", account, namespace=ns) is None


def _jobset(name: str, namespace: str) -> dict[str, Any]:
    pod = {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}]}
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {"name": "main", "replicas": 1, "template": {"spec": {"template": {"spec": pod}}}}
            ],
        },
    }


@pytest.fixture
def elsewhere(daemon: Daemon) -> Iterator[str]:
    """Another namespace with a JobSet in it, where the daemon's principals hold no rights."""
    name = "elsewhere-" + secrets.token_hex(3)
    daemon.kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    daemon.kube.create(_jobset("victim", name))
    yield name
    daemon.kube.delete("v1", "Namespace", name)


def test_jobset_operations_act_only_where_the_principal_may(daemon: Daemon, elsewhere: str) -> None:
    target = {"name": "victim", "namespace": elsewhere}

    def run(name: str) -> Any:
        return daemon.wait_job(daemon.submit("operator", name, target), "operator")

    for name in ("plugins.k8s.jobset_status", "plugins.k8s.stop_jobset"):
        job = run(name)
        assert job["state"] == "failed", job
        assert job["error"]["error"]["type"] == "PermissionError", job
        assert job["error"]["error"]["attrs"]["reason"] == "namespace_not_authorized"
    assert daemon.kube.get("jobset.x-k8s.io/v1alpha2", "JobSet", "victim", namespace=elsewhere) is not None

    # With the Kubernetes permission there (not a daemon scope), the same calls act.
    daemon.kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "jobsets", "namespace": elsewhere},
            "rules": [
                {"apiGroups": ["jobset.x-k8s.io"], "resources": ["jobsets"], "verbs": ["get", "delete"]}
            ],
        }
    )
    daemon.kube.create(
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": "jobsets", "namespace": elsewhere},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "jobsets"},
            "subjects": [{"kind": "ServiceAccount", "name": "operator", "namespace": daemon.namespace}],
        }
    )
    seen = run("plugins.k8s.jobset_status")
    assert seen["state"] == "succeeded", seen
    assert seen["result"]["namespace"] == elsewhere
    assert run("plugins.k8s.stop_jobset")["state"] == "succeeded"


# -- secrets in diagnostics ----------------------------------------------------------------------

KNOWN = "s3cr3t-Known-Value-42"
PLANTED = {
    "env literal": "hf_PlantedLiteralToken1234567",
    "engine argument": "PlantedArgKey998877",
    "env assignment in a message": "hf_PlantedEventToken987654321",
    "bearer token": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJwbGFudGVkIn0.c2lnbmF0dXJlUGxhbnRlZA",
    "camelCase key in a traceback": "PlantedCamelKey5544",
    "password line": "PlantedPassword77",
    "known Secret value": KNOWN,
}


def _event(namespace: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "planted-" + secrets.token_hex(4), "namespace": namespace},
        "involvedObject": {"kind": "InferenceWorkload", "name": "leaky", "namespace": namespace},
        "reason": "Planted",
        "type": "Warning",
        "message": message,
        "lastTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def test_diagnostics_bundle_holds_no_secrets(daemon: Daemon) -> None:
    ns = daemon.namespace
    daemon.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "model-creds", "namespace": ns},
            "stringData": {"token": KNOWN},
        }
    )
    daemon.kube.create(
        {
            "apiVersion": API,
            "kind": "InferenceWorkload",
            "metadata": {"name": "leaky", "namespace": ns},
            "spec": {
                "model": {"name": "org/small"},
                "topology": {"nodes": 1, "gpusPerNode": 1},
                "state": "Stopped",
                "engine": {
                    "args": [f"--api-key={PLANTED['engine argument']}"],
                    "env": [
                        {"name": "HF_TOKEN", "value": PLANTED["env literal"]},
                        {
                            "name": "CREDS",
                            "valueFrom": {"secretKeyRef": {"name": "model-creds", "key": "token"}},
                        },
                    ],
                },
            },
        }
    )
    for message in (
        f"Back-off: HF_TOKEN={PLANTED['env assignment in a message']} was rejected",
        f"request failed: Authorization: Bearer {PLANTED['bearer token']}",
        'Traceback (most recent call last):\n  File "serve.py", line 1, in <module>\n'
        f'    connect(apiKey="{PLANTED["camelCase key in a traceback"]}")\n'
        f"ValueError: credentials {KNOWN} rejected",
        f"password: {PLANTED['password line']}",
    ):
        daemon.kube.create(_event(ns, message))

    job_id = daemon.submit("reader", "diagnostics.collect", {"log_tail": 10})
    job = daemon.wait_job(job_id, "reader")
    assert job["state"] == "succeeded", job
    with daemon.http("reader") as client:
        bundle = client.get(f"/v1/jobs/{job_id}/artifacts/diagnostics")
    assert bundle.status_code == 200, bundle.text
    text = bundle.text
    assert "leaky" in text
    assert "Planted" in text
    leaked = [kind for kind, value in PLANTED.items() if value in text]
    assert leaked == [], leaked  # ... without their secrets
    assert text.count("[redacted]") >= len(PLANTED)
    assert "org/small" in text  # ordinary values pass

    stored = daemon.kube.get("v1", "Secret", f"{job_id}-diagnostics", namespace=ns)
    assert stored is not None
    assert stored["type"] == "Opaque"
    assert stored["metadata"]["labels"]["sparkrun.dev/daemonjob"] == job_id
    owner = stored["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"]) == ("DaemonJob", job_id)
    assert daemon.kube.get("v1", "ConfigMap", f"{job_id}-diagnostics", namespace=ns) is None


# -- what a read principal sees (docs/security.md, "job routes") ---------------------------------

#: caller -> expected status per job route, for a finished ``diagnostics.collect`` job of
#: ``reader`` (scope read). Other non-admin principals get 404, exactly as for an unknown id.
JOB_ROUTES = ("GET", "EVENTS", "ARTIFACT", "CANCEL", "INPUT")
MATRIX: dict[str, tuple[str, tuple[int, ...]]] = {
    "nobody": ("no scope", (403, 403, 403, 403, 403)),
    "reader": ("read, own", (200, 200, 200, 403, 409)),
    "reader2": ("read, other", (404, 404, 404, 404, 404)),
    "operator": ("operate, other", (404, 404, 404, 404, 404)),
    "automation": ("operate, other manager", (404, 404, 404, 404, 404)),
    "admin": ("admin, other", (200, 200, 200, 409, 409)),
}


def _route(client: Any, route: str, job_id: str) -> int:
    path = f"/v1/jobs/{job_id}"
    if route == "GET":
        return int(client.get(path).status_code)
    if route == "EVENTS":
        return int(client.get(path + "/events").status_code)
    if route == "ARTIFACT":
        return int(client.get(path + "/artifacts/diagnostics").status_code)
    if route == "CANCEL":
        return int(client.delete(path).status_code)
    return int(client.post(path + "/input", json={"prompt_id": "p0", "value": True}).status_code)


def test_job_routes_matrix_of_scopes_and_owners(daemon: Daemon) -> None:
    job_id = daemon.submit("reader", "diagnostics.collect", {"log_tail": 1})
    assert daemon.wait_job(job_id, "reader")["state"] == "succeeded"
    unknown = secrets.token_hex(16)
    seen: dict[str, tuple[int, ...]] = {}
    for who in MATRIX:
        with daemon.http(who) as client:
            seen[who] = tuple(_route(client, route, job_id) for route in JOB_ROUTES)
            if MATRIX[who][1][0] == 404:  # indistinguishable from an id that does not exist
                assert client.get(f"/v1/jobs/{job_id}").json() == client.get(f"/v1/jobs/{unknown}").json()
    assert seen == {who: expected for who, (_, expected) in MATRIX.items()}

    # Listings and diagnostics bundles show a non-admin only its own jobs (and their errors).
    other = daemon.submit("reader2", "diagnostics.collect", {"log_tail": 1})
    assert daemon.wait_job(other, "reader2")["state"] == "succeeded"
    with daemon.http("reader2") as client:
        assert job_id not in {j["id"] for j in client.get("/v1/jobs").json()}
        bundle = client.get(f"/v1/jobs/{other}/artifacts/diagnostics").text
    jobs_seen = {
        r["record"]["id"] for r in map(json.loads, bundle.splitlines()) if r["section"] == "daemonjobs"
    }
    assert other in jobs_seen
    assert job_id not in jobs_seen
    admin_job = daemon.submit("admin", "diagnostics.collect", {"log_tail": 1})
    assert daemon.wait_job(admin_job, "admin")["state"] == "succeeded"
    with daemon.http("admin") as client:
        bundle = client.get(f"/v1/jobs/{admin_job}/artifacts/diagnostics").text
    jobs_seen = {
        r["record"]["id"] for r in map(json.loads, bundle.splitlines()) if r["section"] == "daemonjobs"
    }
    assert {job_id, other} <= jobs_seen


def test_log_streams_are_redacted(daemon: Daemon) -> None:
    """A workload pod that prints a referenced Secret's value, a token-shaped string and
    credentials in assignments: a read principal's ``/v1/streams/logs`` shows none of them."""
    from tests.process.helpers import pod, pod_spec, shell, wait_pod

    ns = daemon.namespace
    secret = "stream-creds"
    daemon.kube.create(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret, "namespace": ns},
            "stringData": {"token": KNOWN},
        }
    )
    script = (
        'echo "starting with $CREDS"; '
        f'echo "HF_TOKEN={PLANTED["env literal"]}"; '
        f'echo "Authorization: Bearer {PLANTED["bearer token"]}"; '
        f'echo "password: {PLANTED["password line"]}"; '
        "echo plain-line-kept; sleep 60"
    )
    env = [{"name": "CREDS", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}}]
    body = pod(
        "leaky-logs",
        pod_spec([shell("engine", script, env=env)]),
        labels={"sparkrun.dev/workload": "leaky-logs"},
    )
    body["metadata"]["namespace"] = ns
    daemon.kube.create(body)
    try:
        wait_pod(
            daemon.kube,
            ns,
            "leaky-logs",
            lambda p: (p.get("status") or {}).get("phase") == "Running",
            timeout=60,
        )
        deadline = time.monotonic() + 30
        text = ""
        while "plain-line-kept" not in text and time.monotonic() < deadline:
            with daemon.http("reader") as client:
                text = client.get(
                    "/v1/streams/logs", params={"source_id": f"{ns}/leaky-logs/engine", "tail": "20"}
                ).text
            time.sleep(0.5)
        assert "plain-line-kept" in text, text
        assert "starting with" in text
        for what in ("known Secret value", "env literal", "bearer token", "password line"):
            assert PLANTED[what] not in text, what
        assert "[redacted]" in text
    finally:
        daemon.kube.delete("v1", "Pod", "leaky-logs", namespace=ns)


# -- the closed matrix: every operation and every route x every scope ------------------------------

#: Principals of each scope (``tests/shim/harness.py``): their rank in read < operate < admin.
RANKS = {"nobody": 0, "secret-only": 0, "reader": 1, "operator": 2, "admin": 3}
SCOPE_RANK = {"read": 1, "operate": 2, "admin": 3}
DENIED = {"detail": "Insufficient permission"}
PROBE = {"__matrix_probe__": 1}  # an unknown argument: a caller with the scope gets 422, never a job


def test_every_operation_by_every_scope(daemon: Daemon) -> None:
    """All 98 operations (the reference's 94, the project's 4), by name and by HTTP alias, for
    every scope: below the operation's scope 403 (the scope's refusal, detail only), at or above
    it the arguments are checked (422): the permission check comes first and nothing runs."""
    from sparkrun_operator.ops import catalog

    ops = list(catalog.load())
    assert len(ops) == 94 + len(OPERATIONS)
    wrong: list[str] = []
    for who, rank in RANKS.items():
        with daemon.http(who) as client:
            for op in ops:
                for path in {f"/v1/ops/{op.name}", op.http_path or f"/v1/ops/{op.name}"}:
                    answer = client.post(path, json=PROBE)
                    if rank < SCOPE_RANK[op.scope]:
                        if (answer.status_code, answer.json()) != (403, DENIED):
                            wrong.append(f"{who} {path}: {answer.status_code} {answer.text[:200]}")
                    elif answer.status_code != 422 or answer.json()["error"]["type"] != "ValueError":
                        wrong.append(f"{who} {path}: {answer.status_code} {answer.text[:200]}")
    assert not wrong, "\n".join(wrong)


def _status(client: Any, method: str, path: str, body: Any) -> int:
    if method == "STREAM":  # an endless SSE stream: the status line is the answer
        with client.stream("GET", path) as answer:
            return int(answer.status_code)
    return int(client.request(method, path, json=body).status_code)


#: Every infrastructure route (docs/security.md's table), the least scope it needs (None: public;
#: "authenticated": any valid token) and the status a caller with it gets for the probe body.
#: The job routes have their own matrix (owner x scope) above.
ROUTES: list[tuple[str, str, Any, str | None, int]] = [
    ("GET", "/v1/health", None, None, 200),
    ("GET", "/v1/info", None, "read", 200),
    ("GET", "/v1/ops", None, "read", 200),
    ("GET", "/v1/jobs", None, "read", 200),
    ("STREAM", "/v1/events", None, "read", 200),
    ("GET", "/v1/streams/logs?tail=0&source_id=none/none/none", None, "read", 200),
    ("STREAM", "/v1/streams/monitor?hosts=no-such-node", None, "read", 200),
    ("GET", "/v1/snapshots/discovery.snapshot", None, "read", 200),
    ("GET", "/v1/reservations", None, "admin", 200),
    ("POST", "/v1/reservations/someone/reconcile", {"acknowledge_effects": False}, "admin", 422),
    ("POST", "/v1/maintenance", {"drain": 1}, "admin", 422),
    ("POST", "/v1/shutdown", {"now": True}, "admin", 422),
    ("GET", "/openapi.json", None, "authenticated", 200),  # the reference daemon: the full catalog, any token
    ("GET", "/docs", None, "read", 200),
]


def test_every_route_by_every_scope(daemon: Daemon) -> None:
    wrong: list[str] = []
    for who, rank in RANKS.items():
        with daemon.http(who) as client:
            for method, path, body, scope, allowed in ROUTES:
                got = _status(client, method, path, body)
                granted = scope in (None, "authenticated") or rank >= SCOPE_RANK[str(scope)]
                expected = allowed if granted else 403
                if got != expected:
                    wrong.append(f"{who} {method} {path}: {got}, expected {expected}")
    with daemon.http() as anonymous:  # no token at all
        for method, path, body, scope, allowed in ROUTES:
            got = _status(anonymous, method, path, body)
            expected = allowed if scope is None else 401
            if got != expected:
                wrong.append(f"anonymous {method} {path}: {got}, expected {expected}")
    assert not wrong, "\n".join(wrong)
