"""``sparkrun-k8s demo``: the main flow, end to end, on a local testbed.

1. checks every example offline (schema and CEL, as the apiserver would);
2. starts the testbed ``default`` (the one ``sparkrun-k8s testbed down`` stops): a real control
   plane, two KWOK GPU nodes and seven *process* nodes whose pods run as local processes with the
   vLLM engine stand-in;
3. installs the chart (``helm install``, :mod:`.demo_chart`): the operator (two replicas, one
   active), the daemon API shim and the inference gateway run as pods on the process nodes,
   reached through kube-apiserver (the gateway's Service proxy, the daemon API's APIService).
   Where process-node pods get no network namespaces (not root, no iproute2) the three run as
   local processes the testbed owns instead, and the demo says so;
4. labels the process nodes into the example InferenceCluster and applies the example
   InferenceCluster, Recipe and the three example InferenceWorkloads (one GPU; a 4-node
   TP 8 x PP 4 replica; two replicas from the recipe);
5. starts the local Hugging Face-compatible Hub, caches a small model from it in a ModelCache
   (its phases as they pass, until Ready) and applies a fourth workload that starts from the
   cache (``spec.model.cacheRef``, offline): see :mod:`.demo_cache`;
6. waits until every workload is Ready, sends chat completions through the gateway with the
   ``openai`` client (one to the cached model), and calls the daemon API with the project's
   client;
7. prints status tables and what to try next.

``--down`` stops everything at the end; by default it keeps running, and
``<run dir>/endpoints.json`` says how to reach it (kubeconfig, how the components were started,
gateway and daemon API URLs, the CA that verifies them and whether the kubeconfig's token
authenticates there, the namespace the daemon API serves, the local Hub's URL and the cache
step's names): the e2e suite (``e2e/``) reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import ssl
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from sparkrun_operator.api.admission import validate
from sparkrun_operator.api.meta import API_VERSION
from sparkrun_operator.cli import demo_cache, demo_chart
from sparkrun_operator.render import keys
from sparkrun_testbed import binaries, daemons, plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import NodePool, Topology

#: Examples applied to the testbed, in order (the ModelCache, benchmark and job examples need
#: huggingface.co, a served model and the daemon API respectively, so the demo leaves them out;
#: its cache step makes a ModelCache of its own against the local Hub: :mod:`.demo_cache`).
APPLY = (
    "inferencecluster.yaml",
    "recipe.yaml",
    "inferenceworkload.yaml",
    "inferenceworkload-from-recipe.yaml",
    "inferenceworkload-multinode.yaml",
)
NAMESPACE = "default"
POOL_LABEL = (keys.LABEL_EXAMPLE_POOL, "inference")  # what examples/inferencecluster.yaml selects
PROCESS_NODES = 7  # 4 whole nodes for the TP 8 x PP 4 replica, whatever the scheduler did first
GPUS_PER_NODE = 8
ENDPOINTS_FILE = "endpoints.json"


EPILOG = """\
examples:
  sparkrun-k8s demo                 # everything; it stays up (endpoints.json says how to reach it)
  sparkrun-k8s demo --down          # and stop it all at the end
  sparkrun-k8s testbed down         # stop a demo left running

exit codes:
  0  every step passed (the models answered through the gateway)
  1  a step failed (it says which, and the testbed is left up for a look)
  2  usage, or the testbed is not installed
"""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="run the main flow end to end on a local testbed",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--examples", type=Path, default=None, help="examples directory (default: the checkout's)"
    )
    parser.add_argument("--run-root", type=Path, default=None, help="where the testbed's run directory goes")
    parser.add_argument("--name", default="default", help="testbed name (default: default)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for Ready workloads")
    parser.add_argument("--down", action="store_true", help="stop everything at the end")
    parser.set_defaults(func=run)


@dataclass
class Demo:
    """What the demo started, for the summary and for stopping it."""

    console: Console
    examples: Path
    testbed: plane.Testbed | None = None
    gateway_url: str = ""
    shim_url: str = ""
    #: ``helm`` (the chart's pods, reached through kube-apiserver) or ``processes``.
    install: str = ""
    #: The bearer token and CA for the gateway URL (the apiserver's, when installed by helm).
    gateway_token: str | None = None
    gateway_ca: str | None = None
    cache: demo_cache.CacheResult = field(default_factory=demo_cache.CacheResult)
    timings: list[tuple[str, float]] = field(default_factory=list)

    def step(self, title: str, action: Callable[[], Any]) -> Any:
        self.console.rule(f"[bold]{title}")
        start = time.monotonic()
        result = action()
        elapsed = time.monotonic() - start
        self.timings.append((title, elapsed))
        self.console.print(f"[dim]{title}: {elapsed:.1f} s[/dim]")
        return result


def run(args: argparse.Namespace) -> int:
    console = Console()
    repo = binaries.repo_root()
    examples = args.examples or (repo / "examples" if repo is not None else None)
    if examples is None or not examples.is_dir():
        console.print("[red]no examples directory: run from a checkout or pass --examples[/red]")
        return 2
    demo = Demo(console=console, examples=examples)
    ok = False
    try:
        if not demo.step("1. Check the examples offline", lambda: check_examples(demo)):
            return 1
        demo.step("2. Start the testbed", lambda: start_testbed(demo, args))
        demo.step("3. Install the operator, the daemon API shim and the gateway", lambda: install(demo))
        demo.step("4. Apply the examples", lambda: apply_examples(demo))
        demo.step("5. Cache a model from the local Hub (ModelCache)", lambda: cache_model(demo))
        demo.step("6. Wait until every workload is Ready", lambda: wait_ready(demo, args.timeout))
        demo.step("7. Chat through the gateway (openai client)", lambda: chat(demo))
        demo.step("8. Call the daemon API (sparkrun_operator.client)", lambda: daemon_call(demo))
        summary(demo)
        ok = True
    except (
        DemoError,
        demo_cache.CacheStepError,
        demo_chart.ChartStepError,
        plane.TestbedError,
        binaries.BinariesMissing,
    ) as error:
        console.print(f"[red]demo failed: {error}[/red]")
        if demo.testbed is not None:
            sys.stderr.write(demo.testbed.log_tails(lines=15) + "\n")
    finally:
        if demo.testbed is not None and args.down:
            console.print("stopping the testbed and everything the demo started ...")
            demo.testbed.stop()
        elif demo.testbed is not None and not ok:
            console.print(
                f"the testbed is still running for inspection: export KUBECONFIG={demo.testbed.kubeconfig}; "
                "stop it with: sparkrun-k8s testbed down"
            )
    return 0 if ok else 1


class DemoError(RuntimeError):
    """A step failed; the message says which and why."""


def check_examples(demo: Demo) -> bool:
    table = Table("example", "kind", "offline admission")
    good = True
    for path in sorted(demo.examples.glob("*.yaml")):
        doc = yaml.safe_load(path.read_text())
        errors = validate(doc)
        good = good and not errors
        table.add_row(
            path.name,
            doc.get("kind", "?"),
            "[green]valid[/green]" if not errors else "\n".join(map(str, errors)),
        )
    demo.console.print(table)
    return good


def start_testbed(demo: Demo, args: argparse.Namespace) -> None:
    bins = binaries.locate().check()
    root = args.run_root or plane.default_run_root()
    run_dir = root / args.name
    previous = plane.Testbed.attach(run_dir)
    if previous is not None and previous.running():
        demo.console.print(f"stopping the testbed already running in {run_dir}")
        previous.stop()
    topology = Topology(
        pools=(
            NodePool(count=2, gpus=GPUS_PER_NODE),
            NodePool(prefix="proc", count=PROCESS_NODES, gpus=GPUS_PER_NODE, process=True),
        )
    )
    # NB: no CRDs yet: the chart brings them (its templated CRDs cannot adopt ones it did not
    # make); the processes fallback installs them from crds/ (install()).
    options = plane.Options(topology=topology, crd_dirs=())
    demo.testbed = plane.Testbed.start(run_dir, bins, options, name=args.name)
    demo.console.print(
        f"testbed [bold]{args.name}[/bold] ready in {demo.testbed.state.ready_seconds:.1f} s: "
        f"{demo.testbed.server}, nodes {', '.join(topology.node_names())}"
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _wait_http(
    url: str, *, what: str, daemon: daemons.Daemon, timeout: float = 60.0, verify: Any = True
) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if not daemon.running():
            raise DemoError(f"{what} exited:\n{daemons.tail(daemon.log, lines=20)}")
        try:
            response = httpx.get(url, timeout=2.0, verify=verify)
            if response.status_code < 500:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as error:
            last = repr(error)
        time.sleep(0.3)
    raise DemoError(f"{what} did not answer {url} within {timeout:.0f} s ({last})")


def install(demo: Demo) -> None:
    """The chart's pods where process-node pods have namespaces; else local processes."""
    testbed = demo.testbed
    assert testbed is not None
    mode = demo_cache.network_mode(testbed)
    repo = binaries.repo_root()
    if mode != "netns" or repo is None:
        why = f"process-node pods run with {mode} addresses here" if repo else "no checkout (no chart)"
        demo.console.print(f"[yellow]{why}: the components run as local processes instead of pods[/yellow]")
        for directory in plane.default_crd_dirs():
            names = testbed.install_crds(directory)
            demo.console.print(f"installed {len(names)} CRDs from {directory}")
        start_components(demo)
        return
    installed = demo_chart.install(
        testbed, demo.console, repo=repo, namespace=NAMESPACE, cache_mount_path=demo_cache.MOUNT_PATH
    )
    demo.install = "helm"
    demo.gateway_url, demo.shim_url = installed.gateway_url, installed.daemon_url
    demo.gateway_token, demo.gateway_ca = installed.token, str(installed.ca_file)
    demo.console.print(f"gateway {demo.gateway_url}\ndaemon API {demo.shim_url}")
    write_endpoints(demo)


def start_components(demo: Demo) -> None:
    testbed = demo.testbed
    assert testbed is not None
    cli = [sys.executable, "-m", "sparkrun_operator.cli.main"]
    env = {**os.environ, "KUBECONFIG": str(testbed.kubeconfig), "PYTHONUNBUFFERED": "1"}
    logs = testbed.run_dir / "logs"
    started: list[daemons.Daemon] = []

    def spawn(name: str, argv: list[str]) -> daemons.Daemon:
        daemon = daemons.start(name, argv, log=logs / f"{name}.log", env=env)
        started.append(daemon)
        testbed.state.daemons.append(daemon)
        testbed.state.save()  # NB: before waiting, so `testbed down` stops it whatever happens
        return daemon

    op_port = _free_port()
    operator = spawn(
        "sparkrun-operator",
        [*cli, "operator", "run", "--standalone", "--liveness", f"http://127.0.0.1:{op_port}/healthz",
         "--cache-mount-path", demo_cache.MOUNT_PATH],
    )  # fmt: skip
    _wait_http(f"http://127.0.0.1:{op_port}/healthz", what="the operator", daemon=operator)

    cert = testbed.issue_serving_cert("127.0.0.1", "localhost")
    tls_dir = testbed.run_dir / "shim-tls"
    tls_dir.mkdir(exist_ok=True)
    cert_file, key_file = tls_dir / "tls.crt", tls_dir / "tls.key"
    cert.write(cert_file, key_file)
    shim_port = _free_port()
    shim = spawn(
        "sparkrun-shim",
        [*cli, "shim", "serve", "--namespace", NAMESPACE, "--host", "127.0.0.1", "--port", str(shim_port),
         "--tls-cert", str(cert_file), "--tls-key", str(key_file)],
    )  # fmt: skip
    demo.shim_url = f"https://127.0.0.1:{shim_port}"
    _wait_http(f"{demo.shim_url}/v1/health", what="the shim", daemon=shim, verify=str(testbed.ca_file()))

    gw_port = _free_port()
    gateway = spawn(
        "sparkrun-gateway",
        [
            *cli,
            "gateway",
            "--kubernetes",
            "--host",
            "127.0.0.1",
            "--port",
            str(gw_port),
            "--log-level",
            "warning",
        ],
    )
    demo.gateway_url = f"http://127.0.0.1:{gw_port}"
    _wait_http(f"{demo.gateway_url}/v1/models", what="the gateway", daemon=gateway)
    demo.install = "processes"
    for daemon in started:
        demo.console.print(f"{daemon.name}: pid {daemon.pid}, log {daemon.log}")
    demo.console.print(f"shim {demo.shim_url}   gateway {demo.gateway_url}")
    write_endpoints(demo)


def write_endpoints(demo: Demo) -> Path:
    """``<run dir>/endpoints.json``: how to reach what the demo started (read by ``e2e/``)."""
    testbed = demo.testbed
    assert testbed is not None
    path = testbed.run_dir / ENDPOINTS_FILE
    doc = {
        "kubeconfig": str(testbed.kubeconfig),
        "install": demo.install,
        "gateway_url": demo.gateway_url,
        # the gateway behind kube-apiserver: the kubeconfig's token and this CA
        "gateway_ca": demo.gateway_ca,
        "gateway_token_from_kubeconfig": demo.gateway_token is not None,
        "daemon_url": demo.shim_url,
        "daemon_ca": str(testbed.ca_file()),
        "namespace": NAMESPACE,
        # the ModelCache step: the local Hub (empty when skipped), the cache and its workload
        "hub_url": demo.cache.hub_url,
        "model_cache": {
            "name": demo_cache.CACHE,
            "workload": demo_cache.WORKLOAD,
            "served_name": demo_cache.SERVED,
            "repo": demo_cache.REPO,
            "revision": demo_cache.REVISION,
            "mount_path": demo_cache.MOUNT_PATH,
            "skipped": demo.cache.skipped,
        },
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")
    return path


def _api(demo: Demo) -> KubeApi:
    assert demo.testbed is not None
    return demo.testbed.api()


def apply_examples(demo: Demo) -> None:
    assert demo.testbed is not None
    key, value = POOL_LABEL
    with _api(demo) as api:
        for node in demo.testbed.state.topology["pools"][1:]:
            for i in range(node["count"]):
                name = f"{node['prefix']}-{i}"
                api.request(
                    "PATCH",
                    f"/api/v1/nodes/{name}",
                    json={"metadata": {"labels": {key: value}}},
                    headers={"Content-Type": "application/merge-patch+json"},
                )
        demo.console.print(f"labelled the process nodes {key}={value}")
        for name in APPLY:
            doc = yaml.safe_load((demo.examples / name).read_text())
            api.apply(doc, namespace=NAMESPACE if doc["kind"] != "InferenceCluster" else None)
            demo.console.print(f"applied {name}: {doc['kind']}/{doc['metadata']['name']}")


def cache_model(demo: Demo) -> None:
    assert demo.testbed is not None
    demo.cache = demo_cache.run(demo.testbed, demo.console, NAMESPACE)
    write_endpoints(demo)


def _workloads(api: KubeApi) -> list[dict[str, Any]]:
    return api.list_items(API_VERSION, "InferenceWorkload", namespace=NAMESPACE)


def _ready(obj: dict[str, Any]) -> bool:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def wait_ready(demo: Demo, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last_report = ""
    with _api(demo) as api:
        while True:
            items = _workloads(api)
            report = ", ".join(
                f"{w['metadata']['name']}={(w.get('status') or {}).get('phase') or 'Pending'}" for w in items
            )
            if report != last_report:
                demo.console.print(report)
                last_report = report
            if items and all(_ready(w) for w in items):
                return
            if time.monotonic() > deadline:
                raise DemoError(f"workloads not Ready within {timeout:.0f} s: {report}")
            time.sleep(1.0)


def chat(demo: Demo) -> None:
    try:
        from openai import DefaultHttpxClient, OpenAI
    except ImportError as error:
        raise DemoError(
            "the openai package is missing: make demo installs it (pip install -e '.[dev]')"
        ) from error
    with OpenAI(
        base_url=f"{demo.gateway_url}/v1",
        api_key=demo.gateway_token or "demo",
        timeout=60.0,
        max_retries=0,
        http_client=DefaultHttpxClient(verify=_trust(demo.gateway_ca), timeout=60.0),
    ) as client:
        models = [m.id for m in client.models.list().data]
        demo.console.print(f"models through the gateway: {', '.join(sorted(models))}")
        reply = client.chat.completions.create(
            model="qwen3-0.6b",
            messages=[{"role": "user", "content": "Say hello to the platform team."}],
            max_tokens=16,
        )
        demo.console.print(f"[bold]qwen3-0.6b[/bold] answered: {reply.choices[0].message.content!r}")
        stream = client.chat.completions.create(
            model="llama-405b",
            messages=[{"role": "user", "content": "Stream a short answer."}],
            max_tokens=8,
            stream=True,
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
        demo.console.print(f"[bold]llama-405b[/bold] (4 nodes) streamed: {text!r}")
        if demo.cache.hub_url:
            reply = client.chat.completions.create(
                model=demo_cache.SERVED,
                messages=[{"role": "user", "content": "Where do your weights come from?"}],
                max_tokens=8,
            )
            content = reply.choices[0].message.content
            demo.console.print(
                f"[bold]{demo_cache.SERVED}[/bold] (from ModelCache {demo_cache.CACHE}) answered: {content!r}"
            )


def _trust(ca_file: str | None) -> ssl.SSLContext | bool:
    return ssl.create_default_context(cafile=ca_file) if ca_file else True


def daemon_call(demo: Demo) -> None:
    from sparkrun_operator.client import Client

    assert demo.testbed is not None
    token = demo_chart.admin_token(demo.testbed.kubeconfig)
    with Client(demo.shim_url, token=token, ca_cert=str(demo.testbed.ca_file())) as client:
        info = client.info()
        demo.console.print(f"daemon API info: {info}")
        result = client.call("workloads.list", {})
        workloads = result.get("workloads", result) if isinstance(result, dict) else result
        if not isinstance(workloads, list) or not workloads:
            raise DemoError(f"workloads.list returned no workloads: {result!r}")
        names = ", ".join(str(w.get("name") or w.get("workload_id") or w) for w in workloads)
        demo.console.print(f"workloads.list -> {len(workloads)} workloads: {names}")


def summary(demo: Demo) -> None:
    assert demo.testbed is not None
    with _api(demo) as api:
        items = _workloads(api)
        caches = demo_cache.summary_table(demo.cache, NAMESPACE, api)
    table = Table(
        "workload", "Ready", "phase", "replicas", "nodes", "workload id", title="InferenceWorkloads"
    )
    for w in items:
        status, spec = w.get("status") or {}, w.get("spec") or {}
        table.add_row(
            w["metadata"]["name"],
            "True" if _ready(w) else "False",
            status.get("phase") or "",
            f"{status.get('readyReplicas', 0)}/{spec.get('replicas', 1)}",
            str((spec.get("topology") or {}).get("nodes", 1)),
            status.get("workloadId") or "",
        )
    demo.console.print(table)
    demo.console.print(caches)
    components = Table("component", "running", "RSS MiB", "endpoint", title="Testbed")
    for comp in demo.testbed.status():
        components.add_row(comp.name, str(comp.running), f"{comp.rss_bytes / 2**20:.0f}", comp.endpoint)
    demo.console.print(components)
    if demo.install == "helm":
        with _api(demo) as api:
            demo.console.print(demo_chart.pod_table(api, NAMESPACE))
    kubeconfig = demo.testbed.kubeconfig
    if demo.install == "helm":
        reach = (
            "  TOKEN=$(kubectl config view --raw -o jsonpath='{.users[0].user.token}')\n"
            f'  curl --cacert {demo.gateway_ca} -H "Authorization: Bearer $TOKEN" \\\n'
            f"      {demo.gateway_url}/v1/models     # the gateway, through its Service\n"
            f"  kubectl get --raw {demo_chart.DAEMON_API}/v1/info  # the daemon API (APIService)\n"
            "  sparkrun-k8s daemon call workloads.list     # the daemon API, with the kubeconfig\n"
            f"  $(hack/testbed-bin.sh --print)/helm status {demo_chart.RELEASE} -n {NAMESPACE}\n"
            f"  kubectl get pods -l app.kubernetes.io/instance={demo_chart.RELEASE} -o wide\n"
        )
    else:
        reach = (
            f"  curl {demo.gateway_url}/v1/models\n"
            f"  curl {demo.gateway_url}/api/tags            # Ollama view\n"
            "  export SPARKRUN_DAEMON_TOKEN=$(kubectl config view --raw \\\n"
            "      -o jsonpath='{.users[0].user.token}')\n"
            f"  sparkrun-k8s daemon call workloads.list --url {demo.shim_url} \\\n"
            f"      --ca-cert {demo.testbed.ca_file()}\n"
        )
    demo.console.print(
        "\n[bold]Try next[/bold]\n"
        f"  export KUBECONFIG={kubeconfig}\n"
        "  sparkrun-k8s status -A                     # what runs, at a glance\n"
        "  sparkrun-k8s describe qwen3-0-6b           # its startup timeline, conditions, events\n"
        "  sparkrun-k8s logs qwen3-0-6b -f            # the engine's lines (Ctrl-C to stop)\n"
        "  sparkrun-k8s sleep qwen3-0-6b; sparkrun-k8s wake qwen3-0-6b   # it has sleep mode\n"
        "  sparkrun-k8s cache ls                      # the ModelCache: revision, size, progress\n"
        "  kubectl get sparkrun                       # every sparkrun.dev object\n"
        "  kubectl scale iw/qwen3-0-6b --replicas=2\n"
        f"{reach}"
        "  sparkrun-k8s testbed down                  # stops everything the demo started\n"
        'the CLI, step by step: docs/cli.md, "A day with the CLI"\n'
    )
    total = sum(t for _, t in demo.timings)
    demo.console.print(f"[green]demo complete in {total:.0f} s[/green]")
