"""GitOps with a real engine's apply and drift code: Flux's server-side-apply library
(``tests/deploy/gitops.py``, ``hack/ssa-check``) and ``kubectl diff --server-side``.

1. The chart's output (``helm template``, rendered once to apply and once more to diff, as a
   GitOps engine renders on every reconcile) and every example (``examples/``) are applied as
   kustomize-controller applies them; the operator reconciles the examples (status, finalizers,
   children); then the library reports no drift, a second apply changes nothing, and
   ``kubectl diff --server-side`` exits 0.
2. ``spec.state`` (ADR 0027): Git omits it; the daemon API's sleep (its executor,
   ``ops.executors.workloads.lifecycle.sleep``) and the gateway's wake (``KubeWaker``) write it
   as their own field managers; re-applying Git reverts nothing and the library reports no
   drift. When Git does set ``spec.state``, the library reports the runtime change as drift and
   its apply reverts it: the documented consequence.
3. ``spec.replicas`` and ``spec.state`` under ``spec.autoscaling`` and ``spec.idle`` (ADR 0045):
   Git omits both; the autoscaler's scale-up and the idle policy's scale to zero (its merge
   patch as ``sparkrun-autoscaler``) and the gateway's wake from zero (``KubeWaker``, as
   ``sparkrun-gateway``) are no drift, re-applying Git changes nothing, and the operator
   measures the wake (``status.scaling.wakeSeconds.zero``). Git that pins ``spec.replicas``
   reverts each of them (the reason the docs leave it out). In ``External`` mode an HPA, in
   Git too, scales through ``/scale``, which records no field manager on a custom resource
   (kubernetes#131892): no drift either.

The chart gets its own release and namespace (``gitops-<hex>``); its CRDs are the session's
(identical, ``make verify``) and stay; its cluster-scoped objects are deleted afterwards.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.scaling import ScalingFigures
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.controllers import autoscale
from sparkrun_operator.gateway.kube import KubeRoutingSource, KubeWaker
from sparkrun_operator.k8s.client import (
    AUTOSCALER_MANAGER,
    DAEMON_API_MANAGER,
    GATEWAY_MANAGER,
    Kube,
    retry_conflicts,
)
from sparkrun_operator.ops.executors.workloads import lifecycle
from sparkrun_operator.ops.invocation import OperationContext
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.plan.autoscale import Decision
from sparkrun_testbed import plane
from sparkrun_testbed.kubeapi import KubeApi
from tests.deploy.chart import CHART, helm, helm_binary
from tests.deploy.gitops import (
    FLUX_MANAGER,
    IN_CI,
    Flux,
    SsaCheckMissing,
    actions,
    drift_of,
    ssa_check_binary,
)
from tests.operator.conftest import API, OperatorProcess, wait_condition

pytestmark = [pytest.mark.testbed, pytest.mark.usefixtures("crds")]
REPO = Path(__file__).resolve().parents[2]
OWNER_LABEL = "kustomize.toolkit.fluxcd.io/name"
#: The chart on the testbed: no aggregated APIService (nothing would serve it, and discovery of
#: every other test would suffer), TLS from a named Secret (a generated CA differs per render),
#: the fixed-name ClusterRoles (daemon, inference, tenant) left to tests/deploy/test_manifests.py,
#: no helm test pods.
#: The CRDs come from crds/ instead (the same content, `make verify`): the chart's carry this
#: release's labels, which other tests' applies of the session's CRDs would conflict with.
TESTBED_VALUES = [
    "--set", "crds.install=false",
    "--set", "shim.apiService.enabled=false",
    "--set", "shim.tls.existingSecret=gitops-shim-tls",
    "--set", "daemonRoles=false",
    "--set", "gateway.auth.inferenceRole=false",
    "--set", "tenancy.tenantRole=false",
    "--skip-tests",
]  # fmt: skip
CLUSTER_KINDS = "clusterrole,clusterrolebinding,validatingadmissionpolicy,validatingadmissionpolicybinding"


@pytest.fixture(scope="session")
def ssa_check() -> Path:
    try:
        return ssa_check_binary()
    except SsaCheckMissing as error:
        if IN_CI:
            pytest.fail(f"prerequisite missing under CI=true: {error}", pytrace=False)
        pytest.skip(str(error))


@pytest.fixture
def flux(ssa_check: Path, testbed: plane.Testbed, kubectl: Any) -> Iterator[Flux]:
    engine = Flux(ssa_check, testbed.kubeconfig, owner=f"gitops-{secrets.token_hex(3)}")
    yield engine
    selector = f"{OWNER_LABEL}={engine.owner}"
    kubectl("delete", f"{CLUSTER_KINDS},inferenceclusters.sparkrun.dev", "-l", selector, "--wait=false")
    kubectl("delete", "namespace", "-l", selector, "--wait=false")


def _chart(system: str) -> list[dict[str, Any]]:
    helm_bin = helm_binary()
    assert helm_bin is not None, "the testbed binaries include helm"
    out = helm(helm_bin, "template", "gitops", str(CHART), "--namespace", system, *TESTBED_VALUES).stdout
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": system}}
    crds = [d for p in sorted((REPO / "crds").glob("*.yaml")) for d in yaml.safe_load_all(p.read_text())]
    return [*crds, namespace, *(d for d in yaml.safe_load_all(out) if d)]


def _examples() -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _as_applied(docs: list[dict[str, Any]], owner: str, namespace: str | None) -> list[dict[str, Any]]:
    """The documents as ssa-check sends them (owner labels, namespace), for kubectl."""
    out = []
    for doc in docs:
        doc = yaml.safe_load(yaml.safe_dump(doc))
        meta = doc["metadata"]
        meta.setdefault("labels", {}).update(
            {OWNER_LABEL: owner, "kustomize.toolkit.fluxcd.io/namespace": "flux-system"}
        )
        if namespace and doc["kind"] != "InferenceCluster":
            meta.setdefault("namespace", namespace)
        out.append(doc)
    return out


def _kubectl_diff(kubectl: Any, docs: list[dict[str, Any]]) -> Any:
    """``kubectl diff --server-side`` as kustomize-controller. kubectl reads the live object and
    the dry-run result at two moments and shows status and resourceVersion too, so a status
    write in between (the operator's) is a difference: up to three tries for a quiet moment."""
    for _ in range(3):
        diffed = kubectl(
            "diff", "--server-side", f"--field-manager={FLUX_MANAGER}", "--force-conflicts", "-f", "-",
            input=yaml.safe_dump_all(docs), check=False,
        )  # fmt: skip
        if diffed.returncode != 1 or "resourceVersion" not in diffed.stdout:
            return diffed
        time.sleep(0.5)
    return diffed


def _reconciled(kube: KubeApi, docs: list[dict[str, Any]], namespace: str) -> Callable[[], bool]:
    def probe() -> bool:
        for doc in docs:
            ns = None if doc["kind"] == "InferenceCluster" else namespace
            live = kube.get(doc["apiVersion"], doc["kind"], doc["metadata"]["name"], namespace=ns)
            if live is None or not live.get("status"):
                return False
        return True

    return probe


KINDS = "inferenceworkloads,inferencebenchmarks,modelcaches,inferenceclusters,recipes,daemonjobs"


@pytest.fixture
def drained(
    kubectl: Any, namespace: str, operator_factory: Callable[..., OperatorProcess]
) -> Iterator[Callable[..., OperatorProcess]]:
    """The operator, and afterwards the namespace's resources deleted while it still runs: their
    finalizers must not outlive the test (a later test's cluster-wide operator would find a
    terminating namespace full of them)."""
    yield operator_factory
    kubectl("delete", KINDS, "--all", "-n", namespace, "--wait=true", "--timeout=120s")


def test_chart_and_examples_do_not_drift_once_the_operator_reconciled(
    flux: Flux, kube: KubeApi, kubectl: Any, namespace: str, drained: Callable[..., OperatorProcess]
) -> None:
    system = flux.owner
    chart, examples = _chart(system), _examples()
    t0 = time.monotonic()
    first = flux.apply(chart)
    assert set(actions(first).values()) <= {"created", "configured", "unchanged"}, first
    drained(namespace)
    flux.apply(examples, namespace=namespace)
    kube.wait(_reconciled(kube, examples, namespace), timeout=120, what="every example has a status")
    workload = kube.get(API, "InferenceWorkload", "qwen3-0-6b", namespace=namespace)
    assert workload is not None
    assert workload["metadata"].get("finalizers"), "the operator reconciled it"
    time.sleep(3.0)  # the operator's follow-up writes (status lane, children)

    # A GitOps engine renders again on each reconcile: the second render must not drift either.
    for docs, ns in ((_chart(system), None), (examples, namespace)):
        report = flux.diff(docs, namespace=ns)
        assert len(report["objects"]) == len(docs), "every object was compared"
        assert report["drifted"] == [], drift_of(report)
        again = flux.apply(docs, namespace=ns)
        assert set(actions(again).values()) == {"unchanged"}, actions(again)
        diffed = _kubectl_diff(kubectl, _as_applied(docs, flux.owner, ns))
        assert diffed.returncode == 0, diffed.stdout[-6000:] + diffed.stderr

    # The check can fail: scaling the gateway by hand (as proxy.stop does) is drift from Git.
    kubectl("scale", "deployment/gitops-gateway", "-n", system, "--replicas=0")
    report = flux.diff(_chart(system), fail_on_drift=True)
    assert report["rc"] == 2
    assert drift_of(report) == {
        f"Deployment/{system}/gitops-gateway": [{"op": "replace", "path": "/spec/replicas", "value": 2}]
    }
    print(f"[gitops] apply, reconcile and three drift checks in {time.monotonic() - t0:.1f} s")


# -- spec.state: runtime state written by the gateway and the daemon API (ADR 0027) -------------


def _git_workload(namespace: str, state: str | None = None) -> list[dict[str, Any]]:
    recipe = yaml.safe_load((REPO / "examples" / "recipe.yaml").read_text())
    spec: dict[str, Any] = {
        "recipe": {"name": recipe["metadata"]["name"]},
        "manager": "daemon",  # the daemon API's guarded sleep/wake act on it
        "engine": {"enableSleepMode": True},
    }
    if state is not None:
        spec["state"] = state
    workload = {"apiVersion": API, "kind": "InferenceWorkload", "metadata": {"name": "napper"}, "spec": spec}
    return [recipe, workload]


def _state_owners(kube: KubeApi, namespace: str) -> tuple[str, set[str]]:
    live = kube.get(API, "InferenceWorkload", "napper", namespace=namespace)
    assert live is not None
    owners = {m["manager"] for m in live["metadata"]["managedFields"] if "f:state" in str(m.get("fieldsV1"))}
    return live["spec"]["state"], owners


async def _daemon_sleep(api: Any, kube: KubeApi, namespace: str) -> None:
    """The daemon API's ``workloads.sleep`` executor, as the operator runs a DaemonJob: its
    patch of ``spec.state`` is the point; its wait for the engine (there is none: KWOK pods) is
    cancelled once the patch is stored."""
    live = kube.get(API, "InferenceWorkload", "napper", namespace=namespace)
    assert live is not None
    args = {
        "workload_id": "napper",
        "recipe": live["spec"]["recipe"]["name"],
        "recipe_revision": live["status"]["recipeRevision"],
    }
    ctx = OperationContext(
        rest=Kube(api, field_manager=DAEMON_API_MANAGER, owns_api=False),
        settings=Settings(namespace=namespace),
        principal="gitops-test",
    )
    task = asyncio.create_task(lifecycle.sleep(ctx, args))
    try:
        async with asyncio.timeout(30):
            while _state_owners(kube, namespace)[0] != "Sleeping":
                assert not task.done(), task.result()
                await asyncio.sleep(0.2)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _gateway_wake(api: Any, kube: KubeApi, namespace: str) -> None:
    """What the gateway does for a request to a Sleeping model: its routing source sees the
    workload (by its served name: the recipe's, not the workload's name), its waker sets
    ``spec.state: Running``."""
    live = kube.get(API, "InferenceWorkload", "napper", namespace=namespace) or {}
    served = ((live.get("status") or {}).get("model") or {}).get("servedName")
    assert served, live.get("status")
    assert served != "napper", served
    rest = Kube(api, field_manager=GATEWAY_MANAGER, owns_api=False)
    source = KubeRoutingSource(rest, namespace=namespace)
    await source.start()
    try:
        async with asyncio.timeout(30):
            table = source.snapshot()
            while (found := table.lookup(served)) is None or found.state != "Sleeping":
                table = await source.wait_changed(table.version)
        await KubeWaker(rest).wake(found)
    finally:
        await source.close()


def _wait_revision(kube: KubeApi, namespace: str) -> None:
    def probe() -> bool:
        live = kube.get(API, "InferenceWorkload", "napper", namespace=namespace)
        return bool(((live or {}).get("status") or {}).get("recipeRevision"))

    kube.wait(probe, timeout=90, what="status.recipeRevision of napper")


async def test_runtime_state_and_gitops_do_not_fight(
    flux: Flux,
    kube: KubeApi,
    kubectl: Any,
    k8s_api: Any,
    namespace: str,
    drained: Callable[..., OperatorProcess],
) -> None:
    drained(namespace)
    git = _git_workload(namespace)
    flux.apply(git, namespace=namespace)
    _wait_revision(kube, namespace)
    assert _state_owners(kube, namespace) == ("Running", set()), "the CRD default, owned by no manager"

    await _daemon_sleep(k8s_api, kube, namespace)
    assert _state_owners(kube, namespace) == ("Sleeping", {DAEMON_API_MANAGER})
    report = flux.diff(git, namespace=namespace)
    assert report["drifted"] == [], drift_of(report)
    assert set(actions(flux.apply(git, namespace=namespace)).values()) == {"unchanged"}
    assert _state_owners(kube, namespace)[0] == "Sleeping", "re-applying Git must not wake it"

    await _gateway_wake(k8s_api, kube, namespace)
    assert _state_owners(kube, namespace) == ("Running", {GATEWAY_MANAGER})
    report = flux.diff(git, namespace=namespace)
    assert report["drifted"] == [], drift_of(report)
    assert set(actions(flux.apply(git, namespace=namespace)).values()) == {"unchanged"}

    # Git that sets spec.state owns it: a runtime change is drift, and self-heal reverts it.
    pinned = _git_workload(namespace, state="Running")
    # The live value equals Git's: the library skips an object that did not drift, so nothing
    # is applied and the gateway still owns the field...
    assert set(actions(flux.apply(pinned, namespace=namespace)).values()) == {"unchanged"}
    assert _state_owners(kube, namespace) == ("Running", {GATEWAY_MANAGER})
    # ...until a runtime writer changes it: now it differs from Git, which is drift.
    await _daemon_sleep(k8s_api, kube, namespace)
    report = flux.diff(pinned, namespace=namespace)
    subject = f"InferenceWorkload/{namespace}/napper"
    assert report["drifted"] == [subject], report
    assert flux.diff(pinned, namespace=namespace, fail_on_drift=True)["rc"] == 2
    patch = next(o["patch"] for o in report["objects"] if o["subject"] == subject)
    assert [(p["op"], p["path"], p["value"]) for p in patch] == [("replace", "/spec/state", "Running")]
    diffed = _kubectl_diff(kubectl, _as_applied(pinned, flux.owner, namespace))
    assert diffed.returncode == 1, diffed.stdout + diffed.stderr  # kubectl sees the same drift
    changed = [line.replace(" ", "") for line in diffed.stdout.splitlines() if "state:" in line]
    assert sorted(changed) == ["+state:Running", "-state:Sleeping"], diffed.stdout
    healed = flux.apply(pinned, namespace=namespace)
    assert actions(healed)[subject] == "configured"
    assert _state_owners(kube, namespace) == ("Running", {FLUX_MANAGER}), "the sleep was reverted"


# -- spec.replicas and spec.state under autoscaling and idle (ADR 0045) ---------------------------

ELASTIC = "elastic"
#: Windows and cooldown so long that nothing the operator itself may decide interferes.
QUIET = {"scrapeIntervalSeconds": 300, "scaleUpWindowSeconds": 3600, "cooldownSeconds": 86_400}


def _elastic(replicas: int | None = None) -> list[dict[str, Any]]:
    """The workload as Git holds it: autoscaling and an idle policy, no spec.replicas and no
    spec.state (docs/autoscaling.md, "GitOps"); ``replicas`` pins it (the documented fight)."""
    spec: dict[str, Any] = {
        "model": {"name": "Qwen/Qwen3-0.6B"},
        "autoscaling": {"minReplicas": 0, "maxReplicas": 4, "target": {"waitingPerReplica": 4}, **QUIET},
        "idle": {"zeroAfterSeconds": 600},
    }
    if replicas is not None:
        spec["replicas"] = replicas
    return [{"apiVersion": API, "kind": "InferenceWorkload", "metadata": {"name": ELASTIC}, "spec": spec}]


def _owners(kube: KubeApi, namespace: str, name: str, field: str) -> tuple[Any, set[str]]:
    """``spec.<field>`` of the live workload and the managers that own it (any subresource)."""
    live = kube.get(API, "InferenceWorkload", name, namespace=namespace)
    assert live is not None
    owners = {
        m["manager"]
        for m in live["metadata"].get("managedFields") or []
        if f"f:{field}" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    }
    return live["spec"].get(field), owners


async def _autoscaler_writes(
    api: Any, kube: KubeApi, namespace: str, action: Any, to: int, state: Any = "Running"
) -> None:
    """A decision written as the operator's autoscaler writes it: its merge patch (only the fields
    it changes, the resourceVersion it decided on as a precondition) as ``sparkrun-autoscaler``.
    A write made meanwhile (the operator's status) refuses it with 409, and the autoscaler decides
    again on its next scrape: here at once, from a fresh read (``retry_conflicts``)."""
    await retry_conflicts(lambda: _autoscaler_patch(api, kube, namespace, action, to, state))


async def _autoscaler_patch(
    api: Any, kube: KubeApi, namespace: str, action: Any, to: int, state: Any
) -> None:
    live = kube.get(API, "InferenceWorkload", ELASTIC, namespace=namespace)
    assert live is not None
    spec = InferenceWorkloadSpec.model_validate(live["spec"])
    decision = Decision(
        action=action,
        from_replicas=spec.replicas,
        to_replicas=to,
        state=state,
        message="the gitops test",
        figures=ScalingFigures(),
        resume_replicas=spec.replicas if to == 0 else None,
    )
    # NB: the autoscaler's own patch (act() itself posts a kopf Event: it needs a running operator)
    patch = autoscale.patch_of(decision, spec, live["metadata"]["resourceVersion"])
    rest = Kube(api, field_manager=AUTOSCALER_MANAGER, owns_api=False)
    await rest.merge_patch(autoscale.WORKLOADS, ELASTIC, patch, namespace)


async def _gateway_wakes_from_zero(api: Any, namespace: str) -> None:
    """What the gateway does for a request to a model at zero replicas: its routing source sees
    the workload resting at zero, its waker sets replicas back (and state Running)."""
    rest = Kube(api, field_manager=GATEWAY_MANAGER, owns_api=False)
    source = KubeRoutingSource(rest, namespace=namespace)
    await source.start()
    try:
        async with asyncio.timeout(30):
            table = source.snapshot()
            while (found := table.lookup("Qwen/Qwen3-0.6B")) is None or found.resting != "Zero":
                table = await source.wait_changed(table.version)
        await KubeWaker(rest).wake(found)
    finally:
        await source.close()


def _no_drift(flux: Flux, kubectl: Any, git: list[dict[str, Any]], namespace: str) -> None:
    """Flux's diff reports nothing, its apply changes nothing, ``kubectl diff`` agrees."""
    report = flux.diff(git, namespace=namespace)
    assert report["drifted"] == [], drift_of(report)
    assert set(actions(flux.apply(git, namespace=namespace)).values()) == {"unchanged"}
    diffed = _kubectl_diff(kubectl, _as_applied(git, flux.owner, namespace))
    assert diffed.returncode == 0, diffed.stdout[-6000:] + diffed.stderr


async def test_autoscaler_idle_and_wake_do_not_fight_git(
    flux: Flux,
    kube: KubeApi,
    kubectl: Any,
    k8s_api: Any,
    namespace: str,
    drained: Callable[..., OperatorProcess],
) -> None:
    drained(namespace)
    git = _elastic()
    flux.apply(git, namespace=namespace)
    wait_condition(kube, namespace, ELASTIC, "Ready", timeout=90)
    assert _owners(kube, namespace, ELASTIC, "replicas") == (1, set()), "the CRD default, no manager"

    # load: the autoscaler scales up
    await _autoscaler_writes(k8s_api, kube, namespace, "ScaleUp", 3)
    assert _owners(kube, namespace, ELASTIC, "replicas") == (3, {AUTOSCALER_MANAGER})
    _no_drift(flux, kubectl, git, namespace)
    assert _owners(kube, namespace, ELASTIC, "replicas")[0] == 3, "re-applying Git must not scale it"

    # idle: the idle policy takes it to zero replicas, state Running (not Stopped, not Sleeping)
    await _autoscaler_writes(k8s_api, kube, namespace, "ScaleToZero", 0)
    assert _owners(kube, namespace, ELASTIC, "replicas") == (0, {AUTOSCALER_MANAGER})
    obj = wait_condition(
        kube,
        namespace,
        ELASTIC,
        "Ready",
        "False",
        reason="ScaledToZero",
        timeout=60,
        extra=lambda o: o["status"].get("replicas") == 0,  # every JobSet gone: a cold start follows
    )
    assert (obj["spec"]["state"], obj["status"]["phase"]) == ("Running", "ScaledToZero")
    _no_drift(flux, kubectl, git, namespace)
    assert _owners(kube, namespace, ELASTIC, "replicas")[0] == 0, "re-applying Git must not wake it"

    # a request: the gateway wakes it from zero; the operator measures the wake
    await _gateway_wakes_from_zero(k8s_api, namespace)
    replicas, owners = _owners(kube, namespace, ELASTIC, "replicas")
    assert (replicas, owners) == (1, {GATEWAY_MANAGER}), "max(1, minReplicas): no resumeReplicas recorded"
    _no_drift(flux, kubectl, git, namespace)
    obj = wait_condition(
        kube,
        namespace,
        ELASTIC,
        "Ready",
        timeout=90,
        extra=lambda o: bool(((o["status"].get("scaling") or {}).get("wakeSeconds") or {}).get("zero")),
    )
    scaling = obj["status"]["scaling"]
    assert "wake" not in scaling, scaling
    assert 0 <= scaling["wakeSeconds"]["zero"][0] < 90, scaling
    print(f"[gitops] wake from zero measured by the operator: {scaling['wakeSeconds']['zero'][0]} s")

    # Git that pins spec.replicas fights every one of them: drift, and its apply reverts them.
    pinned = _elastic(replicas=3)
    subject = f"InferenceWorkload/{namespace}/{ELASTIC}"
    report = flux.diff(pinned, namespace=namespace)
    assert drift_of(report) == {subject: [{"op": "replace", "path": "/spec/replicas", "value": 3}]}
    assert actions(flux.apply(pinned, namespace=namespace))[subject] == "configured"
    assert _owners(kube, namespace, ELASTIC, "replicas") == (3, {FLUX_MANAGER}), "the wake was reverted"
    await _autoscaler_writes(k8s_api, kube, namespace, "ScaleToZero", 0)
    report = flux.diff(pinned, namespace=namespace, fail_on_drift=True)
    assert report["rc"] == 2
    assert drift_of(report) == {subject: [{"op": "replace", "path": "/spec/replicas", "value": 3}]}
    diffed = _kubectl_diff(kubectl, _as_applied(pinned, flux.owner, namespace))
    assert diffed.returncode == 1, diffed.stdout + diffed.stderr  # kubectl sees the same drift
    changed = [line.replace(" ", "") for line in diffed.stdout.splitlines() if "replicas:" in line]
    assert "+replicas:3" in changed, diffed.stdout
    assert "-replicas:0" in changed, diffed.stdout
    assert actions(flux.apply(pinned, namespace=namespace))[subject] == "configured"
    assert _owners(kube, namespace, ELASTIC, "replicas") == (3, {FLUX_MANAGER}), "the idle policy reverted"


def _hpa(minimum: int) -> dict[str, Any]:
    """An HPA on the workload's scale subresource, on the metric the operator exports (the
    testbed has no external metrics API: below ``minReplicas`` it scales without a metric)."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "external"},
        "spec": {
            "scaleTargetRef": {"apiVersion": API, "kind": "InferenceWorkload", "name": "external"},
            "minReplicas": minimum,
            "maxReplicas": 4,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": {"name": "sparkrun_workload_load_per_replica"},
                        "target": {"type": "AverageValue", "averageValue": "4"},
                    },
                }
            ],
        },
    }


def test_an_hpa_in_external_mode_does_not_fight_git(
    flux: Flux, kube: KubeApi, kubectl: Any, namespace: str
) -> None:
    """``External`` mode: the HPA (in Git too) writes spec.replicas through ``/scale``. The
    apiserver records no field manager for it (what docs/autoscaling.md tells Argo CD users), so
    nothing owns the field and Git, which leaves it out, does not fight the HPA."""
    workload = {
        "apiVersion": API,
        "kind": "InferenceWorkload",
        "metadata": {"name": "external"},
        "spec": {
            "model": {"name": "Qwen/Qwen3-0.6B"},
            "autoscaling": {"mode": "External", "minReplicas": 1, "maxReplicas": 4},
        },
    }
    git = [workload, _hpa(minimum=2)]
    flux.apply(git, namespace=namespace)

    def scaled() -> dict[str, Any] | None:
        live = kube.get(API, "InferenceWorkload", "external", namespace=namespace)
        return live if live is not None and live["spec"].get("replicas") == 2 else None

    live = kube.wait(scaled, timeout=90, what="the HPA's scale to its minReplicas 2")
    entries = [
        (m["manager"], m.get("operation"), m.get("subresource"))
        for m in live["metadata"]["managedFields"]
        if "f:replicas" in ((m.get("fieldsV1") or {}).get("f:spec") or {})
    ]
    print(f"[gitops] spec.replicas written by the HPA (replicas {live['spec']['replicas']}): {entries}")
    # kubernetes#131892: a write through a custom resource's /scale records no managedFields
    # entry (an explicit fieldManager neither): no manager to name, and none that owns the field
    assert entries == [], "the apiserver now records /scale writes: update docs/autoscaling.md, GitOps"
    _no_drift(flux, kubectl, git, namespace)
    assert _owners(kube, namespace, "external", "replicas")[0] == 2, "re-applying Git must not undo the HPA"
