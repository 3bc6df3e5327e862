"""Who answered a prompt: the answer record of a DaemonJob (issue 29). Pure functions; no I/O.

The daemon API answers a prompt (``POST /v1/jobs/{id}/input``, body exactly ``{prompt_id,
value}`` as the reference requires) and records with it

- who: the principal the shim authenticated, never a name the caller gave (the body has no
  room for one, and a header naming one is not read);
- when: the shim's clock when it took the answer;
- an optional comment from the ``X-Sparkrun-Comment`` header (:func:`check_comment`: UTF-8, at
  most :data:`~sparkrun_operator.api.daemonjob.ANSWER_COMMENT_MAX` characters, no control or
  format characters).

The record lives twice. ``spec.answers[]`` (:func:`spec_entry`) carries who, when and the comment
beside the value or secret reference: the chart's admission policy lets only the shim change
``spec.answers``, so this copy cannot be forged. ``status.answers[]`` (:func:`record`,
:func:`replay`) adds the prompt's kind and the replays: the same answer given again (a client's
retry, or a second principal confirming it) changes nothing but is recorded there, who and when,
the newest :data:`~sparkrun_operator.api.daemonjob.MAX_ANSWER_REPLAYS` of them and a count.
:func:`public_answers` is what ``GET /v1/jobs/{id}?include=answers`` shows. A secret answer's
value is never part of any of them.
"""

from __future__ import annotations

import datetime as dt
import unicodedata
from collections.abc import Mapping
from typing import Any, Final

from sparkrun_operator.api.daemonjob import (
    ANSWER_COMMENT_MAX,
    MAX_ANSWER_REPLAYS,
    AnswerRecord,
    AnswerReplay,
    DaemonJobStatus,
)
from sparkrun_operator.ops.errors import Invalid
from sparkrun_operator.ops.kube import epoch

__all__ = ["COMMENT_HEADER", "check_comment", "public_answers", "record", "replay", "spec_entry"]

#: The request header an answer's comment comes in.
COMMENT_HEADER: Final = "x-sparkrun-comment"
#: Unicode categories a comment may not hold: controls, format characters (bidirectional
#: overrides, zero-width joiners), surrogates, private use, line and paragraph separators.
_REFUSED: Final = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})


def check_comment(raw: str | None) -> str | None:
    """The comment of an ``X-Sparkrun-Comment`` header value (Starlette hands header bytes over
    as latin-1; they are read as UTF-8), surrounding spaces removed; ``None`` when absent or
    blank. Raises :class:`Invalid` (422) for undecodable bytes, a refused character, or more
    than the bound."""
    if raw is None:
        return None
    if len(raw) > 4 * ANSWER_COMMENT_MAX:  # NB: checked before decoding: at most 4 bytes a character
        raise Invalid(f"X-Sparkrun-Comment: at most {ANSWER_COMMENT_MAX} characters")
    try:
        text = raw.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise Invalid("X-Sparkrun-Comment: not UTF-8") from None
    text = text.strip(" \t")
    if len(text) > ANSWER_COMMENT_MAX:
        raise Invalid(f"X-Sparkrun-Comment: at most {ANSWER_COMMENT_MAX} characters")
    for index, char in enumerate(text):
        if unicodedata.category(char) in _REFUSED:
            raise Invalid(f"X-Sparkrun-Comment: control or format character U+{ord(char):04X} at {index}")
    return text or None


def spec_entry(
    prompt_id: str,
    *,
    by: str,
    at: dt.datetime,
    comment: str | None,
    value: bool | None = None,
    secret_ref: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``spec.answers`` entry of an answer: the value (or the secret's reference), who, when."""
    entry: dict[str, Any] = {"promptId": prompt_id}
    if secret_ref is not None:
        entry["secretRef"] = dict(secret_ref)
    else:
        entry["value"] = value
    entry["answeredBy"] = by
    entry["answeredAt"] = _wire_time(at)
    if comment is not None:
        entry["comment"] = comment
    return entry


def _wire_time(at: dt.datetime) -> str:
    return at.astimezone(dt.UTC).isoformat().replace("+00:00", "Z")


def _from_spec(entry: Mapping[str, Any], kind: str | None) -> AnswerRecord | None:
    """A status record rebuilt from a ``spec.answers`` entry (``None`` for one recorded before
    answers said who gave them)."""
    by, at = entry.get("answeredBy"), entry.get("answeredAt")
    if not by or not at:
        return None
    secret = "secretRef" in entry
    return AnswerRecord.model_validate(
        {
            "promptId": entry["promptId"],
            "kind": "secret" if secret else (kind or "approval"),
            "value": None if secret else entry.get("value"),
            "answeredBy": by,
            "answeredAt": at,
            "comment": entry.get("comment"),
        }
    )


def record(status: DaemonJobStatus, entry: Mapping[str, Any], *, kind: str | None) -> None:
    """Add the status record of the answer ``entry`` (a ``spec.answers`` entry); nothing when
    the prompt has one already."""
    if any(r.prompt_id == entry["promptId"] for r in status.answers):
        return
    found = _from_spec(entry, kind)
    if found is not None:
        status.answers.append(found)


def replay(
    status: DaemonJobStatus,
    entry: Mapping[str, Any],
    *,
    kind: str | None,
    by: str,
    at: dt.datetime,
    comment: str | None,
) -> None:
    """Record that the answer ``entry`` (a ``spec.answers`` entry) was given again by ``by``."""
    record(status, entry, kind=kind)
    found = next((r for r in status.answers if r.prompt_id == entry["promptId"]), None)
    if found is None:  # NB: an answer recorded before answers said who gave them: no record to add to
        return
    found.replay_count += 1
    found.replays.append(AnswerReplay(by=by, at=at, comment=comment))
    del found.replays[: max(0, len(found.replays) - MAX_ANSWER_REPLAYS)]


def public_answers(obj: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The answers of a DaemonJob as ``GET /v1/jobs/{id}?include=answers`` shows them, in the
    order they were given: ``{prompt_id, kind, value, answered_by, answered_at, comment,
    replay_count, replays: [{by, at, comment}]}`` (times in seconds since the epoch, as the
    daemon's; ``value`` is ``null`` for a secret). The status record when there is one, else what
    ``spec.answers`` says (``kind`` ``null`` when it cannot tell)."""
    spec_answers = (obj.get("spec") or {}).get("answers") or []
    records = {r.get("promptId"): r for r in ((obj.get("status") or {}).get("answers") or [])}
    out = []
    for entry in spec_answers:
        prompt_id = entry.get("promptId")
        found: Mapping[str, Any] = records.get(prompt_id) or {}
        secret = "secretRef" in entry or found.get("kind") == "secret"
        out.append(
            {
                "prompt_id": prompt_id,
                "kind": found.get("kind") or ("secret" if secret else None),
                "value": None if secret else entry.get("value"),
                "answered_by": found.get("answeredBy") or entry.get("answeredBy"),
                "answered_at": epoch(found.get("answeredAt") or entry.get("answeredAt")),
                "comment": found.get("comment") if found else entry.get("comment"),
                "replay_count": int(found.get("replayCount") or 0),
                "replays": [
                    {"by": r.get("by"), "at": epoch(r.get("at")), "comment": r.get("comment")}
                    for r in found.get("replays") or ()
                ],
            }
        )
    return out
