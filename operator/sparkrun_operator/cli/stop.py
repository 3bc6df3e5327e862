"""Stop a workload: delete it (its pods, JobSets and routes with it) and wait until it is gone.

Runs the daemon operation ``workloads.stop``'s own code with your kubeconfig's rights, on the
workload in -n NAMESPACE (default: the context's namespace); NAME is its name or its workload id
(status.workloadId). The command returns when the object is gone and prints how long that took.
With --daemon (implied by --url) the daemon API runs it as a job instead, in its own namespace,
on a workload whose spec.manager is yours and that serves a recipe.

examples:
  sparkrun-k8s stop chat -n team-a
  sparkrun-k8s stop chat -n team-a --no-wait          # return once the delete is made
  sparkrun-k8s stop chat -n team-a -o json            # the result, for scripts
  sparkrun-k8s stop qwen-chat --daemon                # a DaemonJob in the shim's namespace
"""

from __future__ import annotations

from typing import Any

from sparkrun_operator.cli.lifecycle import Verb, register_verb

VERB = Verb(name="stop", operation="workloads.stop", done="stopped")


def register(subparsers: Any) -> None:
    register_verb(subparsers, VERB, __doc__ or "", "stop a workload: delete it, wait until it is gone")
