"""Prompt answers come only through the daemon API (issue 23; ADR 0006 and 0021, amended).

On the testbed, with the shim and the operator running as their ServiceAccounts with exactly
the chart's RBAC and the chart's DaemonJob admission policy (rendered for this module's release,
bound to its namespace only):

- a principal allowed to patch DaemonJobs, but not the shim, cannot answer another principal's
  waiting prompt (nor create a job that carries answers): admission refuses it; the shim's
  answer (``POST /v1/jobs/{id}/input``) passes;
- the executor reads only the answer Secret the shim created for that job and prompt: a
  ``secretRef`` naming an unrelated Secret of the namespace (written with the shim's own
  identity, so admission lets it through) fails the prompt with a typed error, and that Secret
  is neither read into the job nor deleted; nor is a Secret planted under the answer Secret's
  name without the shim's labels and owner reference;
- the happy path: a secret prompt answered through the shim by a caller holding
  ``answer-secret``: the Secret has the deterministic name, the job and prompt labels and an
  owner reference to the job; the executor gets the value, deletes the Secret, and the value is
  nowhere in the job;
- who answered (issue 29): an approval answered by one principal with a comment, then replayed
  by another: each is recorded with the principal the shim authenticated, in the DaemonJob's
  spec and status and in ``GET /v1/jobs/{id}?include=answers``; a different value is a 409;
  nobody but the shim, ``system:masters`` included, may change ``status.answers``.

No operation of the catalog asks for a secret yet, so the secret-prompt tests stop the module's
operator and run the operator's DaemonJob executor (``controllers/daemonjob.py``, the real class)
in this process, as the chart's operator ServiceAccount, with ``workloads.run`` wrapped by an
executor that asks for a secret first.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import json
import secrets
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_testbed.kubeapi import ApiError, KubeApi
from tests.deploy.chart import CHART, require_helm
from tests.operator.admission import tenant
from tests.shim.conftest import API, Daemon
from tests.shim.harness import with_digest

pytestmark = pytest.mark.testbed

#: the module's ``daemon`` (tests/shim/conftest.py) runs with the chart's RBAC
CHART_RBAC = True

ADMISSION = "templates/daemonjob-admission.yaml"


def _rbac(daemon: Daemon) -> Any:
    assert daemon.rbac is not None
    assert daemon.rbac.release
    return daemon.rbac


@pytest.fixture(scope="module")
def admission(daemon: Daemon, patcher: KubeApi) -> Iterator[None]:
    """The chart's admission policy for this module's release, bound to its namespace only."""
    ns, release = daemon.namespace, _rbac(daemon).release
    argv = [require_helm(), "template", release, str(CHART), "--namespace", ns, "--show-only", ADMISSION]
    out = subprocess.run(argv, capture_output=True, text=True, check=True, timeout=120).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    bindings = [d for d in docs if d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert bindings
    assert len(docs) == 2 * len(bindings), [d["kind"] for d in docs]
    assert f"system:serviceaccount:{ns}:{release}-shim" in out
    for binding in bindings:
        binding["spec"]["matchResources"] = {
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}
        }
    for doc in docs:
        daemon.kube.apply(doc)
    _wait_for_policy(daemon, patcher)
    yield
    for doc in docs:
        daemon.kube.delete(doc["apiVersion"], doc["kind"], doc["metadata"]["name"])


def _job(namespace: str, operation: str, principal: str, arguments: dict[str, Any], **spec: Any) -> Any:
    return {
        "apiVersion": API,
        "kind": "DaemonJob",
        "metadata": {"name": secrets.token_hex(16), "namespace": namespace},
        "spec": with_digest(
            {"operation": operation, "arguments": arguments, "principal": {"username": principal}, **spec}
        ),
    }


def _wait_for_policy(daemon: Daemon, patcher: KubeApi) -> None:
    """A policy takes effect within seconds of its creation: probe with a forged principal (the
    rule ADR 0021 added), harmless if it gets through (an unknown operation fails)."""
    deadline = time.monotonic() + 30
    while True:
        try:
            created = patcher.create(_job(daemon.namespace, "probe.nothing", "someone-else", {}))
        except ApiError as error:
            refused = error
            break
        daemon.kube.delete(API, "DaemonJob", created["metadata"]["name"], namespace=daemon.namespace)
        assert time.monotonic() < deadline, "the admission policy never took effect"
        time.sleep(0.5)
    assert refused.status == 403, refused


@pytest.fixture(scope="module")
def patcher(daemon: Daemon) -> Iterator[KubeApi]:
    """A ServiceAccount that may read, create and patch DaemonJobs of the namespace (no daemon
    scope): a namespace editor, or a GitOps controller's identity."""
    rule = {
        "apiGroups": ["sparkrun.dev"],
        "resources": ["daemonjobs"],
        "verbs": ["get", "list", "create", "update", "patch"],
    }
    with tenant(daemon.runner.testbed, daemon.kube, daemon.namespace, "patcher", [rule]) as client:
        yield client


def _refused(call: Callable[[], Any]) -> ApiError:
    try:
        call()
    except ApiError as error:
        return error
    raise AssertionError("the apiserver accepted it")


MERGE = {"Content-Type": "application/merge-patch+json"}


def test_only_the_shim_answers_a_prompt(daemon: Daemon, admission: None, patcher: KubeApi) -> None:
    ns = daemon.namespace
    workload = "forged-" + secrets.token_hex(3)
    job_id = daemon.submit(
        "operator",
        "workloads.run",
        {"recipe": "qwen3-8b-vllm", "confirm": True, "workload_id_override": workload},
    )
    prompt = daemon.wait_job(job_id, "operator", states={"waiting_input"})["prompt"]
    path = f"/apis/{API}/namespaces/{ns}/daemonjobs/{job_id}"
    forged = {"spec": {"answers": [{"promptId": prompt["prompt_id"], "value": True}]}}
    refusal = "spec.answers are written only by the daemon API shim"
    try:
        error = _refused(lambda: patcher.request("PATCH", path, json=forged, headers=MERGE))
        assert error.status == 403, error
        assert refusal in str(error), error
        # Nor by replacing the whole object.
        replaced = copy.deepcopy(patcher.get(API, "DaemonJob", job_id, namespace=ns))
        assert replaced is not None
        replaced["spec"]["answers"] = forged["spec"]["answers"]
        assert refusal in str(_refused(lambda: patcher.request("PUT", path, json=replaced)))
        # Nor by a member of system:masters (the testbed's admin): answers go through the shim.
        assert refusal in str(
            _refused(lambda: daemon.kube.request("PATCH", path, json=forged, headers=MERGE))
        )
        assert not daemon.job_object(job_id)["spec"].get("answers")
        # Other updates of the job, and jobs of its own without answers, still pass the policy.
        label = {"metadata": {"labels": {"example.com/seen": "yes"}}}
        patcher.request("PATCH", path, json=label, headers=MERGE)
        me = f"system:serviceaccount:{ns}:patcher"
        own = patcher.create(_job(ns, "probe.nothing", me, {}))
        daemon.kube.delete(API, "DaemonJob", own["metadata"]["name"], namespace=ns)
        # A job created with answers already in it is refused (as its own principal).
        preset = _job(ns, "probe.nothing", me, {}, answers=[{"promptId": "p0", "value": True}])
        assert refusal in str(_refused(lambda: patcher.create(preset)))

        # The shim's answer passes the policy: the operator principal declines its own prompt.
        with daemon.http("operator") as client:
            answered = client.post(
                f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt["prompt_id"], "value": False}
            )
        assert answered.status_code == 200, answered.text
        job = daemon.wait_job(job_id, "operator")
        assert job["state"] == "failed", job
        assert job["error"]["detail"] == "Launch declined"
    finally:
        daemon.kube.delete(API, "InferenceWorkload", workload, namespace=ns)
    assert daemon.kube.get(API, "InferenceWorkload", workload, namespace=ns) is None


# -- the executor reads only the shim's answer Secret ------------------------------------------------


class LocalOperator:
    """The operator's DaemonJob executor in a thread of this process, as the chart's operator
    ServiceAccount, fed the job ``job_id`` by polling it (while :meth:`hold` is set, it is not
    fed: the job's host sees no change). ``workloads.run`` asks for a secret first."""

    def __init__(self, daemon: Daemon, job_id: str) -> None:
        self.kubeconfig: Path = _rbac(daemon).kubeconfigs["operator"]
        self.namespace = daemon.namespace
        self.job_id = job_id
        self.seen: list[str] = []
        self.hold = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._main()), daemon=True)
        self.error: BaseException | None = None

    async def _ask_first(self, ctx: Any, arguments: dict[str, Any]) -> Any:
        from sparkrun_operator.ops.executors import EXECUTORS

        value = await ctx.ask("secret", "Registry password")
        self.seen.append(value)
        await ctx.feedback(f"logged in with {value}")
        return await EXECUTORS["workloads.run"](ctx, arguments)

    async def _main(self) -> None:
        from sparkrun_operator.controllers.daemonjob import JobExecutor
        from sparkrun_operator.k8s.client import DAEMON_API_MANAGER, Kube
        from sparkrun_operator.ops.settings import Settings

        rest = await Kube.connect(field_manager=DAEMON_API_MANAGER, kubeconfig=str(self.kubeconfig))
        executor = JobExecutor(
            rest, settings=Settings(namespace=self.namespace), executors={"workloads.run": self._ask_first}
        )
        try:
            client = executor.jobs_in(self.namespace)
            while not self._stop.is_set():
                if not self.hold.is_set():
                    found = await client.get(self.job_id)
                    if found is None:
                        break
                    await executor.observe("MODIFIED", found)
                await asyncio.sleep(0.2)
        except BaseException as error:  # NB: reported by __exit__
            self.error = error
        finally:
            await executor.stop()
            await rest.close()

    def __enter__(self) -> LocalOperator:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the local executor did not stop"
        assert self.error is None, repr(self.error)


@pytest.fixture
def local(daemon: Daemon) -> Iterator[Callable[[str], LocalOperator]]:
    """``local(job_id)``: a :class:`LocalOperator` for the job, the module's operator stopped."""
    daemon.runner.operator.stop()
    try:
        yield lambda job_id: LocalOperator(daemon, job_id)
    finally:
        daemon.runner.operator.start()


def _state(daemon: Daemon, job_id: str, states: set[str], timeout: float = 60) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        found = daemon.job_object(job_id)
        if (found.get("status") or {}).get("state") in states:
            return found
        assert time.monotonic() < deadline, found.get("status")
        time.sleep(0.2)


def _secret(name: str, namespace: str, value: str, **meta: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace, **meta},
        "stringData": {"token": value},
    }


def _value(secret: dict[str, Any]) -> str:
    return base64.b64decode(secret["data"]["token"]).decode()


def _answer_as_shim(daemon: Daemon, job_id: str, prompt_id: str, secret: str) -> None:
    """Write a secretRef answer with the shim's own identity (admission lets it through)."""
    path = f"/apis/{API}/namespaces/{daemon.namespace}/daemonjobs/{job_id}"
    answer = {"promptId": prompt_id, "secretRef": {"name": secret, "key": "token"}}
    with KubeApi.from_kubeconfig(_rbac(daemon).kubeconfigs["shim"]) as shim:
        shim.request("PATCH", path, json={"spec": {"answers": [answer]}}, headers=MERGE)


TERMINAL = {"succeeded", "failed", "cancelled", "lost"}


def _assert_refused(job: dict[str, Any]) -> None:
    assert job["status"]["state"] == "failed", job["status"]
    error = job["status"]["error"]
    assert error["type"] == "PermissionError", error
    assert (error.get("details") or {}).get("reason") == "answer_secret_refused", error
    kinds = [e["type"] for e in job["status"]["events"]]
    assert "prompt_refused" in kinds, kinds


def _new_job(daemon: Daemon) -> str:
    obj = daemon.kube.create(
        _job(
            daemon.namespace,
            "workloads.run",
            daemon.env.username("admin"),
            {"recipe": "qwen3-8b-vllm", "dry_run": True},
        )
    )
    return str(obj["metadata"]["name"])


def test_a_secret_ref_to_an_unrelated_secret_is_never_read(
    daemon: Daemon, admission: None, local: Callable[[str], LocalOperator]
) -> None:
    ns = daemon.namespace
    victim, value = "unrelated-creds-" + secrets.token_hex(3), "hf_Unrelated" + secrets.token_hex(12)
    daemon.kube.create(_secret(victim, ns, value))
    job_id = _new_job(daemon)
    with local(job_id) as run:
        prompt_id = _state(daemon, job_id, {"waiting_input"})["status"]["prompt"]["id"]
        _answer_as_shim(daemon, job_id, prompt_id, victim)
        job = _state(daemon, job_id, TERMINAL)
    still = daemon.kube.get("v1", "Secret", victim, namespace=ns)
    seen = {
        "the executor got its value": value in run.seen,
        "the Secret was deleted": still is None,
        "its value is in the job": value in json.dumps(job),
    }
    assert seen == dict.fromkeys(seen, False), seen
    assert still is not None
    assert _value(still) == value
    _assert_refused(job)
    assert victim in job["status"]["error"]["message"]


def test_a_secret_planted_under_the_answer_name_is_never_read(
    daemon: Daemon, admission: None, local: Callable[[str], LocalOperator]
) -> None:
    from sparkrun_operator.ops import answers

    ns = daemon.namespace
    other: dict[str, Any] = {}  # the first variant's job: a real owner, of another job
    for variant in ("no labels, no owner", "labels, another job as the owner"):
        job_id = _new_job(daemon)
        with local(job_id) as run:
            prompt_id = _state(daemon, job_id, {"waiting_input"})["status"]["prompt"]["id"]
            name = answers.secret_name(job_id, prompt_id)
            value = "planted-" + secrets.token_hex(8)
            meta: dict[str, Any] = {}
            if variant != "no labels, no owner":
                meta = answers.secret_body(
                    {"metadata": {"name": job_id, "uid": other["uid"]}}, prompt_id, value, namespace=ns
                )["metadata"]
                del meta["name"], meta["namespace"]
                # NB: an owner that exists (the other job, by its name and UID): with an owner of
                # a made-up UID the garbage collector deletes the Secret, and the check below
                # could not tell who did.
                meta["ownerReferences"][0]["name"] = other["name"]
            else:
                other = daemon.job_object(job_id)["metadata"]
            daemon.kube.create(_secret(name, ns, value, **meta))
            _answer_as_shim(daemon, job_id, prompt_id, name)
            job = _state(daemon, job_id, TERMINAL)
        assert run.seen == [], variant
        _assert_refused(job)
        assert daemon.kube.get("v1", "Secret", name, namespace=ns) is not None, variant
        assert value not in json.dumps(job), variant


def test_a_secret_prompt_answered_through_the_shim(
    daemon: Daemon, admission: None, local: Callable[[str], LocalOperator]
) -> None:
    from sparkrun_operator.ops import answers

    ns = daemon.namespace
    job_id = daemon.submit("admin", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
    value = "hunter2-" + secrets.token_hex(6)
    with local(job_id) as run:
        obj = _state(daemon, job_id, {"waiting_input"})
        prompt_id = obj["status"]["prompt"]["id"]
        run.hold.set()  # the executor sees nothing until the Secret was inspected
        with daemon.http("operator") as client:  # the job is another principal's
            assert (
                client.post(
                    f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt_id, "value": value}
                ).status_code
                == 404
            )
        with daemon.http("admin") as client:
            answered = client.post(f"/v1/jobs/{job_id}/input", json={"prompt_id": prompt_id, "value": value})
        assert answered.status_code == 200, answered.text
        name = answers.secret_name(job_id, prompt_id)
        ref = daemon.job_object(job_id)["spec"]["answers"][0]["secretRef"]
        assert ref == {"name": name, "key": "token"}
        held = daemon.kube.get("v1", "Secret", name, namespace=ns)
        assert held is not None
        assert _value(held) == value
        labels = held["metadata"]["labels"]
        assert (labels["sparkrun.dev/daemonjob"], labels["sparkrun.dev/prompt"]) == (job_id, prompt_id)
        [owner] = held["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("DaemonJob", job_id, obj["metadata"]["uid"])
        assert owner["controller"] is True
        run.hold.clear()
        done = _state(daemon, job_id, TERMINAL)
    assert run.seen == [value]
    assert done["status"]["state"] == "succeeded", done["status"]
    assert daemon.kube.get("v1", "Secret", name, namespace=ns) is None  # read once, then deleted
    assert value not in json.dumps(done)
    assert "[redacted]" in json.dumps(done["status"]["events"])
    with daemon.http("admin") as client:
        assert value not in client.get(f"/v1/jobs/{job_id}/events").text


def test_the_shim_does_not_answer_into_a_planted_secret(
    daemon: Daemon, admission: None, local: Callable[[str], LocalOperator]
) -> None:
    """A Secret planted under the answer Secret's name before the caller answers: the shim does
    not take it for its own (409; no answer is recorded); once it is gone the answer goes in, and
    a retry with the same value is the same answer."""
    from sparkrun_operator.ops import answers

    # NB: ``local`` only keeps the module's operator stopped: the prompt below is written by hand.
    ns = daemon.namespace
    job_id = daemon.submit("admin", "workloads.run", {"recipe": "qwen3-8b-vllm", "dry_run": True})
    obj = daemon.job_object(job_id)
    obj["status"] = {
        "state": "waiting_input",
        "executor": "elsewhere",
        "prompt": {"id": "p1", "kind": "secret", "message": "token", "expiresAt": "2099-01-01T00:00:00Z"},
    }
    daemon.kube.request("PUT", f"/apis/{API}/namespaces/{ns}/daemonjobs/{job_id}/status", json=obj)
    name = answers.secret_name(job_id, "p1")
    daemon.kube.create(_secret(name, ns, "planted-value"))
    body = {"prompt_id": "p1", "value": "mine-" + secrets.token_hex(4)}
    with daemon.http("admin") as client:
        taken = client.post(f"/v1/jobs/{job_id}/input", json=body)
        assert taken.status_code == 409, taken.text
        assert name in taken.json()["detail"]
        assert not daemon.job_object(job_id)["spec"].get("answers")
        daemon.kube.delete("v1", "Secret", name, namespace=ns)
        assert client.post(f"/v1/jobs/{job_id}/input", json=body).status_code == 200
        assert client.post(f"/v1/jobs/{job_id}/input", json=body).status_code == 200
    [answer] = daemon.job_object(job_id)["spec"]["answers"]
    assert answer["secretRef"] == {"name": name, "key": "token"}
    assert (answer["promptId"], answer["answeredBy"]) == ("p1", daemon.env.username("admin"))
    held = daemon.kube.get("v1", "Secret", name, namespace=ns)
    assert held is not None
    assert _value(held) == body["value"]


# -- who answered (issue 29) ---------------------------------------------------------------------


def test_an_approval_answered_then_replayed_says_who(daemon: Daemon, admission: None) -> None:
    """The operator principal submits a launch that asks for approval; the admin principal
    declines it with a comment; the operator principal gives the same answer again (a replay,
    recorded as its own), and the admin's change of mind is refused."""
    ns = daemon.namespace
    admin, operator = daemon.env.username("admin"), daemon.env.username("operator")
    workload = "approved-" + secrets.token_hex(3)
    job_id = daemon.submit(
        "operator",
        "workloads.run",
        {"recipe": "qwen3-8b-vllm", "confirm": True, "workload_id_override": workload},
    )
    try:
        prompt = daemon.wait_job(job_id, "operator", states={"waiting_input"})["prompt"]
        body = {"prompt_id": prompt["prompt_id"], "value": False}
        url = f"/v1/jobs/{job_id}/input"
        with daemon.http("admin") as client:
            # Refused before anything is recorded: a name in the body, a bidirectional override.
            named = client.post(url, json={**body, "answered_by": "someone-else"})
            assert named.status_code == 422, named.text
            bidi = "approved\u202e".encode()
            refused = client.post(url, json=body, headers={"X-Sparkrun-Comment": bidi})
            assert refused.status_code == 422, refused.text
            assert "X-Sparkrun-Comment" in refused.json()["detail"]
            assert not daemon.job_object(job_id)["spec"].get("answers")
            comment = "not before the freeze ends ✓"
            answered = client.post(url, json=body, headers={"X-Sparkrun-Comment": comment.encode()})
            assert answered.status_code == 200, answered.text
            assert answered.json() == {}
            assert answered.headers["x-sparkrun-replayed"] == "false"
        job = daemon.wait_job(job_id, "operator")
        assert (job["state"], job["error"]["detail"]) == ("failed", "Launch declined")

        with daemon.http("operator") as client:
            replayed = client.post(url, json=body, headers={"X-Sparkrun-Comment": "confirmed"})
            assert replayed.status_code == 200, replayed.text
            assert replayed.json() == {}
            assert replayed.headers["x-sparkrun-replayed"] == "true"
            plain = client.get(f"/v1/jobs/{job_id}").json()
            shown = client.get(f"/v1/jobs/{job_id}", params={"include": "answers"}).json()
            assert client.get(f"/v1/jobs/{job_id}", params={"include": "arguments"}).status_code == 422
        with daemon.http("admin") as client:
            changed = client.post(url, json={**body, "value": True})
        assert changed.status_code == 409, changed.text
        assert changed.json()["error"]["attrs"] == {
            "reason": "already_answered",
            "prompt_id": body["prompt_id"],
        }

        assert "answers" not in plain  # the reference's Job envelope, unless asked
        assert {k: v for k, v in shown.items() if k != "answers"} == plain
        [record] = shown["answers"]
        assert {k: record[k] for k in ("prompt_id", "kind", "value", "answered_by", "comment")} == {
            "prompt_id": body["prompt_id"],
            "kind": "approval",
            "value": False,
            "answered_by": admin,
            "comment": comment,
        }
        assert record["replay_count"] == 1
        [again] = record["replays"]
        assert (again["by"], again["comment"]) == (operator, "confirmed")
        assert record["answered_at"] <= again["at"] <= time.time() + 60

        obj = daemon.job_object(job_id)
        [entry] = obj["spec"]["answers"]
        assert (entry["value"], entry["answeredBy"], entry["comment"]) == (False, admin, comment)
        [stored] = obj["status"]["answers"]
        assert (stored["answeredBy"], stored["replayCount"], stored["replays"][0]["by"]) == (
            admin,
            1,
            operator,
        )

        # Nobody but the shim rewrites who answered, system:masters included.
        path = f"/apis/{API}/namespaces/{ns}/daemonjobs/{job_id}/status"
        forged = copy.deepcopy(obj)
        forged["status"]["answers"][0]["answeredBy"] = operator
        error = _refused(lambda: daemon.kube.request("PUT", path, json=forged))
        assert error.status == 403, error
        assert "status.answers (who answered a prompt) are written only by the daemon API shim" in str(error)
        assert daemon.job_object(job_id)["status"]["answers"][0]["answeredBy"] == admin
    finally:
        daemon.kube.delete(API, "InferenceWorkload", workload, namespace=ns)
