"""Which workloads a change of one workload's claimed names re-plans (``controllers/workload_pokes.py``
``poke_rivals``): only rivals that rank after it (plan/names.py: the oldest claim keeps a
name), so a burst of N workloads serving one model pokes about N times, not N^2."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from sparkrun_operator.controllers import indexes
from sparkrun_operator.controllers.triggers import Triggers
from sparkrun_operator.controllers.workload_pokes import poke_rivals


def _body(name: str, created: str, model: str = "Qwen/Qwen3-0.6B") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
        "spec": {"model": {"name": model}},
    }


class World:
    """Workloads, their names index and the triggers of their full lanes."""

    def __init__(self) -> None:
        self.ctx = SimpleNamespace(triggers=Triggers(), claims={})
        self.index: dict[str, dict[tuple[str, str], Any]] = {}
        self.events: dict[str, Any] = {}

    def put(self, body: dict[str, Any]) -> set[str]:
        """Index ``body`` as kopf would, then run the handler; the workloads poked."""
        key = ("ns", body["metadata"]["name"])
        self.events[key[1]] = self.ctx.triggers.register(("iw", *key))
        self._drop(key)
        claim = indexes.claim_of(body)
        assert claim is not None
        for model in claim.names:
            self.index.setdefault(model, {})[key] = claim
        return self._handled(key, body)

    def delete(self, name: str) -> set[str]:
        key = ("ns", name)
        self._drop(key)
        return self._handled(key, None)

    def _drop(self, key: tuple[str, str]) -> None:
        for store in self.index.values():
            store.pop(key, None)

    def _handled(self, key: tuple[str, str], body: dict[str, Any] | None) -> set[str]:
        view = {model: list(store.values()) for model, store in self.index.items()}
        for event in self.events.values():
            event.clear()
        poke_rivals(self.ctx, key, body, view)  # type: ignore[arg-type]  # a stand-in Memo
        return {name for name, event in self.events.items() if event.is_set()}


def test_a_new_claim_pokes_only_the_rivals_that_rank_after_it() -> None:
    world = World()
    assert world.put(_body("a", "2026-12-01T10:00:00Z")) == set()
    assert world.put(_body("b", "2026-12-01T10:00:05Z")) == set()  # newer than a: a keeps the name
    # created in the same second as b: ranks by name, before "d" and after "b"
    assert world.put(_body("d", "2026-12-01T10:00:05Z")) == set()
    assert world.put(_body("c", "2026-12-01T10:00:05Z")) == {"d"}
    # an unrelated model pokes nobody
    assert world.put(_body("x", "2026-12-01T09:00:00Z", model="other/model")) == set()


def test_a_workload_that_goes_or_renames_pokes_the_rivals_after_it() -> None:
    world = World()
    for name, second in (("a", 0), ("b", 1), ("c", 2), ("d", 3)):
        world.put(_body(name, f"2026-12-01T10:00:0{second}Z"))
    assert world.delete("b") == {"c", "d"}  # the next oldest may keep the name now
    assert world.delete("d") == set()  # the newest decided nobody else's name
    # a changes model: c (after a) may win the old name; nobody ranks after a on the new one
    assert world.put(_body("a", "2026-12-01T10:00:00Z", model="other/model")) == {"c"}
    # a newer claim unchanged by an event (status write): nobody is poked
    assert world.put(_body("c", "2026-12-01T10:00:02Z")) == set()
