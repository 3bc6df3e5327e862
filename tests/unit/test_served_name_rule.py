"""One definition of a served name (``api/servedname.py``): its code point ranges are Unicode's
categories, and the CEL rules admission runs (the offline validator's google-re2 here; the
apiserver's Go RE2 in ``tests/testbed/test_admission.py`` over the corpus) refuse exactly what
the operator's :func:`~sparkrun_operator.api.servedname.problem` refuses."""

from __future__ import annotations

import copy
import unicodedata
from collections.abc import Iterator

import celpy
import pytest

from sparkrun_operator.api import servedname
from sparkrun_operator.api.admission import validate
from tests.corpus import load_examples


def _points(ranges: tuple[tuple[int, int], ...]) -> set[int]:
    return {cp for lo, hi in ranges for cp in range(lo, hi + 1)}


def _category(cp: int) -> str:
    return unicodedata.category(chr(cp))


def test_the_ranges_are_unicodes_categories() -> None:
    """Every Cc, Cf, Zl and Zp code point of this Python's Unicode database is refused, and the
    ranges hold nothing else that is assigned (a newer Unicode adding a format character fails
    here: add it to ``REFUSED``). The same for the space separators at either end."""
    refused, spaces = _points(servedname.REFUSED), _points(servedname.SPACES)
    every = range(0x110000)
    assert {cp for cp in every if _category(cp) in {"Cc", "Cf", "Zl", "Zp"}} <= refused
    assert {_category(cp) for cp in refused} <= {"Cc", "Cf", "Zl", "Zp", "Cn"}
    assert {cp for cp in every if _category(cp) == "Zs"} == spaces


def _boundaries() -> Iterator[int]:
    for lo, hi in (*servedname.REFUSED, *servedname.SPACES):
        yield from (lo - 1, lo, hi, hi + 1)


def _samples() -> list[str]:
    out = ["gpt-prod", "gpt prod", "Qwen/Qwen3-0.6B", "\u0433pt", "\uff47\uff50\uff54", "x" * 256]
    for cp in sorted({cp for cp in _boundaries() if 0 <= cp <= 0x10FFFF and not 0xD800 <= cp <= 0xDFFF}):
        ch = chr(cp)
        out += [f"a{ch}b", f"{ch}ab", f"ab{ch}", ch]
    return out


def test_the_cel_rules_refuse_exactly_what_the_operator_refuses() -> None:
    env = celpy.Environment()
    programs = [env.program(env.compile(rule["rule"])) for rule in servedname.SERVED_NAME_RULES]
    samples = _samples()
    assert len(samples) > 300
    for text in samples:
        admitted = all(bool(p.evaluate({"self": celpy.celtypes.StringType(text)})) for p in programs)
        assert admitted == (servedname.problem(text) is None), ascii(text)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("gpt-prod\n", servedname.CONTROL_MESSAGE),  # Python's `$` would match before it
        ("gpt\u202eprod", servedname.CONTROL_MESSAGE),
        ("\u2028", servedname.CONTROL_MESSAGE),
        ("gpt-prod\u2003", servedname.EDGE_MESSAGE),
        (" gpt", servedname.EDGE_MESSAGE),
        ("gpt-prod", None),
        ("gpt\u00a0prod", None),
    ],
)
def test_sparkrun_k8s_validate_applies_the_rule_to_every_name(text: str, message: str | None) -> None:
    for field, path in (
        ("servedName", "spec.model.servedName"),
        ("aliases", "spec.model.aliases[0]"),
        ("name", "spec.model.name"),
    ):
        doc = copy.deepcopy(load_examples()["inferenceworkload"])
        doc["spec"]["model"][field] = [text] if field == "aliases" else text
        errors = validate(doc)
        if message is None:
            assert errors == []
        else:
            assert [(e.path, e.message) for e in errors] == [(path, message)]
        assert servedname.problem(text) == message
