"""Put a workload to sleep and wait until it sleeps.

vLLM's sleep mode (level 1: the weights move to host memory, the GPU memory is freed, the pods
and their GPUs are kept) for a workload started with engine.enableSleepMode: true; a workload
without it is refused (exit 1, Conflict). Runs the daemon operation ``workloads.sleep``'s own
code with your kubeconfig's rights, on the workload in -n NAMESPACE (default: the context's
namespace), and returns when its Sleeping condition is True. ``sparkrun-k8s wake NAME`` serves it
again in seconds. With --daemon (implied by --url) the daemon API runs it as a job instead, in
its own namespace, on a workload whose spec.manager is yours and that serves a recipe.

examples:
  sparkrun-k8s sleep chat -n team-a
  sparkrun-k8s sleep qwen-chat --daemon
  sparkrun-k8s sleep qwen-chat --url https://shim.example:8443 --token-file ~/.sparkrun/token
"""

from __future__ import annotations

from typing import Any

from sparkrun_operator.cli.lifecycle import Verb, register_verb

VERB = Verb(name="sleep", operation="workloads.sleep", done="sleeping (level 1)")


def register(subparsers: Any) -> None:
    register_verb(subparsers, VERB, __doc__ or "", "put a workload to sleep (vLLM sleep mode, level 1)")
