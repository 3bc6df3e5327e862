"""The product installed like a product: ``helm install`` on a fresh testbed runs the operator, the
daemon-API shim and the gateway as real pods on process nodes (``hack/testbed-values.yaml``).

Nothing runs outside the pods: each component gets its in-cluster config from its own
ServiceAccount token and has exactly the chart's RBAC. The flow, in order (one install for the
module):

1. ``helm install --wait`` (as docs/install.md tells users) -> every component pod Ready on a
   process node (install time and each pod's RSS are printed);
2. leader election across the two operator pods: one is active (the peering's highest
   priority); deleting it lets the other resume within seconds;
3. the example InferenceWorkload (placed on the process nodes) reaches Ready with the engine
   stand-in, and chat completions go through the gateway's Service: from a pod by the
   Service's DNS name and ClusterIP (the process runtime relays to a Ready endpoint), and from
   the host, which does not route ClusterIPs (no kube-proxy), through kube-apiserver's Service
   proxy (``/api/v1/namespaces/.../services/<name>:http/proxy/...``), which picks a Ready
   endpoint of the Service;
4. ``kubectl get --raw /apis/daemon.sparkrun.dev/...``: kube-apiserver routes the APIService to
   the shim pod (``--enable-aggregator-routing``, ADR 0003) and verifies it with the chart's CA;
   then the e2e main flow (``e2e/main_flow.py``: apply, Ready, chat with the ``openai`` client,
   the daemon API lists it, delete, unrouted) against the install;
5. what the chart's RBAC must not allow (read other namespaces' Secrets, bind cluster roles),
   asked of the real authorizer, and no Forbidden in any component's log;
6. ``helm upgrade`` with a changed values file replaces every component pod while the
   workload stays Ready on the same engine pod and chats keep succeeding, and a daemon job in
   flight across it (a ``workloads.run`` submitted through the APIService, waiting for a cluster
   that has no nodes yet) is handed from each stopping operator pod to the next active one and
   succeeds once its cluster gets a node;
7. ``helm uninstall`` leaves what docs/install.md says stays: the CRDs and the sparkrun.dev
   objects (with what they own), the operator's ClusterKopfPeering, the namespace.

Also ``helm test`` right after, as a user's ``helm install --wait && helm test``: its pods (on
process nodes too) ask each component through its Service's DNS name, which the process runtime
resolves and relays to a Ready endpoint (process_services.py); a Service whose endpoints are not
published yet refuses the connection, and the hook retries (templates/tests/answers.yaml).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.helm_pods import (
    CHART,
    COMPONENTS,
    NAMESPACE,
    RELEASE,
    REPO,
    TESTBED_VALUES,
    Cluster,
    Key,
    active,
    deployment_rolled,
    inventory,
    node_runtime,
    owned_closure,
    peers,
    pod_rss_kib,
    ready,
    start_cluster,
    wait_for,
)
from e2e.main_flow import apply_ready_chat_list_delete
from e2e.target import Target, admin_token

pytestmark = pytest.mark.testbed
REPLICAS = {"operator": 2, "shim": 1, "gateway": 1}
GATEWAY = f"/api/v1/namespaces/{NAMESPACE}/services/{RELEASE}-gateway:http/proxy"
DAEMON = "/apis/daemon.sparkrun.dev/v1alpha1"
IW = "sparkrun.dev/v1alpha1"
# A 403 in an access log line (`"GET ..." 403`) or a client error (`status=403`, `(403)`).
TERMINAL = ("succeeded", "failed", "cancelled", "lost")
DENIED = re.compile(r'" 403 |status=403|\(403\)')
TOLERATE = {
    "key": "sparkrun.dev/testbed-runtime",
    "operator": "Equal",
    "value": "process",
    "effect": "NoSchedule",
}


# An in-cluster client: one chat completion at the URL in argv[1], the answer printed.
CHAT = """
import json, sys, urllib.request
body = {"model": sys.argv[2], "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
request = urllib.request.Request(sys.argv[1], json.dumps(body).encode(), {"Content-Type": "application/json"})
with urllib.request.urlopen(request, timeout=30) as answer:
    print(json.dumps(json.load(answer)))
"""


@dataclass
class Install:
    before: dict[Key, dict[str, Any]]
    seconds: float


@dataclass
class Workload:
    name: str
    served: str
    engine_pod: str
    engine_uid: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    made = start_cluster(tmp_path_factory.mktemp("helm-pods") / "testbed")
    try:
        yield made
    finally:
        made.kube.close()
        made.testbed.stop()
        assert not made.testbed.running()


@pytest.fixture(scope="module")
def install(cluster: Cluster) -> Install:
    before = inventory(cluster)
    started = time.monotonic()
    cluster.helm(
        "install",
        RELEASE,
        str(CHART),
        "-n",
        NAMESPACE,
        "--create-namespace",
        "--values",
        str(TESTBED_VALUES),
        "--wait",
        "--timeout",
        "120s",
    )
    # NB: --wait already waited for the Deployments; this also checks no other pod is left
    wait_for(
        lambda: all(deployment_rolled(cluster, c, n) for c, n in REPLICAS.items()),
        timeout=120,
        what="every component pod Ready",
    )
    seconds = time.monotonic() - started
    print(f"\nhelm install --wait -> every component pod Ready: {seconds:.1f} s")
    return Install(before=before, seconds=seconds)


def _chat(cluster: Cluster, model: str) -> dict[str, Any]:
    body = {"model": model, "messages": [{"role": "user", "content": "hello from helm"}], "max_tokens": 8}
    answer: dict[str, Any] = cluster.kube.request("POST", f"{GATEWAY}/v1/chat/completions", json=body).json()
    return answer


def _operator_pods(cluster: Cluster) -> set[str]:
    return {p["metadata"]["name"] for p in cluster.pods("operator")}


def _finished(cluster: Cluster, pod: str) -> dict[str, Any] | None:
    found = cluster.kube.get("v1", "Pod", pod, namespace=NAMESPACE)
    return found if found and found["status"].get("phase") in ("Succeeded", "Failed") else None


def gone(cluster: Cluster, pod: str) -> bool:
    return cluster.kube.get("v1", "Pod", pod, namespace=NAMESPACE) is None


def component_pods(cluster: Cluster) -> list[str]:
    """The release's pods but its ``helm test`` pods (a failed one stays: docs/install.md)."""
    items = cluster.kube.list_items(
        "v1",
        "Pod",
        namespace=NAMESPACE,
        label_selector=f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component!=test",
    )
    return [p["metadata"]["name"] for p in items]


def failed_test_pods(objects: dict[Key, dict[str, Any]]) -> set[Key]:
    """``helm test`` pods that failed: Helm keeps them for their logs, uninstall included."""
    return {
        key
        for key, obj in objects.items()
        if key[0] == "Pod.v1"
        and (obj["metadata"].get("annotations") or {}).get("helm.sh/hook") == "test"
        and (obj.get("status") or {}).get("phase") == "Failed"
    }


def _parent(ip: dict[str, Any]) -> tuple[str, str]:
    ref = ip["spec"]["parentRef"]
    return (ref.get("namespace", ""), ref["name"]) if ref.get("resource") == "services" else ("", "")


def _same_engine_ready(cluster: Cluster, workload: Workload) -> bool:
    engine = cluster.kube.get("v1", "Pod", workload.engine_pod, namespace=NAMESPACE)
    return engine is not None and engine["metadata"]["uid"] == workload.engine_uid and ready(engine)


@pytest.fixture(scope="module")
def workload(cluster: Cluster, install: Install) -> Workload:
    """The example workload, on a process node, Ready and known to the gateway."""
    manifest = yaml.safe_load((REPO / "examples" / "inferenceworkload.yaml").read_text())
    manifest["spec"]["scheduling"] = {"nodeSelector": {TOLERATE["key"]: "process"}, "tolerations": [TOLERATE]}
    name, served = manifest["metadata"]["name"], manifest["spec"]["model"]["servedName"]
    cluster.kube.apply(manifest, namespace=NAMESPACE)

    def is_ready() -> dict[str, Any] | None:
        obj = cluster.kube.get(IW, "InferenceWorkload", name, namespace=NAMESPACE) or {}
        conditions = (obj.get("status") or {}).get("conditions") or []
        return obj if any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) else None

    wait_for(is_ready, timeout=120, what=f"InferenceWorkload {name} Ready")
    (engine,) = cluster.kube.list_items(
        "v1", "Pod", namespace=NAMESPACE, label_selector=f"sparkrun.dev/workload={name}"
    )
    return Workload(name, served, engine["metadata"]["name"], engine["metadata"]["uid"])


def test_every_component_is_a_ready_pod_on_a_process_node(cluster: Cluster, install: Install) -> None:
    rows = []
    for component in COMPONENTS:
        for pod in cluster.pods(component):
            assert ready(pod)
            assert node_runtime(cluster, pod) == "process", pod["spec"]["nodeName"]
            assert pod["spec"]["serviceAccountName"] == f"{RELEASE}-{component}"
            rss = pod_rss_kib(pod["metadata"]["name"])
            assert rss > 10_000, f"no process of {pod['metadata']['name']} found"
            rows.append(f"  {component:<9} {pod['metadata']['name']:<40} {rss / 1024:6.1f} MiB")
    print("RSS of the component pods (VmRSS of their processes):\n" + "\n".join(rows))
    assert install.seconds < 120


def test_helm_test_hooks_reach_every_component_through_its_service(
    cluster: Cluster, install: Install
) -> None:
    started = time.monotonic()
    # NB: right after the install, as a user would. A failed hook pod stays: its log says why
    # (not `helm test --logs`: a passed pod is deleted before helm reads its log, and it fails).
    done = cluster.helm("test", RELEASE, "-n", NAMESPACE, "--timeout", "120s", check=False)
    if done.returncode != 0:
        hooks = [f"{RELEASE}-test-{c}" for c in COMPONENTS]
        logs = "".join(f"--- {pod} ---\n{cluster.logs(pod)}" for pod in hooks if not gone(cluster, pod))
        raise AssertionError(done.stdout + done.stderr + logs)
    for component in COMPONENTS:
        assert f"{RELEASE}-test-{component}" in done.stdout
    assert done.stdout.count("Phase:          Succeeded") == len(COMPONENTS), done.stdout
    print(f"\nhelm test: {time.monotonic() - started:.1f} s")


def working(log: str) -> bool:
    """kopf's peering log: a replica works after more "Resuming" than "Pausing" lines (two
    replicas started at once may both work until each sees the other, ADR 0026)."""
    return log.count("Resuming operations") > log.count("Pausing operations")


def test_one_operator_is_active_and_the_other_takes_over(cluster: Cluster, install: Install) -> None:
    names = {p["metadata"]["name"] for p in cluster.pods("operator")}
    wait_for(lambda: set(peers(cluster)) == names, timeout=30, what=f"both replicas {names} in the peering")
    leader = active(cluster)
    assert leader is not None
    (standby,) = names - {leader}
    wait_for(lambda: working(cluster.logs(leader)), timeout=30, what=f"{leader} active")
    wait_for(lambda: not working(cluster.logs(standby)), timeout=30, what=f"{standby} paused")

    killed = time.monotonic()
    cluster.kube.delete("v1", "Pod", leader, namespace=NAMESPACE)
    wait_for(lambda: working(cluster.logs(standby)), timeout=60, what=f"{standby} taking over")
    print(f"\noperator takeover after the leader pod's deletion: {time.monotonic() - killed:.1f} s")
    assert leader not in peers(cluster), "a replica that stops withdraws from the peering"
    wait_for(lambda: gone(cluster, leader), timeout=60, what=f"{leader} to exit")
    print(f"the old leader's pod gone (its process exited) after {time.monotonic() - killed:.1f} s")
    wait_for(lambda: deployment_rolled(cluster, "operator", 2), timeout=90, what="a replacement operator pod")


def test_workload_ready_and_a_chat_through_the_gateway_service(cluster: Cluster, workload: Workload) -> None:
    engine = cluster.kube.get("v1", "Pod", workload.engine_pod, namespace=NAMESPACE)
    assert engine is not None
    assert node_runtime(cluster, engine) == "process"
    models = wait_for(
        lambda: workload.served in {m["id"] for m in cluster.kube.get_json(f"{GATEWAY}/v1/models")["data"]},
        timeout=30,
        what=f"the gateway listing {workload.served}",
    )
    assert models
    answer = _chat(cluster, workload.served)
    assert answer["model"] == workload.served
    assert answer["choices"][0]["message"]["content"]
    assert answer["usage"]["completion_tokens"] > 0
    # And from a pod, as an in-cluster client would: the Service's name and ClusterIP.
    url = f"http://{RELEASE}-gateway.{NAMESPACE}.svc/v1/chat/completions"
    client = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "chat-client"},
        "spec": {
            "restartPolicy": "Never",
            "nodeSelector": {TOLERATE["key"]: "process"},
            "tolerations": [TOLERATE],
            "containers": [
                {
                    "name": "chat",
                    "image": "python:3.12",
                    "command": ["python3", "-c", CHAT, url, workload.served],
                }
            ],
        },
    }
    cluster.kube.create(client, namespace=NAMESPACE)
    done = wait_for(lambda: _finished(cluster, "chat-client"), timeout=60, what="the in-cluster chat client")
    log = cluster.logs("chat-client")
    assert done["status"]["phase"] == "Succeeded", log
    assert json.loads(log)["model"] == workload.served
    cluster.kube.delete("v1", "Pod", "chat-client", namespace=NAMESPACE)
    wait_for(lambda: gone(cluster, "chat-client"), timeout=30, what="the chat client pod gone")


def test_the_daemon_api_through_the_apiservice_and_the_shim_pod(
    cluster: Cluster, workload: Workload, tmp_path: Path
) -> None:
    service = (
        cluster.kube.get("apiregistration.k8s.io/v1", "APIService", "v1alpha1.daemon.sparkrun.dev") or {}
    )
    assert service["spec"]["service"] == {"namespace": NAMESPACE, "name": f"{RELEASE}-shim", "port": 443}
    info = json.loads(cluster.kubectl("get", "--raw", f"{DAEMON}/v1/info").stdout)
    (shim,) = cluster.pods("shim")
    assert info["controller"]["controller_id"].startswith(shim["metadata"]["name"])
    assert info["runtime"]["identity"] == "front-proxy"
    assert info["runtime"]["kubernetes"] == {"server": "https://10.96.0.1:443", "namespace": NAMESPACE}
    (tmp_path / "args.json").write_text("{}")
    listed = cluster.kubectl(
        "create", "--raw", f"{DAEMON}/v1/ops/workloads.list", "-f", str(tmp_path / "args.json")
    )
    assert [w["metadata"]["name"] for w in json.loads(listed.stdout)] == [workload.name]


def test_the_main_flow_against_the_install(cluster: Cluster, install: Install) -> None:
    """e2e/main_flow.py, as against the demo's processes: here the gateway is reached through
    kube-apiserver's Service proxy and the daemon API through its APIService, both with the
    admin's token, and the flow's workload is placed on the tainted process nodes."""
    server = cluster.testbed.server
    token = admin_token(cluster.testbed.kubeconfig)
    ca = str(cluster.testbed.ca_file())
    target = Target(
        kubeconfig=cluster.testbed.kubeconfig,
        gateway_url=f"{server}{GATEWAY}",
        gateway_token=token,
        gateway_ca=ca,
        daemon_url=f"{server}{DAEMON}",
        daemon_ca=ca,
        token=token,
        namespace=NAMESPACE,
        scheduling={"nodeSelector": {TOLERATE["key"]: "process"}, "tolerations": [TOLERATE]},
    )
    apply_ready_chat_list_delete(target)


def test_the_charts_rbac_refuses_what_the_components_must_not_do(cluster: Cluster, install: Install) -> None:
    for component in COMPONENTS:
        assert not cluster.can(component, "get", "secrets", "-n", "kube-system"), component
        assert not cluster.can(component, "list", "secrets", "-n", "default"), component
        assert not cluster.can(component, "list", "secrets", "--all-namespaces"), component
        assert not cluster.can(component, "create", "clusterrolebindings.rbac.authorization.k8s.io"), (
            component
        )
        if component != "operator":  # NB: the operator binds its endpoint pickers' accounts (below)
            rolebindings = "rolebindings.rbac.authorization.k8s.io"
            assert not cluster.can(component, "create", rolebindings, "-n", "default"), component
        assert not cluster.can(component, "bind", "clusterroles.rbac.authorization.k8s.io"), component
        assert not cluster.can(component, "escalate", "clusterroles.rbac.authorization.k8s.io"), component
        assert not cluster.can(component, "impersonate", "users"), component
    # The operator creates a RoleBinding per managed endpoint picker (ADR 0050): `bind` only on the
    # pickers' ClusterRole, and the apiserver's escalation check refuses any role it does not hold.
    as_operator = f"--as=system:serviceaccount:{NAMESPACE}:{RELEASE}-operator"
    binding = ("create", "rolebinding", "e2e-bind-check", "-n", "default", "--serviceaccount=default:default")
    dry = ("--dry-run=server", as_operator)
    picker_role = f"--clusterrole={RELEASE}-endpoint-picker"
    assert cluster.kubectl(*binding, picker_role, *dry, check=False).returncode == 0
    for role in ("admin", "edit", "cluster-admin"):
        refused = cluster.kubectl(*binding, f"--clusterrole={role}", *dry, check=False)
        assert refused.returncode != 0, role
        assert "forbidden" in refused.stderr.lower(), refused.stderr
    # What they do need, they have: nothing any of them did so far was refused.
    for component in COMPONENTS:
        for pod in cluster.pods(component):
            log = cluster.logs(pod["metadata"]["name"])
            assert "Forbidden" not in log, f"{pod['metadata']['name']}:\n{log[-3000:]}"
            assert not DENIED.search(log), f"{pod['metadata']['name']}:\n{log[-3000:]}"


def _daemon_job(cluster: Cluster, job_id: str) -> dict[str, Any]:
    """``GET /v1/jobs/{id}`` through the APIService (the daemon API's view of the job)."""
    job: dict[str, Any] = cluster.kube.request("GET", f"{DAEMON}/v1/jobs/{job_id}").json()
    return job


def _job_status(cluster: Cluster, job_id: str) -> dict[str, Any]:
    obj = cluster.kube.get(IW, "DaemonJob", job_id, namespace=NAMESPACE) or {}
    status: dict[str, Any] = obj.get("status") or {}
    return status


def _in_flight_run(cluster: Cluster) -> tuple[str, str]:
    """A ``workloads.run`` that cannot finish yet: its InferenceCluster names a node that does not
    exist. Returns the job id and the cluster's name."""
    recipe = yaml.safe_load((REPO / "examples" / "recipe.yaml").read_text())
    cluster.kube.apply(recipe, namespace=NAMESPACE)
    cluster.kube.apply(
        {
            "apiVersion": IW,
            "kind": "InferenceCluster",
            "metadata": {"name": "later"},
            "spec": {"nodes": {"names": ["proc-9"]}, "tolerations": [TOLERATE]},
        }
    )
    arguments = {"recipe": "qwen3-8b-vllm", "cluster": "later", "workload_id_override": "in-flight"}
    answer = cluster.kube.request("POST", f"{DAEMON}/v1/ops/workloads.run", json=arguments)
    assert answer.status_code == 202, answer.text
    job_id = str(answer.json()["job_id"])
    wait_for(
        lambda: _daemon_job(cluster, job_id)["state"] == "running",
        timeout=60,
        what="the in-flight job running",
    )
    return job_id, "later"


def test_upgrade_rolls_every_component_and_keeps_the_workload(
    cluster: Cluster, workload: Workload, tmp_path: Path
) -> None:
    job_id, later = _in_flight_run(cluster)
    first = _job_status(cluster, job_id)
    assert first["attempts"] == 1, first
    old = {c: {p["metadata"]["uid"] for p in cluster.pods(c)} for c in COMPONENTS}
    changed = tmp_path / "changed.yaml"
    changed.write_text(
        yaml.safe_dump(
            {
                "operator": {"extraArgs": ["--drift-seconds=120"]},
                "shim": {"podAnnotations": {"sparkrun.dev/upgraded": "yes"}},
                "gateway": {"extraArgs": ["--read-timeout=600"]},
            }
        )
    )
    values = ["--values", str(TESTBED_VALUES), "--values", str(changed)]
    started = time.monotonic()
    cluster.helm("upgrade", RELEASE, str(CHART), "-n", NAMESPACE, *values)
    chats = failures = 0
    while not all(deployment_rolled(cluster, c, REPLICAS[c], old[c]) for c in COMPONENTS):
        assert time.monotonic() - started < 150, "the upgrade did not roll every component"
        obj = cluster.kube.get(IW, "InferenceWorkload", workload.name, namespace=NAMESPACE) or {}
        ready_now = [c for c in obj["status"]["conditions"] if c["type"] == "Ready"]
        assert ready_now[0]["status"] == "True", ready_now
        try:
            chats += 1
            assert _chat(cluster, workload.served)["choices"]
        except Exception:  # counted and asserted below
            failures += 1
        time.sleep(0.5)
    rolled = time.monotonic() - started
    print(f"\nhelm upgrade -> every component rolled: {rolled:.1f} s, {chats} chats meanwhile")
    assert failures == 0, f"{failures} of {chats} chats through the gateway failed during the upgrade"
    assert _same_engine_ready(cluster, workload)
    deployments = {
        c: cluster.kube.get("apps/v1", "Deployment", f"{RELEASE}-{c}", namespace=NAMESPACE) or {}
        for c in COMPONENTS
    }
    assert (
        "--drift-seconds=120" in deployments["operator"]["spec"]["template"]["spec"]["containers"][0]["args"]
    )
    assert "--read-timeout=600" in deployments["gateway"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert _chat(cluster, workload.served)["choices"]

    # The in-flight job: still running, now on a new operator pod, not lost.
    status = wait_for(
        lambda: (
            (s := _job_status(cluster, job_id))["executor"].split("/")[0] in _operator_pods(cluster) and s
        ),
        timeout=60,
        what="the in-flight job taken over by a new operator pod",
    )
    assert status["state"] == "running", status
    assert 2 <= status["attempts"] <= 3, status  # one hand-over per stopped active replica
    assert f"the executor {first['executor']} stopped" in json.dumps(status["events"])
    cluster.kube.request(
        "PATCH",
        f"/apis/{IW}/inferenceclusters/{later}",  # cluster-scoped
        json={"spec": {"nodes": {"names": ["proc-1"]}}},
        headers={"Content-Type": "application/merge-patch+json"},
    )
    done = wait_for(
        lambda: (j := _daemon_job(cluster, job_id))["state"] in TERMINAL and j,
        timeout=120,
        what="the job finished",
    )
    hand_over = f"{first['executor']} -> {status['executor']}"
    print(f"in-flight job: {done['state']} after {status['attempts']} attempts ({hand_over})")
    assert done["state"] == "succeeded", done


def test_uninstall_leaves_only_what_the_docs_say_stays(
    cluster: Cluster, install: Install, workload: Workload
) -> None:
    started = time.monotonic()
    cluster.helm("uninstall", RELEASE, "-n", NAMESPACE, "--wait", "--timeout", "120s")
    # NB: --wait covers the release's own objects; their ReplicaSets' pods go in the background.
    left_pods: list[str] = []

    def components_gone() -> bool:
        # The executor's Lease is owned by its Pod: the garbage collector deletes it after the Pod
        # (the graceful release may be refused: the Role can go first while the Pod terminates).
        left_pods[:] = component_pods(cluster) + [
            f"Lease/{lease['metadata']['name']}"
            for lease in cluster.kube.list_items(
                "coordination.k8s.io/v1", "Lease", namespace=NAMESPACE, label_selector="sparkrun.dev/executor"
            )
        ]
        return not left_pods

    try:
        wait_for(components_gone, timeout=60, what="the component pods and their executor Leases gone")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; still there: {left_pods}") from None
    print(f"\nhelm uninstall -> every component pod gone: {time.monotonic() - started:.1f} s")
    after = inventory(cluster)
    new = {key for key in after if key not in install.before}
    crds = {k for k in new if k[0].startswith("CustomResourceDefinition.")}
    plurals = (
        "inferenceworkloads",
        "inferenceclusters",
        "recipes",
        "modelcaches",
        "inferencebenchmarks",
        "daemonjobs",
        "reciperegistries",
    )
    expected = {f"{plural}.sparkrun.dev" for plural in plurals}
    assert {k[2] for k in crds} == expected | {"clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev"}
    kept_objects = {k for k in new if k[0].endswith(".sparkrun.dev/v1alpha1")}
    stays = crds | owned_closure(after, kept_objects)
    # The CRDs' groups are served by kube-apiserver itself (local APIServices, no service).
    groups = {after[k]["spec"]["group"] for k in crds}
    stays |= {k for k in new if k[0].startswith("APIService.") and after[k]["spec"]["group"] in groups}
    assert all(after[k]["spec"].get("service") is None for k in stays if k[0].startswith("APIService."))
    # The ClusterIP allocations of the kept Services.
    services = {(k[1], k[2]) for k in stays if k[0] == "Service.v1"}
    stays |= {k for k in new if k[0].startswith("IPAddress.") and _parent(after[k]) in services}
    stays |= {
        ("Namespace.v1", "", NAMESPACE),
        ("ServiceAccount.v1", NAMESPACE, "default"),
        ("ConfigMap.v1", NAMESPACE, "kube-root-ca.crt"),
        ("ClusterKopfPeering.kopf.dev/v1", "", "sparkrun-operator"),
    }
    # A failed `helm test` pod (only if that test failed above, which reported it) stays too.
    stays |= failed_test_pods(after)
    left = sorted(new - stays)
    assert left == [], f"helm uninstall left objects the docs do not name: {left}"
    assert ("InferenceWorkload.sparkrun.dev/v1alpha1", NAMESPACE, workload.name) in new
    assert _same_engine_ready(cluster, workload)
