"""The DaemonJob executor's view of one job (``controllers/daemonjob.py`` ``_Control``): its own
writes and the watch's events, in whatever order they arrive."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from sparkrun_operator.controllers.daemonjob import _Control


def _obj(rv: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "j", "namespace": "ns", "resourceVersion": rv}, "spec": dict(spec)}


class _Jobs:
    """``update_status`` that lets the watch deliver events before the call returns."""

    def __init__(self, control: list[_Control], during: Callable[[_Control], None]) -> None:
        self.control, self.during = control, during

    async def update_status(self, obj: dict[str, Any], mutate: Any) -> dict[str, Any]:
        self.during(self.control[0])
        return _obj("w1")


class _Executor:
    def __init__(self, jobs: _Jobs) -> None:
        self._jobs = jobs

    def jobs_in(self, namespace: str) -> _Jobs:
        return self._jobs


def _control(during: Callable[[_Control], None]) -> _Control:
    holder: list[_Control] = []
    control = _Control(_Executor(_Jobs(holder, during)), _obj("r0"))  # type: ignore[arg-type]
    holder.append(control)
    return control


def test_a_cancel_delivered_while_our_write_returns_is_not_lost() -> None:
    def watch(c: _Control) -> None:
        c.offer(_obj("w1"))  # our write, delivered before the call returned
        c.offer(_obj("c2", cancel=True))  # then the shim's cancel

    control = _control(watch)
    asyncio.run(control.write(lambda status, current: None))
    assert control.obj["spec"].get("cancel") is True
    # and later events are taken as they come (no hold on a write the watch already showed)
    control.offer(_obj("c3", cancel=True, answers=[1]))
    assert control.obj["metadata"]["resourceVersion"] == "c3"


def test_events_older_than_our_write_are_ignored_until_the_write_shows() -> None:
    control = _control(lambda c: None)
    asyncio.run(control.write(lambda status, current: None))
    assert control.obj["metadata"]["resourceVersion"] == "w1"
    control.offer(_obj("r0"))  # a stale event from before our write
    assert control.obj["metadata"]["resourceVersion"] == "w1"
    control.offer(_obj("w1"))
    control.offer(_obj("c2", cancel=True))
    assert control.obj["spec"].get("cancel") is True
