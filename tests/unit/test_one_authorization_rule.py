"""The daemon has one authorization rule (issue 25, item 1).

The scope rule (a principal holds a scope when any verb at or above it in ``SCOPES`` is
granted; ``answer-secret`` too for a secret prompt), the secret verb and ``is_admin`` are written
once, in ``ops/authz.py``; the shim's gate and the operator's execution-time check both call it.

- An AST scan of ``sparkrun_operator`` fails on a second definition: the hierarchy of ``SCOPES``
  (``SCOPES.index``, a slice of it, a loop over it) read in more than one function, a verb asked
  of a reviewer (``x.allowed(user, verb)``) outside that function, the literal
  ``"answer-secret"`` written more than once, a function named ``is_admin`` defined twice.
- The gate (403, detail only) and the execution-time check (``PermissionError`` with
  ``principal_lacks_scope``) decide alike for every grant, scope and secret flag, each with its
  own error body.
"""

from __future__ import annotations

import ast
import asyncio
import itertools
from collections.abc import Awaitable
from pathlib import Path

import pytest

import sparkrun_operator
from sparkrun_operator.errors import SparkrunError
from sparkrun_operator.k8s.auth import UserInfo
from sparkrun_operator.ops import authz
from sparkrun_operator.ops.catalog import SCOPES
from sparkrun_operator.ops.errors import Forbidden, error_body
from sparkrun_operator.shim.identity import Caller, Gate

PACKAGE = Path(sparkrun_operator.__file__).resolve().parent
RULE = ("ops/authz.py", "missing_scope")
VERBS = (*SCOPES, "answer-secret")


def _modules() -> list[tuple[str, ast.Module]]:
    return [
        (str(path.relative_to(PACKAGE)), ast.parse(path.read_text(encoding="utf-8"), str(path)))
        for path in sorted(PACKAGE.rglob("*.py"))
    ]


def _docstrings(tree: ast.Module) -> set[int]:
    """The ids of the docstring constants of a module, its classes and its functions."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def _is_scopes(node: ast.expr) -> bool:
    return (isinstance(node, ast.Name) and node.id == "SCOPES") or (
        isinstance(node, ast.Attribute) and node.attr == "SCOPES"
    )


def _reads_hierarchy(node: ast.AST) -> bool:
    """``SCOPES.index(...)``, ``SCOPES[a:b]``, or a loop / comprehension over ``SCOPES``."""
    if isinstance(node, ast.Attribute) and node.attr == "index" and _is_scopes(node.value):
        return True
    if isinstance(node, ast.Subscript) and _is_scopes(node.value) and isinstance(node.slice, ast.Slice):
        return True
    return isinstance(node, ast.For | ast.AsyncFor | ast.comprehension) and _is_scopes(node.iter)


def _asks_a_verb(node: ast.AST) -> bool:
    """A reviewer's question: ``<x>.allowed(user, verb)`` (the ``Reviewer`` protocol)."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "allowed"
        and len(node.args) == 2
    )


def test_the_scope_hierarchy_is_read_in_one_function() -> None:
    modules = _modules()
    readers = {
        (path, fn.name)
        for path, tree in modules
        for fn in _functions(tree)
        if any(_reads_hierarchy(n) for n in ast.walk(fn))
    }
    assert readers == {RULE}, f"the scope rule is written in {sorted(readers)}, not only in {RULE}"


def test_only_the_rule_asks_a_reviewer_for_a_verb() -> None:
    modules = _modules()
    askers = {
        (path, fn.name)
        for path, tree in modules
        for fn in _functions(tree)
        if any(_asks_a_verb(n) for n in ast.walk(fn))
    }
    assert askers == {RULE}, f"verbs are asked of a reviewer in {sorted(askers)}: call {RULE} instead"


def test_the_secret_verb_is_written_once() -> None:
    places = []
    for path, tree in _modules():
        docs = _docstrings(tree)
        places += [
            f"{path}:{n.lineno}"
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and n.value == "answer-secret" and id(n) not in docs
        ]
    assert len(places) == 1, f'"answer-secret" is written at {places}'
    assert places[0].startswith("ops/authz.py:")


def test_is_admin_is_defined_once() -> None:
    places = [
        f"{path}:{fn.lineno}" for path, tree in _modules() for fn in _functions(tree) if fn.name == "is_admin"
    ]
    assert len(places) == 1, f"is_admin is defined at {places}"
    assert places[0].startswith("ops/authz.py:")


class Grants:
    """A reviewer that grants ``verbs`` and records what it was asked."""

    def __init__(self, verbs: set[str]) -> None:
        self.verbs = verbs
        self.asked: list[str] = []

    async def allowed(self, user: UserInfo, verb: str) -> bool:
        self.asked.append(verb)
        return verb in self.verbs


async def _refusal(check: Awaitable[None]) -> SparkrunError | None:
    """The error a check raised (``None``: it let the caller through)."""
    try:
        await check
    except SparkrunError as refused:
        return refused
    return None


def _holds(granted: set[str], scope: str, secret: bool) -> bool:
    """The rule, as the docs state it (docs/security.md, Scopes)."""
    if secret and "answer-secret" not in granted:
        return False
    return scope in SCOPES and any(v in granted for v in SCOPES[SCOPES.index(scope) :])


GRANTS = [set(c) for n in range(len(VERBS) + 1) for c in itertools.combinations(VERBS, n)]


@pytest.mark.parametrize("granted", GRANTS, ids=lambda g: "+".join(sorted(g)) or "none")
def test_the_gate_and_the_execution_check_decide_alike(granted: set[str]) -> None:
    user = UserInfo(username="system:serviceaccount:ns:ci")
    reviewer = Grants(granted)
    gate = Gate(None, reviewer, None)  # type: ignore[arg-type]
    caller = Caller(user=user, manager="daemon", via="bearer")

    async def check() -> None:
        for scope, secret in itertools.product((*SCOPES, "bogus"), (False, True)):
            expected = _holds(granted, scope, secret)
            assert await gate.allows(caller, scope, secret=secret) is expected
            at_execution = await _refusal(authz.check_scope(reviewer, user, scope, secret=secret))
            at_the_gate = await _refusal(gate.require(caller, scope, secret=secret))
            if expected:
                assert at_execution is None
                assert at_the_gate is None
                continue
            assert isinstance(at_execution, authz.PrincipalNotAuthorized)
            lacking = "answer-secret" if secret and "answer-secret" not in granted else scope
            assert at_execution.attrs == {"reason": "principal_lacks_scope", "scope": lacking}
            status, body, _ = error_body(at_execution)
            assert status == 403
            assert body["error"]["type"] == "PermissionError"
            assert isinstance(at_the_gate, Forbidden)
            assert error_body(at_the_gate) == (403, {"detail": "Insufficient permission"}, {})
        assert await gate.admin(caller) is ("admin" in granted)
        assert await authz.is_admin(reviewer, user) is ("admin" in granted)
        assert await authz.is_admin(reviewer, None) is False

    asyncio.run(check())


def test_the_secret_verb_is_asked_first() -> None:
    """A secret prompt refused for want of ``answer-secret`` names that verb, asking nothing else."""
    reviewer = Grants(set())
    user = UserInfo(username="u")
    with pytest.raises(authz.PrincipalNotAuthorized) as refused:
        asyncio.run(authz.check_scope(reviewer, user, "read", secret=True))
    assert refused.value.attrs["scope"] == "answer-secret"
    assert refused.value.detail == "u may not answer secret prompts"
    assert reviewer.asked == ["answer-secret"]
