"""The answer Secret of a secret prompt (``ops/answers.py``): its name, body and checks.

Tested: the name depends on (job, prompt) only, differs for each, and stays a valid Secret name
(a DNS subdomain of at most 253 characters) for the longest job names and any prompt id; the
body the shim creates passes the executor's check; the check refuses every other reference and
every Secret that lacks the job's labels, its owner reference (by UID) or a text value.
"""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import pytest

from sparkrun_operator.ops import answers

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
JOB = {"metadata": {"name": "a" * 32, "uid": "job-uid"}}


def _stored(body: dict[str, Any]) -> dict[str, Any]:
    data = {k: base64.b64encode(v.encode()).decode() for k, v in body["stringData"].items()}
    stored = {k: v for k, v in body.items() if k != "stringData"}
    return {**stored, "data": data}


@pytest.mark.parametrize(
    "job",
    ["a" * 32, "x" * 253, "a." * 126 + "b", "a-" * 126 + "b", "x" * 225 + "-" * 3 + "y" * 25],
)
@pytest.mark.parametrize("prompt_id", ["0123456789abcdef", "p1", "A_b.c", "x" * 128])
def test_names_are_valid_and_bounded(job: str, prompt_id: str) -> None:
    name = answers.secret_name(job, prompt_id)
    assert len(name) <= 253
    assert DNS_SUBDOMAIN.match(name), name
    assert answers.secret_name(job, prompt_id) == name  # deterministic
    assert answers.secret_name(job, prompt_id + "0") != name
    assert answers.secret_name(job + "0" if len(job) < 253 else job[:-1] + "0", prompt_id) != name


def test_a_short_job_keeps_its_name_in_the_secret_name() -> None:
    assert answers.secret_name("a" * 32, "p1").startswith("a" * 32 + "-answer-")


def test_the_shims_secret_passes_the_executors_check() -> None:
    body = answers.secret_body(JOB, "p1", "hunter2", namespace="ns")
    name = answers.secret_name("a" * 32, "p1")
    assert body["metadata"]["name"] == name
    assert answers.check_reference({"name": name, "key": "token"}, name) is None
    assert answers.check_reference({"name": name}, name) is None
    stored = _stored(body)
    assert answers.check_secret(stored, JOB, "p1") is None
    assert answers.secret_value(stored) == "hunter2"
    empty = _stored(answers.secret_body(JOB, "p1", "", namespace="ns"))
    assert answers.check_secret(empty, JOB, "p1") is None
    assert answers.secret_value(empty) == ""


@pytest.mark.parametrize(
    "ref", [{"name": "hub-token", "key": "token"}, {"name": "x", "key": "password"}, "hub-token", None]
)
def test_other_references_are_refused(ref: Any) -> None:
    name = answers.secret_name("a" * 32, "p1")
    if isinstance(ref, dict) and ref["name"] == "x":
        ref = {**ref, "name": name}
    assert answers.check_reference(ref, name) is not None


def _break(kind: str, secret: dict[str, Any]) -> dict[str, Any] | None:
    meta = secret["metadata"]
    owner = meta["ownerReferences"][0]
    if kind == "missing":
        return None
    if kind == "another name":
        meta["name"] = "hub-token"
    elif kind == "no labels":
        del meta["labels"]
    elif kind == "another job's label":
        meta["labels"]["sparkrun.dev/daemonjob"] = "b" * 32
    elif kind == "another prompt's label":
        meta["labels"]["sparkrun.dev/prompt"] = "p2"
    elif kind == "no owner":
        del meta["ownerReferences"]
    elif kind == "owner of another uid":
        owner["uid"] = "other-uid"
    elif kind == "owner of another kind":
        owner["kind"] = "ConfigMap"
    elif kind == "owner of another group":
        owner["apiVersion"] = "example.com/v1alpha1"
    elif kind == "owner not controller":
        owner["controller"] = False
    elif kind == "no value":
        secret["data"] = {}
    elif kind == "not base64":
        secret["data"] = {"token": "%%%"}
    elif kind == "not text":
        secret["data"] = {"token": base64.b64encode(b"\xff\xfe").decode()}
    return secret


@pytest.mark.parametrize(
    "kind",
    [
        "missing",
        "another name",
        "no labels",
        "another job's label",
        "another prompt's label",
        "no owner",
        "owner of another uid",
        "owner of another kind",
        "owner of another group",
        "owner not controller",
        "no value",
        "not base64",
        "not text",
    ],
)
def test_a_secret_the_shim_did_not_make_is_refused(kind: str) -> None:
    body = answers.secret_body(JOB, "p1", "s3cret-value", namespace="ns")
    secret = _break(kind, copy.deepcopy(_stored(body)))
    why = answers.check_secret(secret, JOB, "p1")
    assert why is not None
    assert "s3cret-value" not in why


def test_a_job_without_uid_owns_nothing() -> None:
    secret = _stored(answers.secret_body(JOB, "p1", "v", namespace="ns"))
    assert answers.check_secret(secret, {"metadata": {"name": "a" * 32}}, "p1") is not None


@pytest.mark.parametrize(
    ("prompt_id", "valid"),
    [
        ("0123456789abcdef", True),
        ("p1", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("-a", False),
        ("", False),
    ],
)
def test_prompt_ids_that_can_label_a_secret(prompt_id: str, valid: bool) -> None:
    assert answers.valid_prompt_id(prompt_id) is valid
