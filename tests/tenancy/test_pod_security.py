"""Pod Security of every pod the operator creates, on the testbed's real kube-apiserver (its
PodSecurity admission plugin enforces the ``pod-security.kubernetes.io/*`` namespace labels).

Each pod kind is taken exactly as the renderer produces it (the Job's or JobSet's pod template)
and created as a Pod with server-side ``dryRun=All`` in namespaces labelled ``enforce=restricted``
and ``enforce=baseline``: download, tool and benchmark runner pods meet ``restricted``; engine
pods (leader and worker) meet ``baseline`` by default and fail ``restricted`` only on
``runAsNonRoot`` (the vLLM image runs as root), and meet ``restricted`` with a non-root
``spec.pod``. This is admission only: the testbed runs pods as processes, which ignore
``securityContext`` at run time (docs/testbed.md), so nothing here shows a container's user.

Also: ``spec.pod``'s CRD rules on the real apiserver (the cases of
``tests/unit/test_pod_override.py``), and the chart's policy ``<prefix>-workload-pod`` (rendered
with ``tenancy.serviceAccounts``) refusing a ServiceAccount the administrator did not allow,
admitting an allowed one, and refusing the release's own accounts in its namespace even under
``"*": ["*"]``.
"""

from __future__ import annotations

import functools
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from sparkrun_operator.api.benchmark import InferenceBenchmarkSpec
from sparkrun_operator.api.modelcache import ModelCacheSpec
from sparkrun_operator.api.podoverride import PodOverride
from sparkrun_operator.api.workload import InferenceWorkloadSpec
from sparkrun_operator.recipe.resolve import resolve
from sparkrun_operator.render import benchmark, cachetool, modelcache
from sparkrun_operator.render.workload import ServingInputs, render_jobset
from sparkrun_testbed.kubeapi import ApiError, KubeApi
from sparkrun_testbed.plane import Testbed
from tests.deploy.chart import CHART, helm, render, require_helm
from tests.operator.admission import bound_to, first_refusal
from tests.unit.test_pod_override import ADMITTED, REFUSED, workload

PSA = "pod-security.kubernetes.io"
#: What an engine pod may set to meet restricted: a user the image has (sparkrun-vllm's 65532).
NON_ROOT = {"securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532}}


def _namespace(kube: KubeApi, prefix: str, level: str) -> str:
    name = f"{prefix}-{secrets.token_hex(3)}"
    labels = {f"{PSA}/enforce": level, f"{PSA}/enforce-version": "latest"}
    kube.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}})
    # NB: the ServiceAccount admission plugin refuses pods until the `default` account exists.
    kube.wait(lambda: kube.get("v1", "ServiceAccount", "default", namespace=name), timeout=30, what=name)
    return name


@pytest.fixture(scope="module")
def levels(testbed: Testbed, kube: KubeApi) -> Iterator[dict[str, str]]:
    """A namespace per enforced level: ``{"restricted": name, "baseline": name}``."""
    made = {level: _namespace(kube, f"psa-{level}", level) for level in ("restricted", "baseline")}
    yield made
    for name in made.values():
        kube.delete("v1", "Namespace", name)


def dry_run_pod(kube: KubeApi, ns: str, name: str, template: dict[str, Any]) -> dict[str, Any]:
    """Create ``template`` (a pod template) as Pod ``name`` in ``ns`` with ``dryRun=All``."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {**template.get("metadata", {}), "name": name, "namespace": ns},
        "spec": template["spec"],
    }
    path = kube.resource_path("v1", "Pod", namespace=ns)
    result: dict[str, Any] = kube.request("POST", path, params={"dryRun": "All"}, json=pod).json()
    return result


def refusal(kube: KubeApi, ns: str, name: str, template: dict[str, Any]) -> str:
    """The apiserver's refusal (403) of ``template`` in ``ns``."""
    with pytest.raises(ApiError) as refused:
        dry_run_pod(kube, ns, name, template)
    assert refused.value.status == 403, refused.value
    return str(refused.value)


# -- the pods, exactly as rendered ----------------------------------------------------------


def download_pod() -> dict[str, Any]:
    spec = ModelCacheSpec.model_validate(
        {
            "source": {
                "huggingFace": {
                    "repo": "Qwen/Qwen3-0.6B",
                    "revision": "main",
                    "tokenSecretRef": {"name": "hf", "key": "token"},
                }
            },
            "storage": {"create": {"size": "10Gi"}},
        }
    )
    owner = modelcache.CacheOwner(name="qwen", namespace="x", uid="u1")
    job = modelcache.render_job(owner, key="k1", spec=spec, options=modelcache.DownloadOptions())
    template: dict[str, Any] = job["spec"]["template"]
    return template


def tool_pod(*, read_only: bool) -> dict[str, Any]:
    run = cachetool.ToolRun(
        job_id="j1",
        job_uid="u1",
        namespace="x",
        verb="repair",
        module=cachetool.DOWNLOAD_MODULE,
        args=["repair", "--repo", "o/m"],
        claim="models",
        read_only=read_only,
        token_secret=("hf", "token"),
        token_origins=("https://huggingface.co",),
    )
    template: dict[str, Any] = cachetool.render_tool_job(run, cachetool.ToolOptions())["spec"]["template"]
    return template


def benchmark_pod() -> dict[str, Any]:
    spec = InferenceBenchmarkSpec.model_validate(
        {
            "target": {"workloadRef": {"name": "qwen"}},
            "scenarios": [{"name": "single", "concurrency": 1, "requests": 4}],
        }
    )
    owner = benchmark.BenchmarkOwner(name="bench", namespace="x", uid="u1")
    job = benchmark.render_job(
        owner,
        spec=spec,
        scenario=spec.scenarios[0],
        attempt=0,
        target=benchmark.Target(base_url="http://qwen.x.svc:8000", model="qwen"),
        options=benchmark.BenchOptions(),
        deadline_seconds=60,
    )
    template: dict[str, Any] = job["spec"]["template"]
    return template


def engine_pods(pod: dict[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """The leader's and the worker's pod templates of a two-node replica."""
    spec = InferenceWorkloadSpec.model_validate(
        {
            "model": {"name": "Qwen/Qwen3-0.6B"},
            "topology": {"nodes": 2, "gpusPerNode": 1, "tensorParallel": 2},
        }
    )
    resolution = resolve(workload=spec, recipe=None)
    assert resolution.spec is not None, resolution.issues
    override = PodOverride.model_validate(pod) if pod is not None else None
    inputs = ServingInputs(spec=resolution.spec, scheduling=spec.scheduling, pod=override)
    js = render_jobset(namespace="x", workload="qwen", inputs=inputs, replica=0, suspend=False)
    return {rj["name"]: rj["template"]["spec"]["template"] for rj in js["spec"]["replicatedJobs"]}


def tools_pods() -> dict[str, dict[str, Any]]:
    return {
        "download": download_pod(),
        "tool-rw": tool_pod(read_only=False),
        "tool-ro": tool_pod(read_only=True),
        "bench": benchmark_pod(),
    }


# -- Pod Security ---------------------------------------------------------------------------


def test_restricted_is_enforced_here(kube: KubeApi, levels: dict[str, str]) -> None:
    """The control: a pod without a securityContext is refused under restricted."""
    bare = {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}
    message = refusal(kube, levels["restricted"], "bare", bare)
    assert "restricted" in message, message
    assert "runAsNonRoot" in message, message


@pytest.mark.parametrize("kind", sorted(tools_pods()))
def test_tools_pods_meet_restricted(kube: KubeApi, levels: dict[str, str], kind: str) -> None:
    created = dry_run_pod(kube, levels["restricted"], f"{kind}-pod", tools_pods()[kind])
    assert created["spec"]["automountServiceAccountToken"] is False
    assert created["spec"]["securityContext"]["runAsNonRoot"] is True


@pytest.mark.parametrize("role", ["leader", "worker"])
def test_engine_pods_meet_baseline_and_all_of_restricted_but_the_user(
    kube: KubeApi, levels: dict[str, str], role: str
) -> None:
    template = engine_pods()[role]
    created = dry_run_pod(kube, levels["baseline"], f"engine-{role}", template)
    assert created["spec"]["automountServiceAccountToken"] is False
    message = refusal(kube, levels["restricted"], f"engine-{role}", template)
    # NB: the one restricted rule the default engine pod breaks: the vLLM image runs as root.
    assert "runAsNonRoot" in message, message
    for rule in ("allowPrivilegeEscalation", "unrestricted capabilities", "seccompProfile"):
        assert rule not in message, message


@pytest.mark.parametrize("role", ["leader", "worker"])
def test_engine_pods_with_a_non_root_override_meet_restricted(
    kube: KubeApi, levels: dict[str, str], role: str
) -> None:
    created = dry_run_pod(kube, levels["restricted"], f"engine-{role}", engine_pods(NON_ROOT)[role])
    assert created["spec"]["securityContext"]["runAsUser"] == 65532


def test_an_added_capability_is_refused_where_restricted(kube: KubeApi, levels: dict[str, str]) -> None:
    """What the docs say of RDMA: IPC_LOCK takes the engine out of restricted (and baseline)."""
    rdma = {**NON_ROOT, "containerSecurityContext": {"capabilities": {"add": ["IPC_LOCK"]}}}
    template = engine_pods(rdma)["leader"]
    assert "capabilities" in refusal(kube, levels["restricted"], "engine-rdma", template)
    assert "capabilities" in refusal(kube, levels["baseline"], "engine-rdma", template)


# -- spec.pod on the real apiserver -----------------------------------------------------------


def _dry_run_workload(kube: KubeApi, ns: str, manifest: dict[str, Any]) -> None:
    path = kube.resource_path("sparkrun.dev/v1alpha1", "InferenceWorkload", namespace=ns)
    # NB: strict field validation, as kubectl sends it: an unknown field (privileged, hostNetwork) is
    # refused rather than dropped.
    params = {"dryRun": "All", "fieldValidation": "Strict"}
    kube.request("POST", path, params=params, json={**manifest, "metadata": {"name": "w"}})


@pytest.mark.parametrize(("case", "pod"), ADMITTED, ids=[c[0] for c in ADMITTED])
def test_the_crd_admits(crds: list[str], kube: KubeApi, levels: dict[str, str], case: str, pod: Any) -> None:
    _dry_run_workload(kube, levels["baseline"], workload(pod))


@pytest.mark.parametrize(("case", "pod", "path"), REFUSED, ids=[c[0] for c in REFUSED])
def test_the_crd_refuses(
    crds: list[str], kube: KubeApi, levels: dict[str, str], case: str, pod: Any, path: str
) -> None:
    with pytest.raises(ApiError) as refused:
        _dry_run_workload(kube, levels["baseline"], workload(pod))
    # 400: an unknown field (strict decoding); 422: a schema or CEL rule.
    assert refused.value.status in (400, 422), (case, refused.value)
    assert path in str(refused.value), (case, path, str(refused.value))


# -- the chart's ServiceAccount policy --------------------------------------------------------


@pytest.fixture
def own_ns(testbed: Testbed, kube: KubeApi) -> Iterator[str]:
    """A baseline namespace of this test's own: ``bound_to`` names its policy ``<policy>-<ns>``, so
    two tests binding ``-workload-pod`` (with different parameters) to one namespace would share the
    name, and the second's first probe could meet the first's stale policy."""
    name = _namespace(kube, "psa-sa", "baseline")
    yield name
    kube.delete("v1", "Namespace", name)


def test_only_allowed_service_accounts(crds: list[str], kube: KubeApi, own_ns: str, tmp_path: Path) -> None:
    ns = own_ns
    kube.create(
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "engine", "namespace": ns}}
    )
    values = {"tenancy": {"serviceAccounts": {ns: ["engine"], "*": ["everywhere"]}}}
    rendered = render(require_helm(), tmp_path, values)
    policy = [d for d in rendered.docs if d["metadata"]["name"].endswith("-workload-pod")]
    assert [d["kind"] for d in policy] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]

    def create(name: str, account: str) -> None:
        doc = workload({"serviceAccountName": account}, name)
        kube.create({**doc, "metadata": {"name": name, "namespace": ns}})

    def undo(name: str) -> None:
        kube.delete("sparkrun.dev/v1alpha1", "InferenceWorkload", name, namespace=ns)

    with bound_to(kube, ns, [policy]):
        error = first_refusal(lambda n: create(n, "intruder"), undo, "a ServiceAccount not allowed")
        assert error.status == 403, error
        assert "ServiceAccount intruder is not allowed" in str(error), error
        assert "tenancy.serviceAccounts" in str(error), error
        # "*" lists accounts for the namespaces not listed: not for this one.
        assert first_refusal(lambda n: create(n, "everywhere"), undo, "another namespace's").status == 403
        for account in ("engine", "default"):
            create(f"ok-{account}", account)
            undo(f"ok-{account}")
        # An update that keeps the account is not checked again; one that changes it is.
        create("kept", "engine")
        merge = {"Content-Type": "application/merge-patch+json"}
        path = kube.resource_path("sparkrun.dev/v1alpha1", "InferenceWorkload", namespace=ns, name="kept")
        kube.request("PATCH", path, json={"spec": {"replicas": 2}}, headers=merge)
        with pytest.raises(ApiError) as changed:
            kube.request(
                "PATCH", path, json={"spec": {"pod": {"serviceAccountName": "intruder"}}}, headers=merge
            )
        assert changed.value.status == 403
        undo("kept")


def test_the_release_accounts_are_never_lent(
    crds: list[str], kube: KubeApi, own_ns: str, tmp_path: Path
) -> None:
    """In the release's own namespace, the release's ServiceAccounts (operator, gateway, shim,
    the uninstall and upgrade-check hooks) are refused even where ``tenancy.serviceAccounts``
    allows every account (``"*": ["*"]``): an engine given the operator's token would hold the
    operator's rights in every served namespace. Any other account stays allowed by the wildcard."""
    ns = own_ns
    values = {"tenancy": {"serviceAccounts": {"*": ["*"]}}, "operator": {"stopBeforeUninstall": True}}
    rendered = render(require_helm(), tmp_path, values, "--namespace", ns)
    policy = [d for d in rendered.docs if d["metadata"]["name"].endswith("-workload-pod")]
    accounts = sorted(d["metadata"]["name"] for d in rendered.of("ServiceAccount"))
    assert len(accounts) == 5, accounts
    for account in (*accounts, "lent"):
        kube.create(
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account, "namespace": ns}}
        )

    def create(name: str, account: str) -> None:
        doc = workload({"serviceAccountName": account, "automountServiceAccountToken": True}, name)
        kube.create({**doc, "metadata": {"name": name, "namespace": ns}})

    def undo(name: str) -> None:
        kube.delete("sparkrun.dev/v1alpha1", "InferenceWorkload", name, namespace=ns)

    with bound_to(kube, ns, [policy]):
        for account in accounts:
            error = first_refusal(functools.partial(create, account=account), undo, account)
            assert error.status == 403, (account, error)
            assert f"ServiceAccount {account} is this release's own" in str(error), error
        create("lent", "lent")
        undo("lent")


# -- the chart: Pod Security labels for watchNamespaces ---------------------------------------


def test_the_chart_creates_no_namespace_unless_asked(tmp_path: Path) -> None:
    helm_bin = require_helm()
    plain = render(helm_bin, tmp_path, {"watchNamespaces": ["team-a"]})
    assert [d for d in plain.of("Namespace") if d["metadata"]["name"] == "team-a"] == []
    asked = {"watchNamespaces": ["team-a", "team-b"], "podSecurity": {"createNamespaces": True}}
    made = {d["metadata"]["name"]: d for d in render(helm_bin, tmp_path, asked).of("Namespace")}
    assert set(made) >= {"team-a", "team-b"}
    meta = made["team-a"]["metadata"]
    assert meta["annotations"]["helm.sh/resource-policy"] == "keep"
    labels = {k: v for k, v in meta["labels"].items() if k.startswith(PSA)}
    assert labels == {
        f"{PSA}/enforce": "baseline",
        f"{PSA}/enforce-version": "latest",
        f"{PSA}/warn": "restricted",
        f"{PSA}/warn-version": "latest",
        f"{PSA}/audit": "restricted",
        f"{PSA}/audit-version": "latest",
    }


@pytest.mark.parametrize(
    "values",
    [
        {"podSecurity": {"createNamespaces": True}},
        {"watchNamespaces": ["a"], "podSecurity": {"createNamespaces": True, "enforce": "strict"}},
        {"tenancy": {"serviceAccounts": {"team-a": "engine"}}},
        {"tenancy": {"serviceAccounts": {"team-a": ["x' || true || '"]}}},
        {"tenancy": {"serviceAccounts": {"Team A": ["engine"]}}},
    ],
    ids=["no-namespaces", "bad-level", "not-a-list", "cel-injection", "bad-namespace"],
)
def test_the_chart_refuses_bad_values(values: dict[str, Any], tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    out = helm(require_helm(), "template", "s", str(CHART), "--values", str(path), check=False)
    assert out.returncode != 0, out.stdout[-500:]
    assert "podSecurity" in out.stderr or "tenancy.serviceAccounts" in out.stderr, out.stderr
