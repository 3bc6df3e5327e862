"""Wake a workload and wait until it is Ready.

A sleeping workload wakes (vLLM /wake_up), a stopped one or one the idle policy scaled to zero
starts again; the command waits until the workload is Ready and prints how long that took,
unless --no-wait. A workload whose own replicas is 0 is refused (exit 1: nothing would start
it; scale it up instead). Runs the daemon operation ``workloads.wake``'s own code with your
kubeconfig's rights, on the workload in -n NAMESPACE (default: the context's namespace). With
--daemon (implied by --url) the daemon API runs it as a job instead, in its own namespace, on a
workload whose spec.manager is yours and that serves a recipe.

examples:
  sparkrun-k8s wake chat -n team-a
  sparkrun-k8s wake chat -n team-a --no-wait && sparkrun-k8s status -n team-a --watch
  sparkrun-k8s wake qwen-chat --daemon --no-wait && sparkrun-k8s daemon events -f JOB_ID
"""

from __future__ import annotations

from typing import Any

from sparkrun_operator.cli.lifecycle import Verb, register_verb

VERB = Verb(name="wake", operation="workloads.wake", done="awake, Ready")


def register(subparsers: Any) -> None:
    register_verb(subparsers, VERB, __doc__ or "", "wake a sleeping, stopped or idle workload")
