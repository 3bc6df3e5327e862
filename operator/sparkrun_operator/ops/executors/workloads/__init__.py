"""``workloads.*``: daemon workloads are InferenceWorkloads in the API namespace.

Launch (``workloads.run``, ``workloads.ensure_ready``) creates an ``InferenceWorkload`` serving
the Recipe named by ``recipe`` (a Recipe object in the namespace), owned by the caller's manager
(``spec.manager``); the workload is named after the recipe (or ``workload_id_override``). The
daemon's placement arguments map as follows:

- ``cluster`` -> ``spec.cluster``; ``hosts`` -> an ad-hoc InferenceCluster ``hosts-<digest>``
  whose members are those nodes (created once, reused);
- ``overrides``: ``tensor_parallel``/``tp``, ``pipeline_parallel``/``pp``, ``max_model_len``,
  ``gpu_memory_utilization``, ``served_model_name``, ``enable_sleep_mode`` (other keys are
  refused: set them in the Recipe); ``solo`` -> one node;
- host-execution settings (transfer modes, cache directories, ports, executors, docker options
  ...) have no Kubernetes meaning; they are ignored with a ``warning`` event naming them;
- ``confirm: true`` asks an approval prompt before anything is created; ``wait_ready`` (default
  true) waits for the Ready condition, reporting the startup timeline as feedback events;
  ``dry_run`` creates nothing; ``collect_diagnostics`` attaches a diagnostic bundle.

The workload id is ``status.workloadId`` (``sparkrun_<intent>_<placement>``, placement token
from the object's namespace, name and uid, as the workload controller computes it). Guarded
operations (stop, sleep, wake, reconcile, status) address a workload by that id and check the
recipe name, the recipe revision and, except ``status``, that the caller's manager owns it.
``stop`` deletes the workload (UID precondition); ``sleep``/``wake`` set ``spec.state``.
``stop_matching`` and ``stop_all`` are the broad selector-based controls without owner guard.

Modules: :mod:`.request` (recipe resolution for a launch), :mod:`.preview` (plan, materialize),
:mod:`.launch` (run, ensure_ready), :mod:`.lifecycle` (guarded status/stop/sleep/wake/reconcile),
:mod:`.inventory` (list, inventory, find_intent, plugins, endpoints), :mod:`.bulk`
(stop_matching, stop_all); the endpoint shape shared with other families is in
:mod:`sparkrun_operator.ops.executors.endpoints`.
"""

from __future__ import annotations

from sparkrun_operator.ops.executors.endpoints import endpoint_entry, recipe_specs, served_model
from sparkrun_operator.ops.executors.workloads.bulk import check_stop_matching, stop_all, stop_matching
from sparkrun_operator.ops.executors.workloads.inventory import (
    endpoints,
    find_intent,
    inventory,
    list_workloads,
    plugins,
    workload_row,
)
from sparkrun_operator.ops.executors.workloads.launch import ensure_ready, run
from sparkrun_operator.ops.executors.workloads.lifecycle import reconcile, sleep, status, stop, wake
from sparkrun_operator.ops.executors.workloads.preview import materialize, plan
from sparkrun_operator.ops.executors.workloads.request import check_launch
from sparkrun_operator.ops.invocation import ArgumentCheck, Executor

__all__ = ["CHECKS", "EXECUTORS", "endpoint_entry", "recipe_specs", "served_model", "workload_row"]

CHECKS: dict[str, ArgumentCheck] = {
    "workloads.run": check_launch,
    "workloads.ensure_ready": check_launch,
    "workloads.plan": check_launch,
    "workloads.materialize": check_launch,
    "workloads.stop_matching": check_stop_matching,
}

EXECUTORS: dict[str, Executor] = {
    "workloads.run": run,
    "workloads.plan": plan,
    "workloads.materialize": materialize,
    "workloads.ensure_ready": ensure_ready,
    "workloads.list": list_workloads,
    "workloads.inventory": inventory,
    "workloads.status": status,
    "workloads.stop": stop,
    "workloads.sleep": sleep,
    "workloads.wake": wake,
    "workloads.reconcile": reconcile,
    "workloads.find_intent": find_intent,
    "workloads.plugins": plugins,
    "workloads.endpoints": endpoints,
    "workloads.stop_matching": stop_matching,
    "workloads.stop_all": stop_all,
}
