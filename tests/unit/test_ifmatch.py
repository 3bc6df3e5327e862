"""``If-Match`` (ADR 0049): the header's parser, the table of conditional operations, the 412's body
and the precondition's place in a job's digest. Pure parts only; over real HTTP against a real
apiserver: tests/shim/test_if_match.py.

Tested: strong comparison (a weak tag parses and never matches; ``*`` matches anything existing),
lists with empty elements and whitespace, a comma inside a quoted tag; every malformed form is a
422 (empty, ``*`` with tags, unquoted, unterminated, a quote or a control or non-ASCII character
in a tag, junk after a tag, too long, too many tags) and the parse is linear on hostile input;
several header fields are one list; the table holds exactly the operations the issue lists (plus
what other families register, each with a resolver, a kind it names and a matching query the
catalog has) and refuses a second registration; an operation outside it is 422 naming it; the
412's envelope is ``revision_conflict``, retryable, with the current ETag, the given header, kind
and name; a precondition changes the request digest (and so the Idempotency-Key rule and the
pinned arguments) while a job without one keeps its old digest; the DaemonJob CRD holds ifMatch
immutable and bounded.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

import sparkrun_operator.ops.executors  # noqa: F401  (fills ifmatch.TABLE)
from sparkrun_operator.api.daemonjob import DaemonJobSpec
from sparkrun_operator.ops import catalog, ifmatch
from sparkrun_operator.ops.errors import DaemonError, Invalid, PreconditionFailed, error_body
from sparkrun_operator.ops.executors.targets import OBJECTS_GET, pinned_cache
from sparkrun_operator.ops.jobargs import request_digest, verified_arguments

LISTED = {
    "workloads.stop",
    "workloads.sleep",
    "workloads.wake",
    "cluster.update",
    "cluster.default",
    "model_cache.pin",
    "plugins.sparkrun-k8s.workloads.rollback",
    "plugins.sparkrun-k8s.workloads.apply_drift",
    "plugins.sparkrun-k8s.clusters.apply_drift",
}
KINDS = {"InferenceWorkload", "InferenceCluster", "ModelCache", "DaemonJob"}


def test_strong_comparison_star_and_lists() -> None:
    parsed = ifmatch.parse(' "12" , W/"13",, "a,b" ,')
    assert (parsed.strong, parsed.weak, parsed.any) == (("12", "a,b"), 1, False)
    assert parsed.matches("12")
    assert parsed.matches("a,b")
    assert not parsed.matches("13")  # NB: weak never matches (RFC 9110 strong comparison)
    assert not parsed.matches("1")
    assert not parsed.matches("")
    assert parsed.precondition("12") == "12"
    star = ifmatch.parse("*")
    assert star.any
    assert star.matches("999")
    assert star.precondition("999") is None
    assert ifmatch.etag("4711") == '"4711"'
    assert ifmatch.parse(ifmatch.etag("4711")).matches("4711")


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "   ",
        ",,",
        '*, "1"',
        '"1", *',
        "**",
        "12",
        'W/12"',
        '"1',
        '"1" "2"',
        '"1"x',
        'w/"1"',
        '"a\x01b"',
        '"caf\u00e9"',
        '"a b"',
        '"' + "7" * (ifmatch.MAX_TAG + 1) + '"',
        ",".join(['"1"'] * (ifmatch.MAX_TAGS + 1)),
        " " * (ifmatch.MAX_HEADER + 1) + "*",
    ],
)
def test_malformed_is_422(raw: str) -> None:
    with pytest.raises(Invalid) as refused:
        ifmatch.parse(raw)
    assert error_body(refused.value)[0] == 422


def test_several_fields_are_one_list_and_bounded_together() -> None:
    joined = ifmatch.header_of(['"1"', 'W/"2", "3"'])
    assert joined is not None
    assert joined.strong == ("1", "3")
    assert ifmatch.header_of([]) is None
    with pytest.raises(Invalid):
        ifmatch.header_of(['"1"'] * 1000)


def test_hostile_input_parses_in_linear_time() -> None:
    # NB: no regular expression: a long run of near-tags is refused within the bound quickly
    hostile = ('"' + "," * 60 + "W/") * 30
    start = time.perf_counter()
    for _ in range(200):
        with pytest.raises(Invalid):
            ifmatch.parse(hostile[: ifmatch.MAX_HEADER])
    assert time.perf_counter() - start < 5.0


def test_the_table_holds_the_listed_operations() -> None:
    names = {op.name for op in catalog.load()}
    assert set(ifmatch.TABLE) >= LISTED
    for name, entry in ifmatch.TABLE.items():
        assert entry.operation == name
        assert name in names, name
        assert entry.kind in KINDS
        assert entry.query in names  # NB: every target has a matching query that answers its ETag
        assert callable(entry.resolve)
        # NB: a job, or a query that writes one object (its executor gets ctx.if_match too)
        assert next(op for op in catalog.load() if op.name == name).kind in {"job", "query"}
    assert {ifmatch.TABLE[n].kind for n in LISTED} == {"InferenceWorkload", "InferenceCluster", "ModelCache"}
    assert ifmatch.TABLE["model_cache.pin"].query == OBJECTS_GET
    with pytest.raises(ValueError, match="already registered"):
        ifmatch.register("workloads.stop", kind="InferenceWorkload", query=OBJECTS_GET, resolve=_never)


async def _never(ctx: ifmatch.ResolveContext, args: Any) -> ifmatch.Target:
    raise AssertionError("not called")


def test_an_operation_outside_the_table_is_422_naming_it() -> None:
    for name in ("workloads.run", "workloads.list", "plugins.sparkrun-k8s.objects.get", "cluster.create"):
        with pytest.raises(Invalid) as refused:
            ifmatch.conditional(name)
        assert name in refused.value.detail
        assert refused.value.attrs == {"operation": name}


def test_the_412_envelope() -> None:
    given = ifmatch.parse('"5", W/"7"')
    obj = {"metadata": {"name": "chat-prod", "resourceVersion": "7"}}
    with pytest.raises(PreconditionFailed) as stale:
        ifmatch.check_object(given, obj, kind="InferenceWorkload")
    status, body, headers = error_body(stale.value)
    assert (status, headers) == (412, {})
    assert body["error"] == {
        "type": "revision_conflict",
        "retryable": True,
        "attrs": {"etag": '"7"', "if_match": '"5", W/"7"', "kind": "InferenceWorkload", "name": "chat-prod"},
    }
    assert "chat-prod" in body["detail"]
    assert ifmatch.check_object(ifmatch.parse('"3", "7"'), obj, kind="InferenceWorkload") == "7"
    assert ifmatch.check_object(ifmatch.parse("*"), obj, kind="InferenceWorkload") is None
    assert ifmatch.check_object(None, obj, kind="InferenceWorkload") is None


def test_patch_with_carries_the_version() -> None:
    patch = {"spec": {"state": "Sleeping"}, "metadata": {"labels": {"a": "b"}}}
    assert ifmatch.patch_with(patch, None) == patch
    assert ifmatch.patch_with(patch, "9") == {
        "spec": {"state": "Sleeping"},
        "metadata": {"labels": {"a": "b"}, "resourceVersion": "9"},
    }
    assert patch["metadata"] == {"labels": {"a": "b"}}  # NB: not mutated


def test_the_precondition_is_covered_by_the_digest() -> None:
    args = {"workload_id": "chat-prod", "recipe": "r", "recipe_revision": "1"}
    plain = request_digest("workloads.sleep", 1, args, "daemon")
    assert request_digest("workloads.sleep", 1, args, "daemon", if_match=None) == plain
    conditional = request_digest("workloads.sleep", 1, args, "daemon", if_match="41")
    assert conditional != plain
    assert conditional != request_digest("workloads.sleep", 1, args, "daemon", if_match="42")
    spec = {
        "operation": "workloads.sleep",
        "operationVersion": 1,
        "arguments": args,
        "manager": "daemon",
        "requestDigest": conditional,
        "ifMatch": "41",
    }
    assert verified_arguments(spec) == args
    for tampered in ({**spec, "ifMatch": "40"}, {k: v for k, v in spec.items() if k != "ifMatch"}):
        with pytest.raises(DaemonError) as refused:
            verified_arguments(tampered)
        assert refused.value.attrs == {"reason": "arguments_changed"}


def test_the_crd_keeps_if_match_immutable_and_bounded() -> None:
    schema = DaemonJobSpec.model_json_schema(by_alias=True)
    field = schema["properties"]["ifMatch"]
    assert field["x-kubernetes-validations"][0]["rule"] == "self == oldSelf"
    assert any(
        r["rule"] == "has(self.ifMatch) == has(oldSelf.ifMatch)" for r in schema["x-kubernetes-validations"]
    )
    assert field["anyOf"][0]["maxLength"] == 128


def _cache(name: str, repo: str, revision: str, commit: str | None) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"source": {"huggingFace": {"repo": repo, "revision": revision}}},
        "status": {"resolvedRevision": commit} if commit else {},
    }


def test_model_cache_pin_names_one_cache() -> None:
    commit = "a" * 40
    one = _cache("qwen-main", "Qwen/Qwen3-8B", "main", commit)
    other = _cache("llama", "meta/llama", "main", "b" * 40)
    assert pinned_cache([one, other], "Qwen/Qwen3-8B", commit, "models") is one
    assert pinned_cache([one, other], "Qwen/Qwen3-8B", "main", "models") is one
    with pytest.raises(Invalid, match="none tracks it"):
        pinned_cache([other], "Qwen/Qwen3-8B", commit, "models")
    twin = _cache("qwen-pinned", "Qwen/Qwen3-8B", commit, commit)
    with pytest.raises(Invalid, match="several track it") as several:
        pinned_cache([one, twin], "Qwen/Qwen3-8B", commit, "models")
    assert several.value.attrs["model_caches"] == ["qwen-main", "qwen-pinned"]
