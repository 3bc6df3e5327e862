"""Run the GPU telemetry agent on this node until interrupted.

The agent samples every GPU through NVML (utilisation, memory, temperature, power, ECC errors,
clocks, PCIe and NVLink throughput, the processes on it) and the host (CPU, memory, network),
and serves them over plain HTTP:

  GET /v1/sample   the latest sample as JSON (the daemon API's /v1/streams/monitor reads it)
  GET /metrics     Prometheus text, DCGM exporter's metric names and labels where they exist
  GET /healthz     200 while sampling runs

With a node name (--node, default $NODE_NAME) it also labels its node in NVIDIA GPU feature
discovery's convention (nvidia.com/gpu.product, gpu.memory, gpu.count, cuda.driver-version.full,
cuda.driver.major/minor/rev), unless GPU feature discovery runs there (nvidia.com/gfd.timestamp
on the node). That needs get and patch on nodes.

Each GPU's processes are reported by pid and GPU memory; their names (/proc/<pid>/comm) only
with --process-names: a sample goes to anyone who may reach the agent, and the names are
every tenant's on the node (the chart's gpuAgent.processNames, off by default).

The chart runs it as a DaemonSet (gpuAgent.enabled). Without NVML (no driver, or a container
without the NVIDIA runtime) it reports the GPUs unavailable and keeps running; it tries NVML
again every minute. docs/telemetry.md has the metrics and the labels.

examples:
  sparkrun-k8s agent                                   # in the DaemonSet: $NODE_NAME, port 9400
  sparkrun-k8s agent --node gpu-1 --port 9400 --interval 2
  sparkrun-k8s agent --no-labels --port 9401           # on a workstation: metrics only
  sparkrun-k8s agent --no-labels --process-names       # ... with the GPU processes' names
  curl -s localhost:9400/v1/sample | jq .gpus

exit codes:
  0    stopped (SIGINT or SIGTERM)
  2    bad arguments
  3    the cluster cannot be reached to label the node (credentials missing)
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path

from sparkrun_operator.cli import common


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``agent`` command to the top-level parser."""
    parser = subparsers.add_parser(
        "agent",
        help="run the GPU telemetry agent (NVML samples, metrics, node labels)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    common.add_cluster_options(parser, namespaced=False)
    parser.add_argument(
        "--node", default=os.environ.get("NODE_NAME", ""), help="this node's name (default: $NODE_NAME)"
    )
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default: 0.0.0.0)")
    parser.add_argument(
        "--port", type=int, default=9400, help="port of /v1/sample and /metrics (default: 9400)"
    )
    parser.add_argument(
        "--interval", type=_positive, default=5.0, help="seconds between samples (default: 5)"
    )
    parser.add_argument(
        "--nvml-module",
        default="pynvml",
        help="import name of the NVML binding (default: pynvml, from nvidia-ml-py; tests pass a fake)",
    )
    parser.add_argument(
        "--proc", default="/proc", help="the host's /proc (default: /proc; the pod shares the host's PIDs)"
    )
    parser.add_argument(
        "--no-labels", action="store_true", help="do not write the node labels (no Kubernetes access needed)"
    )
    parser.add_argument(
        "--process-names",
        action="store_true",
        help="report the names (comm) of the processes on each GPU (default: pids and memory only; "
        "a sample shows every tenant's processes to whoever may reach the agent)",
    )
    parser.set_defaults(func=_run)


def _positive(value: str) -> float:
    number = float(value)
    if not 0.1 <= number <= 3600:
        raise argparse.ArgumentTypeError("between 0.1 and 3600 seconds")
    return number


def _run(args: argparse.Namespace) -> int:
    from sparkrun_operator import runner
    from sparkrun_operator.agent.run import AgentOptions, serve
    from sparkrun_operator.k8s.errors import KubeError

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    options = AgentOptions(
        node=args.node,
        host=args.host,
        port=args.port,
        interval=args.interval,
        nvml_module=args.nvml_module,
        proc_root=Path(args.proc),
        labels=not args.no_labels,
        process_names=args.process_names,
        kubeconfig=args.kubeconfig,
        context=args.context,
    )

    try:
        runner.serve_until_signalled(lambda stop: serve(options, stop=stop))
    except KubeError as error:
        sys.stderr.write(f"error: {error}\n")
        return common.EXIT_UNREACHABLE
    return common.EXIT_OK
