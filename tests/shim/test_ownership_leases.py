"""Ownership leases of ephemeral workloads on the testbed (ADR 0049; ``spec.lease``).

A shim and an operator serve a namespace with exactly the chart's RBAC (``CHART_RBAC``): the
daemon API writes ownership Leases in its namespace, the operator only watches them.

Tested, over real HTTP and the real apiserver:

- claim, renew, a second principal's claim while held (409 ``lease_held``), a session is another
  holder, release by a non-holder (nothing) and by the holder (then anyone may claim at once), a
  workload without ``spec.lease`` (409 ``lease_not_enabled``), the Lease object (owner, label);
- a lapse without ``deleteOnExit``: ``Owned=False`` ``LeaseExpired``, label
  ``sparkrun.dev/orphaned=true``, listed by ``owned=false`` and not by ``owned=true``; another
  principal adopts the orphan: owned again, the label gone; released, it lapses again, and
  removing ``spec.lease`` takes the label, the condition and ``status.lease`` away;
- a lapse with ``deleteOnExit``: the workload is deleted and an Event ``Abandoned`` says so,
  naming who held it;
- a squatted Lease name (a Lease of the name not owned by the workload): ignored, reported
  (``status.lease.squatted``), never renewed (409 ``lease_squatted``);
- ``sparkrun-k8s lease``: a claim as the kubeconfig's identity that the API's claim meets (409),
  refusals as exit codes, ``list --owned``, ``hold`` renewing a 10 s lease until Ctrl-C (130).

Lapse uses the smallest TTL the API allows (10 s); every wait is a deadline on a state.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from sparkrun_testbed.plane import Testbed
from tests.shim.conftest import API, Daemon

pytestmark = pytest.mark.testbed
CHART_RBAC = True

ALIAS = "/v1/plugins/sparkrun-k8s/ops/workloads/"
ORPHANED = "sparkrun.dev/orphaned"


def _apply(daemon: Daemon, name: str, lease: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {"model": {"name": "Qwen/Qwen3-0.6B"}, "state": "Stopped"}
    if lease is not None:
        spec["lease"] = lease
    manifest = {"apiVersion": API, "kind": "InferenceWorkload", "metadata": {"name": name}, "spec": spec}
    applied: dict[str, Any] = daemon.kube.apply(manifest, namespace=daemon.namespace)
    return applied


def _op(daemon: Daemon, who: str, local: str, arguments: dict[str, Any]) -> Any:
    with daemon.http(who) as client:
        return client.post(ALIAS + local, json=arguments)


def _ok(daemon: Daemon, who: str, local: str, arguments: dict[str, Any]) -> Any:
    answer = _op(daemon, who, local, arguments)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _conflict(daemon: Daemon, who: str, local: str, arguments: dict[str, Any]) -> dict[str, Any]:
    answer = _op(daemon, who, local, arguments)
    assert answer.status_code == 409, answer.text
    body: dict[str, Any] = answer.json()
    assert body["error"]["type"] == "Conflict", body
    return body


def _principal(daemon: Daemon, who: str) -> str:
    return f"system:serviceaccount:{daemon.namespace}:{who}"


def _until(daemon: Daemon, name: str, what: str, check: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    def probe() -> dict[str, Any] | None:
        found = daemon.kube.get(API, "InferenceWorkload", name, namespace=daemon.namespace)
        return found if found is not None and check(found) else None

    found: dict[str, Any] = daemon.kube.wait(probe, timeout=90, what=f"{name}: {what}")
    return found


def _owned(status: str, reason: str) -> Callable[[dict[str, Any]], bool]:
    def check(obj: dict[str, Any]) -> bool:
        for cond in (obj.get("status") or {}).get("conditions") or []:
            if cond.get("type") == "Owned":
                return bool(cond.get("status") == status and cond.get("reason") == reason)
        return False

    return check


def _listed(daemon: Daemon, owned: bool | None) -> dict[str, dict[str, Any]]:
    arguments = {} if owned is None else {"owned": owned}
    return {entry["workload"]: entry for entry in _ok(daemon, "reader", "leases", arguments)["leases"]}


def test_claim_renew_conflict_and_release(daemon: Daemon) -> None:
    name = "eph-claim"
    _apply(daemon, name, {"ttlSeconds": 600})
    _apply(daemon, "not-ephemeral", None)
    try:
        claimed = _ok(daemon, "operator", "lease", {"workload": name})
        assert (claimed["claimed"], claimed["owner"], claimed["state"]) == (
            True,
            _principal(daemon, "operator"),
            "Held",
        )
        lease = daemon.kube.get(
            "coordination.k8s.io/v1", "Lease", f"sparkrun-lease-{name}", namespace=daemon.namespace
        )
        assert lease is not None
        assert lease["metadata"]["labels"] == {"sparkrun.dev/ownership": "true"}
        owner = lease["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"]) == ("InferenceWorkload", name)
        assert lease["spec"]["leaseDurationSeconds"] == 600

        renewed = _ok(daemon, "operator", "lease", {"workload": name, "ttl_seconds": 600})
        assert renewed["claimed"] is False
        held = _conflict(daemon, "admin", "lease", {"workload": name})
        assert held["error"]["attrs"]["reason"] == "lease_held"
        assert held["error"]["attrs"]["owner"] == _principal(daemon, "operator")
        session = _conflict(daemon, "operator", "lease", {"workload": name, "session": "other-script"})
        assert session["error"]["attrs"]["reason"] == "lease_held"
        assert _op(daemon, "operator", "lease", {"workload": name, "ttl_seconds": 60}).status_code == 422
        assert _op(daemon, "operator", "lease", {"workload": name, "session": "a b"}).status_code == 422
        assert _op(daemon, "reader", "lease", {"workload": name}).status_code == 403
        refused = _conflict(daemon, "operator", "lease", {"workload": "not-ephemeral"})
        assert refused["error"]["attrs"]["reason"] == "lease_not_enabled"

        _until(daemon, name, "Owned=True", _owned("True", "LeaseHeld"))
        assert name in _listed(daemon, True)
        assert name not in _listed(daemon, False)

        assert _ok(daemon, "admin", "release", {"workload": name}) == {"workload": name, "released": False}
        assert _ok(daemon, "operator", "release", {"workload": name}) == {"workload": name, "released": True}
        lease = daemon.kube.get(
            "coordination.k8s.io/v1", "Lease", f"sparkrun-lease-{name}", namespace=daemon.namespace
        )
        assert lease is not None
        assert "holderIdentity" not in lease["spec"]
        _until(daemon, name, "Owned=False unclaimed", _owned("False", "LeaseUnclaimed"))
        taken = _ok(daemon, "admin", "lease", {"workload": name, "session": "s-1"})
        assert (taken["claimed"], taken["owner"]) == (True, _principal(daemon, "admin") + "#s-1")
    finally:
        daemon.kube.delete(API, "InferenceWorkload", name, namespace=daemon.namespace)
        daemon.kube.delete(API, "InferenceWorkload", "not-ephemeral", namespace=daemon.namespace)


def test_a_lapse_without_delete_on_exit_orphans_until_adopted(daemon: Daemon) -> None:
    name = "eph-orphan"
    _apply(daemon, name, {"ttlSeconds": 10})
    try:
        _ok(daemon, "operator", "lease", {"workload": name})
        _until(daemon, name, "Owned=True", _owned("True", "LeaseHeld"))
        # nobody renews: the operator's own clock lapses it
        lapsed = _until(
            daemon,
            name,
            "orphaned",
            lambda o: (
                _owned("False", "LeaseExpired")(o)
                and (o["metadata"].get("labels") or {}).get(ORPHANED) == "true"
            ),
        )
        assert lapsed["status"]["lease"]["state"] == "Lapsed"
        assert lapsed["status"]["lease"]["holder"] == _principal(daemon, "operator")
        assert (
            name
            in daemon.kube.get(API, "InferenceWorkload", name, namespace=daemon.namespace)["metadata"]["name"]
        )
        orphans = _listed(daemon, False)
        assert orphans[name]["state"] == "Lapsed"
        assert orphans[name]["orphaned"] is True
        assert name not in _listed(daemon, True)
        labelled = daemon.kube.list_items(
            API, "InferenceWorkload", namespace=daemon.namespace, label_selector=f"{ORPHANED}=true"
        )
        assert [o["metadata"]["name"] for o in labelled] == [name]

        # a lapsed holder no longer blocks anyone: another principal adopts the orphan
        adopted = _ok(daemon, "admin", "lease", {"workload": name})
        assert adopted["claimed"] is True
        owned = _until(
            daemon,
            name,
            "owned again, unlabelled",
            lambda o: _owned("True", "LeaseHeld")(o) and ORPHANED not in (o["metadata"].get("labels") or {}),
        )
        assert owned["status"]["lease"]["holder"] == _principal(daemon, "admin")
        assert name in _listed(daemon, True)

        # released and lapsed again, then made permanent: spec.lease removed takes the label,
        # the condition and status.lease with it
        assert _ok(daemon, "admin", "release", {"workload": name})["released"] is True
        _until(
            daemon,
            name,
            "orphaned again",
            lambda o: (o["metadata"].get("labels") or {}).get(ORPHANED) == "true",
        )
        _apply(daemon, name, None)
        _until(
            daemon,
            name,
            "permanent",
            lambda o: (
                ORPHANED not in (o["metadata"].get("labels") or {})
                and "lease" not in (o.get("status") or {})
                and not any(c.get("type") == "Owned" for c in (o.get("status") or {}).get("conditions") or [])
            ),
        )
    finally:
        daemon.kube.delete(API, "InferenceWorkload", name, namespace=daemon.namespace)


def test_a_lapse_with_delete_on_exit_deletes_and_says_abandoned(daemon: Daemon) -> None:
    name = "eph-gone"
    uid = _apply(daemon, name, {"ttlSeconds": 10, "deleteOnExit": True})["metadata"]["uid"]
    _ok(daemon, "operator", "lease", {"workload": name})
    daemon.kube.wait(
        lambda: daemon.kube.get(API, "InferenceWorkload", name, namespace=daemon.namespace) is None,
        timeout=90,
        what=f"{name} deleted",
    )

    def abandoned() -> dict[str, Any] | None:
        for event in daemon.kube.list_items("v1", "Event", namespace=daemon.namespace):
            if event.get("reason") == "Abandoned" and event["involvedObject"].get("uid") == uid:
                return dict(event)
        return None

    event = daemon.kube.wait(abandoned, timeout=30, what="Event Abandoned")
    assert event["message"].startswith("abandoned")
    assert _principal(daemon, "operator") in event["message"]
    assert "deleteOnExit" in event["message"]


def test_a_squatted_lease_name_is_ignored(daemon: Daemon) -> None:
    name = "eph-squat"
    squatter = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": f"sparkrun-lease-{name}",
            "namespace": daemon.namespace,
            "labels": {"sparkrun.dev/ownership": "true"},
        },
        "spec": {"holderIdentity": "mallory", "leaseDurationSeconds": 600},
    }
    daemon.kube.apply(squatter, namespace=daemon.namespace)
    _apply(daemon, name, {"ttlSeconds": 600})
    try:
        found = _until(
            daemon,
            name,
            "squatted reported",
            lambda o: bool(((o.get("status") or {}).get("lease") or {}).get("squatted")),
        )
        assert found["status"]["lease"]["state"] == "Unclaimed"
        assert "holder" not in found["status"]["lease"]
        assert _owned("False", "LeaseUnclaimed")(found)
        refused = _conflict(daemon, "operator", "lease", {"workload": name})
        assert refused["error"]["attrs"]["reason"] == "lease_squatted"
        lease = daemon.kube.get(
            "coordination.k8s.io/v1", "Lease", f"sparkrun-lease-{name}", namespace=daemon.namespace
        )
        assert lease is not None
        assert lease["spec"]["holderIdentity"] == "mallory"  # never written
    finally:
        daemon.kube.delete(API, "InferenceWorkload", name, namespace=daemon.namespace)
        daemon.kube.delete(
            "coordination.k8s.io/v1", "Lease", f"sparkrun-lease-{name}", namespace=daemon.namespace
        )


def _cli(testbed: Testbed, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "sparkrun_operator.cli.main", "lease", *args]
    command += ["--kubeconfig", str(testbed.kubeconfig)]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_the_cli_claims_holds_and_meets_the_api(daemon: Daemon, testbed: Testbed) -> None:
    name = "eph-cli"
    _apply(daemon, name, {"ttlSeconds": 10})
    ns = ("-n", daemon.namespace, "-o", "json")
    try:
        claimed = _cli(testbed, "claim", name, *ns)
        assert claimed.returncode == 0, claimed.stderr
        holder = json.loads(claimed.stdout)["owner"]
        assert holder  # the testbed admin, as the apiserver authenticated it
        held = _conflict(daemon, "operator", "lease", {"workload": name})
        assert held["error"]["attrs"] == {"reason": "lease_held", "owner": holder}
        refused = _cli(testbed, "claim", name, "--session", "other", *ns)
        assert refused.returncode == 5, refused.stderr
        assert "held by" in refused.stderr

        # "owned" is the operator's judgement (status.lease), written after the claim: a busy
        # machine can list before the operator's pass, so wait for it (bounded)
        def owned() -> list[str] | None:
            listed = _cli(testbed, "list", "--owned", "true", *ns)
            assert listed.returncode == 0, listed.stderr
            names = [e["workload"] for e in json.loads(listed.stdout)["leases"]]
            return names or None

        assert daemon.env.kube.wait(owned, timeout=60, what="the claimed lease listed as owned") == [name]
        assert _cli(testbed, "claim", "missing", *ns).returncode == 4

        # hold: renews every ttl/3 until interrupted (exit 130), and the lease stays Held meanwhile
        path = f"sparkrun-lease-{name}"
        command = [sys.executable, "-m", "sparkrun_operator.cli.main", "lease", "hold", name, *ns]
        hold = subprocess.Popen(
            [*command, "--kubeconfig", str(testbed.kubeconfig)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            renews: set[str] = set()

            def renewed_three_times() -> bool:
                lease = daemon.kube.get("coordination.k8s.io/v1", "Lease", path, namespace=daemon.namespace)
                renews.add(str((lease or {}).get("spec", {}).get("renewTime")))
                return len(renews) >= 4

            daemon.kube.wait(renewed_three_times, timeout=60, what="three renews by hold")
            found = daemon.kube.get(API, "InferenceWorkload", name, namespace=daemon.namespace)
            assert _owned("True", "LeaseHeld")(found or {})  # 10 s TTL, yet never lapsed while held
            hold.send_signal(signal.SIGINT)  # ends it at once (tests/unit/test_lease_hold_interrupt.py)
            try:
                _out, err = hold.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                pytest.fail("lease hold still running 30 s after SIGINT")
            assert hold.returncode == 130, err
        finally:
            if hold.poll() is None:
                hold.kill()
            hold.communicate()  # NB: reaps it and closes its pipes, whatever failed above
        released = _cli(testbed, "release", name, *ns)
        assert released.returncode == 0, released.stderr
        assert json.loads(released.stdout) == {"workload": name, "released": True}
    finally:
        daemon.kube.delete(API, "InferenceWorkload", name, namespace=daemon.namespace)
