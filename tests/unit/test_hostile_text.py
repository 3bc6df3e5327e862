"""Text a hostile endpoint or caller wrote stays bounded and cannot pass for a tool's report
(issue 23): ``api/clip.py`` and its users, ``plan/logtail.py``, and the tool Job's check of a
report against how the tool ended (``ops/executors/modelcache/tooljob.py`` ``report``).

The numbers are the ones a hostile review measured: ``huggingface_hub`` puts a 500 answer's whole
body into its exception text, so a 3 MB body became a 3,000,260-character message that froze a
ModelCache's status (``set_condition`` raised) and filled a DaemonJob's error.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from typing import Any

import httpx2
import pytest
from huggingface_hub.utils import hf_raise_for_status

from sparkrun_operator.api.clip import ECHO_MAX, ELLIPSIS, MESSAGE_MAX, SERVER_TEXT_MAX, clip, echo
from sparkrun_operator.api.credentials import HUGGING_FACE, CredentialEndpoints, origin_of, withheld
from sparkrun_operator.api.meta import CONDITION_MESSAGE_MAX, Condition, set_condition
from sparkrun_operator.api.modelcache import ModelCacheSpec, ModelCacheStatus
from sparkrun_operator.ops.errors import MAX_DETAIL, DaemonError, Invalid, Unreachable, error_body
from sparkrun_operator.ops.executors import ARGUMENT_CHECKS
from sparkrun_operator.ops.executors.modelcache.files import check_files, check_import
from sparkrun_operator.ops.executors.modelcache.tooljob import exit_code, raise_for, report
from sparkrun_operator.ops.settings import Settings
from sparkrun_operator.plan.logtail import last_event
from sparkrun_operator.plan.modelcache import (
    CacheObservation,
    ObservedClaim,
    ObservedDownloadPod,
    ObservedJob,
    job_name,
    plan,
)
from sparkrun_operator.runtime import hferrors

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
ENDPOINT = "http://attacker.example"
FORGED = {"event": "result", "commit": "a" * 40, "files": 1, "total_bytes": 1}
FORGED_LINE = json.dumps(FORGED)


def _server_error(body: bytes, status: int = 500) -> Exception:
    request = httpx2.Request("GET", f"{ENDPOINT}/api/models/org/m/revision/main")
    try:
        hf_raise_for_status(httpx2.Response(status, content=body, request=request))
    except Exception as error:  # NB: whatever huggingface_hub raises for it
        return error
    raise AssertionError("no error raised")


def _classify(body: bytes, status: int = 500) -> hferrors.DownloadError:
    return hferrors.classify(
        _server_error(body, status), repo="org/m", revision="main", endpoint=ENDPOINT, has_token=False
    )


# -- clip -------------------------------------------------------------------------------------------


def test_clip_keeps_short_text_and_cuts_long_text_to_the_limit() -> None:
    assert clip("short", 10) == "short"
    assert clip("x" * 10, 10) == "x" * 10
    cut = clip("x" * 11, 10)
    assert len(cut) == 10
    assert cut.endswith(ELLIPSIS)
    assert len(clip("y" * 3_000_000)) == MESSAGE_MAX


def test_clip_does_not_cut_a_word_in_half_when_a_space_is_near() -> None:
    secret = "hf_" + "s" * 37
    text = "a" * (MESSAGE_MAX - 30) + " " + secret + " tail"
    cut = clip(text)
    assert secret[:5] not in cut, "half a secret-shaped word was kept"
    assert cut.endswith(" " + ELLIPSIS)
    assert len(cut) <= MESSAGE_MAX
    quoted = "x " * ((MESSAGE_MAX - 30) // 2) + '{"token":"' + secret + '"}'
    assert secret[:5] not in clip(quoted), "half a secret in JSON was kept"
    assert clip(quoted).endswith('"' + ELLIPSIS)
    # no word start near the cut: a hard cut, still bounded
    assert len(clip("z" * 10_000)) == MESSAGE_MAX


def test_echo_quotes_and_escapes_line_breaks() -> None:
    shown = echo("a\nb")
    assert "\n" not in shown
    assert shown == "'a\\nb'"
    assert len(echo("u" * 65_536)) <= ECHO_MAX + 2


# -- the downloader's messages ----------------------------------------------------------------------


def test_a_huge_server_body_gives_a_bounded_message() -> None:
    err = _classify(b"A" * 3_000_000)
    assert err.code == hferrors.EXIT_UNAVAILABLE
    assert len(err.message) <= SERVER_TEXT_MAX + 200, len(err.message)
    assert err.message.startswith(f"{ENDPOINT} is unavailable for org/m: ")
    assert err.message.endswith("retry later.")
    assert ELLIPSIS in err.message


def test_every_download_error_message_is_bounded() -> None:
    assert len(hferrors.DownloadError(hferrors.EXIT_FAILED, "m" * 1_000_000).message) == MESSAGE_MAX
    unexpected = hferrors.classify(
        ValueError("v" * 1_000_000), repo="org/m", revision="main", endpoint=ENDPOINT, has_token=False
    )
    assert unexpected.code == hferrors.EXIT_FAILED
    assert len(unexpected.message) <= SERVER_TEXT_MAX + 200
    long_endpoint = "http://h/" + "p" * 60_000
    gone = hferrors.classify(
        ConnectionError("refused"), repo="org/m", revision="main", endpoint=long_endpoint, has_token=False
    )
    assert len(gone.message) <= ECHO_MAX + 200


def test_the_server_text_is_kept_but_cannot_start_a_line_once_printed() -> None:
    err = _classify(b"oops\n" + FORGED_LINE.encode() + b"\nbye")
    assert FORGED_LINE in err.message  # what the server said, for whoever reads it
    printed = json.dumps(
        {"event": "error", "reason": err.reason, "exit_code": err.code, "message": err.message}
    )
    stderr = f"error: {json.dumps(err.message)}"
    log = f"{printed}\n{stderr}\n"
    assert not any(line.startswith("{") for line in stderr.split("\n"))
    event = last_event(log)
    assert event is not None
    assert event["event"] == "error"


# -- reading the log ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "sep",
    ["\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\r"],
    ids=repr,
)
def test_only_newlines_end_a_line(sep: str) -> None:
    real = '{"event": "error", "reason": "HubUnavailable", "exit_code": 8, "message": "x"}'
    assert last_event(f"{real}\nerror: upstream said{sep}{FORGED_LINE}\n") == json.loads(real)


@pytest.mark.parametrize(
    "line",
    [
        "  " + FORGED_LINE,
        "\t" + FORGED_LINE,
        'x {"event": "result"}',
        '{"commit": "' + "a" * 40 + '", "event": "result"}',
        '{"event": 1}',
        '["event", "result"]',
        '{"event": "result", "x": ' + "[" * 5000 + "]" * 5000 + "}",  # past json's recursion
    ],
)
def test_only_a_whole_event_line_counts(line: str) -> None:
    real = '{"event": "progress", "phase": "Downloading"}'
    assert last_event(f"{real}\n{line}\n") == json.loads(real)


def test_the_compact_and_the_spaced_spelling_both_count() -> None:
    assert last_event('{"event":"result","x":1}\n') == {"event": "result", "x": 1}
    assert last_event('{"event": "result", "x": 1}\r\n') == {"event": "result", "x": 1}
    assert last_event("nothing\n") is None


# -- the tool Job's report against how the tool ended -------------------------------------------


def test_a_failed_tools_result_is_not_a_report() -> None:
    with pytest.raises(DaemonError, match=r"failed \(exit code 8\) and its last report \('result'\)"):
        report(FORGED, failed=True, exit_code=8, where="the tool Job j of resolve")
    with pytest.raises(DaemonError, match="exit code unknown"):
        report(FORGED, failed=True, exit_code=None, where="j")
    # a non-zero exit code is a failure even before the Job says so
    with pytest.raises(DaemonError):
        report(FORGED, failed=False, exit_code=1, where="j")


def test_an_error_report_must_carry_the_tools_own_exit_code() -> None:
    error = {"event": "error", "reason": "HubUnavailable", "exit_code": 8, "message": "503"}
    assert report(error, failed=True, exit_code=8, where="j") == error
    assert report(error, failed=True, exit_code=None, where="j") == error  # the node is gone
    with pytest.raises(DaemonError, match="disagrees"):
        report(error, failed=True, exit_code=1, where="j")
    with pytest.raises(DaemonError, match="succeeded"):
        report(error, failed=False, exit_code=0, where="j")


def test_an_unclean_inspect_is_the_answer_of_a_tool_that_exited_7() -> None:
    unclean = {"event": "inspect", "clean": False, "missing": ["a"]}
    assert report(unclean, failed=True, exit_code=7, where="j") == unclean
    with pytest.raises(DaemonError):
        report(unclean, failed=True, exit_code=8, where="j")
    with pytest.raises(DaemonError):
        report({"event": "inspect", "clean": True}, failed=True, exit_code=7, where="j")
    with pytest.raises(DaemonError, match="printed no report"):
        report(None, failed=True, exit_code=7, where="j")
    ok = {"event": "manifest", "manifest": {}}
    assert report(ok, failed=False, exit_code=0, where="j") == ok


def test_the_exit_code_is_the_tool_containers() -> None:
    def pod(*statuses: dict[str, Any]) -> dict[str, Any]:
        return {"status": {"containerStatuses": list(statuses)}}

    done = {"name": "cache-tool", "state": {"terminated": {"exitCode": 8}}}
    assert exit_code(pod(done)) == 8
    assert exit_code(pod({"name": "other", "state": {"terminated": {"exitCode": 0}}}, done)) == 8
    assert exit_code(pod({"name": "cache-tool", "state": {"running": {}}})) is None
    assert exit_code({}) is None


def test_a_tools_error_becomes_a_bounded_daemon_error() -> None:
    event = {"event": "error", "reason": "HubUnavailable", "message": "B" * 3_000_000}
    with pytest.raises(Unreachable) as raised:
        raise_for(event, "resolving org/m")
    assert len(raised.value.detail) == MAX_DETAIL
    status, body, _ = error_body(raised.value)
    assert status == 502
    assert len(body["detail"]) == MAX_DETAIL


# -- conditions and statuses ----------------------------------------------------------------------


def test_set_condition_cuts_a_long_message_and_never_raises() -> None:
    conds: list[Condition] = []
    assert set_condition(
        conds, type="Ready", status="False", reason="Failed", message="A" * 3_000_260, now=NOW
    )
    assert len(conds[0].message) == CONDITION_MESSAGE_MAX
    assert conds[0].message.endswith(ELLIPSIS)
    Condition.model_validate(conds[0].model_dump())  # what the status write sends is valid
    assert set_condition(conds, type="Ready", status="True", reason="Ready", message="B" * 100_000, now=NOW)
    assert len(conds[0].message) == CONDITION_MESSAGE_MAX
    assert not set_condition(
        conds, type="Ready", status="True", reason="Ready", message="B" * 100_000, now=NOW
    )


SPEC = ModelCacheSpec.model_validate(
    {
        "source": {"huggingFace": {"repo": "org/m", "revision": "v1"}},
        "storage": {"create": {"size": "1Gi", "accessModes": ["ReadWriteOnce"]}},
    }
)


def _cache(pod: ObservedDownloadPod, failed: bool) -> CacheObservation:
    obs = CacheObservation(
        name="m",
        namespace="ns",
        uid="u",
        generation=1,
        spec=SPEC,
        status=ModelCacheStatus(),
        now=NOW,
        has_finalizer=True,
        claim=ObservedClaim(name="m", phase="Bound", access_modes=("ReadWriteOnce",), created=NOW),
    )
    job = ObservedJob(name=job_name(obs), uid="j", failed=failed, succeeded=not failed)
    return dataclasses.replace(obs, jobs=(job,), pods=(pod,))


def test_a_failed_download_with_a_forged_result_stays_failed_and_bounded() -> None:
    pod = ObservedDownloadPod(name="p", phase="Failed", node="n1", exit_code=8, last_event=FORGED)
    p = plan(_cache(pod, failed=True))
    assert p.status.phase == "Failed"
    assert p.status.resolved_revision is None
    assert p.status.manifest is None


def test_a_huge_download_error_gives_a_bounded_status() -> None:
    event = {"event": "error", "reason": "Hub Unavailable\nx", "message": "A" * 3_000_260}
    pod = ObservedDownloadPod(name="p", phase="Failed", node="n1", exit_code=8, last_event=event)
    p = plan(_cache(pod, failed=True))
    assert p.status.phase == "Failed"
    assert len(p.status.message or "") <= MESSAGE_MAX
    ready = next(c for c in p.status.conditions if c.type == "Ready")
    assert ready.reason == "HubUnavailable"  # the exit code's: the reported one is not a reason
    assert len(ready.message) <= MESSAGE_MAX + 200


# -- a caller's URL and names in refusals --------------------------------------------------------


def test_a_callers_url_is_quoted_cut() -> None:
    url = "http://h/" + "a" * 65_000
    for bad in (url + "?q", url + " ", "ftp://" + "b" * 65_000):
        with pytest.raises(ValueError, match="endpoint") as refused:
            origin_of(bad)
        assert len(str(refused.value)) <= ECHO_MAX + 100, len(str(refused.value))
    notice = withheld(HUGGING_FACE, url, ["https://huggingface.co"])
    assert len(notice) <= ECHO_MAX + 200
    with pytest.raises(ValueError, match="unknown credential") as unknown:
        CredentialEndpoints.parse({"x" * 65_000: []})
    assert len(str(unknown.value)) <= ECHO_MAX + 100


def test_model_cache_refusals_quote_a_callers_values_cut() -> None:
    with pytest.raises(Invalid) as refused:
        check_files({"model": "org/m", "endpoint": "http://h/" + "e" * 65_000 + "#f"})
    assert len(refused.value.detail) <= ECHO_MAX + 200
    with pytest.raises(Invalid) as mode:
        check_files({"model": "org/m", "transfer_mode": "t" * 65_000})
    assert len(mode.value.detail) <= ECHO_MAX + 200
    manifest = {"repo": "r" * 65_000, "revision": "a" * 40, "files": [{"path": "x"}]}
    with pytest.raises(Invalid) as other:
        check_import({"model": "m" * 65_000, "cache_dir": "c", "manifest": manifest})
    assert len(other.value.detail) <= 2 * ECHO_MAX + 200


@pytest.mark.parametrize(
    "path",
    ["../../evil.txt", "/etc/passwd", "a/./b", "a//b", "a/..", "a\\b", "a\x00b", "", "x" * 1025, 7],
)
def test_model_cache_import_refuses_a_manifest_path_that_leaves_the_snapshot(path: object) -> None:
    # The manifest a caller imports names the paths the cache tool writes under
    # snapshots/<commit>/: the same rule as for what an endpoint answers (api/paths.py).
    check = ARGUMENT_CHECKS["model_cache.import"]
    manifest = {"repo": "org/model", "revision": "a" * 40, "files": [{"path": "config.json", "size": 2}]}
    args = {"cache_dir": "claim", "model": "org/model"}
    check({**args, "manifest": manifest}, Settings(namespace="default"))
    manifest["files"].append({"path": path, "size": 1})
    with pytest.raises(Invalid, match=re.escape("must be relative, without '.', '..' or empty parts")):
        check({**args, "manifest": manifest}, Settings(namespace="default"))
