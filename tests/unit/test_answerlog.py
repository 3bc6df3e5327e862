"""Who answered a prompt (``ops/answerlog.py``): the comment header's checks, the spec entry, the
status record with its replays, and the public view (never a secret's value).

The whole path (the shim's route, the DaemonJob, two principals, the admission policy) is tested
on the testbed in ``tests/shim/test_answers.py``.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sparkrun_operator.api.daemonjob import ANSWER_COMMENT_MAX, MAX_ANSWER_REPLAYS, DaemonJobStatus
from sparkrun_operator.ops import answerlog
from sparkrun_operator.ops.errors import Invalid

T0 = dt.datetime(2026, 12, 6, 15, 0, tzinfo=dt.UTC)


def _header(text: str) -> str:
    """A header value as Starlette hands it over: the UTF-8 bytes read as latin-1."""
    return text.encode().decode("latin-1")


def test_comments_are_bounded_utf8_text() -> None:
    assert answerlog.check_comment(None) is None
    assert answerlog.check_comment("   ") is None
    assert answerlog.check_comment(_header("  ship it, 👍 ü  ")) == "ship it, 👍 ü"
    assert answerlog.check_comment("x" * ANSWER_COMMENT_MAX) == "x" * ANSWER_COMMENT_MAX


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param("x" * (ANSWER_COMMENT_MAX + 1), id="too long"),
        pytest.param("x" * 100_000, id="far too long"),
        pytest.param("a\tb", id="a tab inside"),
        pytest.param("red \x1b[31m", id="an escape"),
        pytest.param(_header("admin\u202etxt.exe"), id="a bidirectional override"),
        pytest.param(_header("a\u200db"), id="a zero-width joiner"),
        pytest.param(_header("a\u2028b"), id="a line separator"),
        pytest.param("caf\xe9", id="not UTF-8"),
    ],
)
def test_comments_refused(raw: str) -> None:
    with pytest.raises(Invalid, match="X-Sparkrun-Comment"):
        answerlog.check_comment(raw)


def test_the_spec_entry_says_who_and_when_beside_the_value() -> None:
    entry = answerlog.spec_entry("p1", value=False, by="alice", at=T0, comment="no")
    assert entry == {
        "promptId": "p1",
        "value": False,
        "answeredBy": "alice",
        "answeredAt": "2026-12-06T15:00:00Z",
        "comment": "no",
    }
    secret = answerlog.spec_entry(
        "p2", secret_ref={"name": "s", "key": "token"}, by="bob", at=T0, comment=None
    )
    assert secret == {
        "promptId": "p2",
        "secretRef": {"name": "s", "key": "token"},
        "answeredBy": "bob",
        "answeredAt": "2026-12-06T15:00:00Z",
    }


def _job(entries: list[dict[str, Any]], status: DaemonJobStatus) -> dict[str, Any]:
    return {"spec": {"answers": entries}, "status": status.to_wire()}


def test_the_status_record_keeps_replays_bounded_and_the_public_view_hides_secrets() -> None:
    status = DaemonJobStatus()
    approval = answerlog.spec_entry("p1", value=True, by="alice", at=T0, comment="go")
    secret = answerlog.spec_entry(
        "p2", secret_ref={"name": "s", "key": "token"}, by="bob", at=T0, comment=None
    )
    answerlog.record(status, approval, kind="approval")
    answerlog.record(status, approval, kind="approval")  # once per prompt
    answerlog.record(status, secret, kind="secret")
    assert [r.prompt_id for r in status.answers] == ["p1", "p2"]
    for n in range(MAX_ANSWER_REPLAYS + 3):
        at = T0 + dt.timedelta(seconds=n + 1)
        answerlog.replay(status, approval, kind="approval", by=f"u{n}", at=at, comment=None)
    answerlog.replay(status, secret, kind="secret", by="carol", at=T0, comment="same token")
    first = status.answers[0]
    assert first.replay_count == MAX_ANSWER_REPLAYS + 3
    assert [r.by for r in first.replays] == [f"u{n}" for n in range(3, MAX_ANSWER_REPLAYS + 3)]
    assert status.answers[1].value is None

    shown = answerlog.public_answers(
        _job([approval, secret], DaemonJobStatus.model_validate(status.to_wire()))
    )
    assert [a["prompt_id"] for a in shown] == ["p1", "p2"]
    assert shown[0]["kind"] == "approval"
    assert (shown[0]["value"], shown[0]["answered_by"], shown[0]["comment"]) == (True, "alice", "go")
    assert shown[0]["answered_at"] == T0.timestamp()
    assert shown[0]["replay_count"] == MAX_ANSWER_REPLAYS + 3
    assert len(shown[0]["replays"]) == MAX_ANSWER_REPLAYS
    assert shown[1]["kind"] == "secret"
    assert shown[1]["value"] is None
    assert "s" not in {str(v) for v in shown[1].values()}  # not even the Secret's name
    assert shown[1]["replays"] == [{"by": "carol", "at": T0.timestamp(), "comment": "same token"}]


def test_the_public_view_falls_back_to_the_spec_and_to_nothing_for_old_answers() -> None:
    approval = answerlog.spec_entry("p1", value=False, by="alice", at=T0, comment="later")
    legacy = {"promptId": "p0", "value": True}
    shown = answerlog.public_answers(_job([legacy, approval], DaemonJobStatus()))
    assert shown[0] == {
        "prompt_id": "p0",
        "kind": None,
        "value": True,
        "answered_by": None,
        "answered_at": None,
        "comment": None,
        "replay_count": 0,
        "replays": [],
    }
    assert (shown[1]["answered_by"], shown[1]["comment"], shown[1]["value"]) == ("alice", "later", False)
    status = DaemonJobStatus()
    answerlog.replay(status, legacy, kind="approval", by="bob", at=T0, comment=None)
    assert status.answers == []  # an answer that never said who gave it gets no record
