"""``sparkrun-k8s demo``: the main flow, end to end, on a local testbed.

1. checks every example offline (schema and CEL, as the apiserver would);
2. starts the testbed ``default`` (the one ``sparkrun-k8s testbed down`` stops): a real control
   plane, two KWOK GPU nodes and seven *process* nodes whose pods run as local processes with the
   vLLM engine stand-in;
3. starts the operator, the daemon API shim (TLS) and the inference gateway next to it, as
   processes the testbed owns (``testbed down`` stops them too);
4. labels the process nodes into the example InferenceCluster and applies the example
   InferenceCluster, Recipe and the three example InferenceWorkloads (one GPU; a 4-node
   TP 8 x PP 4 replica; two replicas from the recipe);
5. waits until every workload is Ready, sends a chat completion through the gateway with the
   ``openai`` client, and calls the daemon API with the project's client;
6. prints a status table and what to try next.

``--down`` stops everything at the end; by default it keeps running, and
``<run dir>/endpoints.json`` says how to reach it (kubeconfig, gateway and daemon API URLs, the
CA of the daemon API's certificate, the namespace it serves): the e2e suite (``e2e/``) reads it.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
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
from sparkrun_testbed import binaries, daemons, plane
from sparkrun_testbed.kubeapi import KubeApi
from sparkrun_testbed.topology import NodePool, Topology

#: Examples applied to the testbed, in order (the ModelCache, benchmark and job examples need a
#: hub, a served model and the daemon API respectively, so the demo leaves them out).
APPLY = (
    "inferencecluster.yaml",
    "recipe.yaml",
    "inferenceworkload.yaml",
    "inferenceworkload-from-recipe.yaml",
    "inferenceworkload-multinode.yaml",
)
NAMESPACE = "default"
POOL_LABEL = ("sparkrun.dev/pool", "inference")  # what examples/inferencecluster.yaml selects
PROCESS_NODES = 7  # 4 whole nodes for the TP 8 x PP 4 replica, whatever the scheduler did first
GPUS_PER_NODE = 8
ENDPOINTS_FILE = "endpoints.json"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo", help="run the main flow end to end on a local testbed", description=__doc__
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
        demo.step(
            "3. Start the operator, the daemon API shim and the gateway", lambda: start_components(demo)
        )
        demo.step("4. Apply the examples", lambda: apply_examples(demo))
        demo.step("5. Wait until every workload is Ready", lambda: wait_ready(demo, args.timeout))
        demo.step("6. Chat through the gateway (openai client)", lambda: chat(demo))
        demo.step("7. Call the daemon API (sparkrun_operator.client)", lambda: daemon_call(demo))
        summary(demo)
        ok = True
    except (DemoError, plane.TestbedError, binaries.BinariesMissing) as error:
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
    options = plane.Options(topology=topology, crd_dirs=plane.default_crd_dirs())
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
        [*cli, "operator", "run", "--standalone", "--liveness", f"http://127.0.0.1:{op_port}/healthz"],
    )
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
        "gateway_url": demo.gateway_url,
        "daemon_url": demo.shim_url,
        "daemon_ca": str(testbed.ca_file()),
        "namespace": NAMESPACE,
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


def _workloads(api: KubeApi) -> list[dict[str, Any]]:
    return api.list_items("sparkrun.dev/v1alpha1", "InferenceWorkload", namespace=NAMESPACE)


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
        from openai import OpenAI
    except ImportError as error:
        raise DemoError(
            "the openai package is missing: make demo installs it (pip install -e '.[dev]')"
        ) from error
    client = OpenAI(base_url=f"{demo.gateway_url}/v1", api_key="demo", timeout=60.0, max_retries=0)
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


def _admin_token(kubeconfig: Path) -> str:
    doc = yaml.safe_load(kubeconfig.read_text())
    token = str(doc["users"][0]["user"].get("token") or "")
    if not token:
        raise DemoError("the testbed kubeconfig carries no bearer token")
    return token


def daemon_call(demo: Demo) -> None:
    from sparkrun_operator.client import Client

    assert demo.testbed is not None
    token = _admin_token(demo.testbed.kubeconfig)
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
    components = Table("component", "running", "RSS MiB", "endpoint", title="Testbed")
    for comp in demo.testbed.status():
        components.add_row(comp.name, str(comp.running), f"{comp.rss_bytes / 2**20:.0f}", comp.endpoint)
    demo.console.print(components)
    kubeconfig = demo.testbed.kubeconfig
    demo.console.print(
        "\n[bold]Try next[/bold]\n"
        f"  export KUBECONFIG={kubeconfig}\n"
        "  kubectl get sparkrun                       # every sparkrun.dev object\n"
        "  kubectl get iw -o wide; kubectl get jobsets,pods -o wide\n"
        "  kubectl scale iw/qwen3-0-6b --replicas=2\n"
        f"  curl {demo.gateway_url}/v1/models\n"
        f"  curl {demo.gateway_url}/api/tags            # Ollama view\n"
        f"  sparkrun-k8s shim call --url {demo.shim_url} --ca-cert {demo.testbed.ca_file()} \\\n"
        "      --token $(kubectl config view --raw -o jsonpath='{.users[0].user.token}') workloads.list\n"
        "  sparkrun-k8s testbed down                  # stops everything the demo started\n"
    )
    total = sum(t for _, t in demo.timings)
    demo.console.print(f"[green]demo complete in {total:.0f} s[/green]")
