"""kopf's diff base only for the kinds with change handlers (``controllers/diffbase.py``): every
change handler the operator registers is on one of those kinds, their essence is kopf's own, and
every other kind's is empty (no deep copy of pods, JobSets or workloads on each event)."""

from __future__ import annotations

import kopf

from sparkrun_operator.api.resources import KINDS
from sparkrun_operator.controllers import operator
from sparkrun_operator.controllers.config import OperatorConfig
from sparkrun_operator.controllers.diffbase import ChangeHandledKindsDiffBase
from sparkrun_operator.controllers.operator import CHANGE_HANDLED_KINDS, RunOptions, build_settings

PLURAL_TO_KIND = {(k.group, k.plural): k.kind for k in KINDS}


def test_every_change_handler_is_on_a_kind_with_a_diff_base() -> None:
    registry = operator.build_registry(OperatorConfig())
    handled = set()
    for handler in registry._changing.get_all_handlers():
        selector = handler.selector
        assert selector is not None
        handled.add((selector.group, PLURAL_TO_KIND[(selector.group, selector.any_name)]))
    assert handled, "the Recipe controller's change handlers"
    assert handled <= CHANGE_HANDLED_KINDS
    storage = build_settings(RunOptions()).persistence.diffbase_storage
    assert isinstance(storage, ChangeHandledKindsDiffBase)
    assert storage.kinds == CHANGE_HANDLED_KINDS


def test_essence_of_handled_kinds_only() -> None:
    storage = ChangeHandledKindsDiffBase(kinds=CHANGE_HANDLED_KINDS, prefix="sparkrun.dev", key="last")
    plain = kopf.AnnotationsDiffBaseStorage(prefix="sparkrun.dev", key="last")
    recipe = kopf.Body(
        {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "Recipe",
            "metadata": {"name": "r", "labels": {"a": "b"}},
            "spec": {"model": "o/m"},
            "status": {"revision": "x"},
        }
    )
    assert storage.build(body=recipe) == plain.build(body=recipe)
    assert storage.build(body=recipe)["spec"] == {"model": "o/m"}
    pod = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n"}})
    assert storage.build(body=pod) == {}
    workload = kopf.Body(
        {
            "apiVersion": "sparkrun.dev/v1alpha1",
            "kind": "InferenceWorkload",
            "metadata": {"name": "w"},
            "spec": {},
        }
    )
    assert storage.build(body=workload) == {}
    kindless = kopf.Body({"metadata": {"name": "x"}, "spec": {"a": 1}})
    assert storage.build(body=kindless) == plain.build(body=kindless)
