"""What a served name may be: the one definition, for admission and for the operator.

A served name (``spec.model.servedName``, each of ``spec.model.aliases``, ``spec.model.name``
where it is the served name, a Recipe's ``defaults.served_model_name``) is matched exactly
against the ``model`` of requests, listed by ``/v1/models``, written to ``status.model`` and
passed to the engine as ``--served-model-name``. So it is 1 to :data:`SERVED_NAME_MAX_LENGTH`
characters, with

- no Unicode control (Cc) or format (Cf) character, nor a line or paragraph separator (Zl, Zp):
  a line break, a tab, NUL or an escape sequence splits or corrupts a log line, a header or a
  table; a bidi override or isolate (U+202A-202E, U+2066-2069), a zero-width character
  (U+200B-200F, U+2060, U+FEFF) or a soft hyphen disguises one name as another;
- no whitespace (a space, a no-break space, any Unicode space separator) at either end:
  invisible padding that makes ``"gpt "`` a name of its own. Inner spaces are allowed.

Look-alikes (NFKC, confusables: a Cyrillic ``a`` (U+0430) for a Latin one, fullwidth letters, an inner
no-break space) are **not** refused: the gateway matches names exactly, so a look-alike is a
distinct name that answers only for its own workload; it can mislead a reader, never reroute a
request. Folding them would refuse legitimate non-Latin names and could not be exhaustive.

The characters are listed here as explicit code point ranges (Unicode 15.1), not as ``\\p{Cc}``
classes: the apiserver (Go's RE2), the offline validator (``api/admission.py``: CEL through
google-re2) and :func:`problem` (Python) each have Unicode tables of their own version, while
these ranges are the same for all three. ``tests/unit/test_served_name_rule.py`` checks them
against the running Python's Unicode database and the CEL rules against :func:`problem`.

Admission enforces it with CEL rules (:data:`SERVED_NAME_RULES`; a ``pattern`` cannot: Python's
``$`` also matches before a final line break, so the offline validator would accept
``"name\\n"``). The models keep only the length bounds (schema-only rule, as the bounds of
issue 23, ADR 0016): a workload stored before the rule is still parsed by the operator, whose
resolution (``recipe/resolve.py``) refuses it with :func:`problem`.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final

from pydantic import Field

from sparkrun_operator.api import cel

__all__ = [
    "CONTROL_MESSAGE",
    "EDGE_MESSAGE",
    "REFUSED",
    "SERVED_NAME_MAX_LENGTH",
    "SERVED_NAME_RULES",
    "SPACES",
    "ServedName",
    "problem",
]

#: The longest served name (``--served-model-name``, ``status.model.servedName``).
SERVED_NAME_MAX_LENGTH: Final = 256

#: Code points refused anywhere in a name: Cc, Cf, Zl and Zp of Unicode 15.1 (inclusive ranges).
REFUSED: Final[tuple[tuple[int, int], ...]] = (
    (0x0000, 0x001F),
    (0x007F, 0x009F),
    (0x00AD, 0x00AD),
    (0x0600, 0x0605),
    (0x061C, 0x061C),
    (0x06DD, 0x06DD),
    (0x070F, 0x070F),
    (0x0890, 0x0891),
    (0x08E2, 0x08E2),
    (0x180E, 0x180E),
    (0x200B, 0x200F),
    (0x2028, 0x202E),
    (0x2060, 0x2064),
    (0x2066, 0x206F),
    (0xFEFF, 0xFEFF),
    (0xFFF9, 0xFFFB),
    (0x110BD, 0x110BD),
    (0x110CD, 0x110CD),
    (0x13430, 0x1343F),
    (0x1BCA0, 0x1BCA3),
    (0x1D173, 0x1D17A),
    (0xE0001, 0xE0001),
    (0xE0020, 0xE007F),
)

#: Code points refused at either end: the space separators (Zs) of Unicode 15.1.
SPACES: Final[tuple[tuple[int, int], ...]] = (
    (0x0020, 0x0020),
    (0x00A0, 0x00A0),
    (0x1680, 0x1680),
    (0x2000, 0x200A),
    (0x202F, 0x202F),
    (0x205F, 0x205F),
    (0x3000, 0x3000),
)

CONTROL_MESSAGE: Final = (
    "may not contain control or format characters (line breaks, tabs, NUL, escape sequences, "
    "bidi overrides, zero-width characters)"
)
EDGE_MESSAGE: Final = "may not begin or end with whitespace"


def _re2_class(ranges: tuple[tuple[int, int], ...]) -> str:
    """An RE2 character class (``\\x{...}`` escapes: plain ASCII in the CRD, and the same syntax
    for Go's regexp and google-re2)."""
    return (
        "[" + "".join(f"\\x{{{lo:X}}}" + (f"-\\x{{{hi:X}}}" if hi != lo else "") for lo, hi in ranges) + "]"
    )


def _cel_string(regex: str) -> str:
    """``regex`` as a single-quoted CEL string literal."""
    return "'" + regex.replace("\\", "\\\\").replace("'", "\\'") + "'"


_REFUSED_RE2: Final = _re2_class(REFUSED)
_SPACES_RE2: Final = _re2_class(SPACES)

#: The CEL rules (``x-kubernetes-validations``) of a served name's schema. ``matches`` searches
#: (unanchored); in RE2 ``$`` is the end of the text.
SERVED_NAME_RULES: Final[tuple[dict[str, Any], ...]] = (
    cel.rule(f"!self.matches({_cel_string(_REFUSED_RE2)})", CONTROL_MESSAGE),
    cel.rule(f"!self.matches({_cel_string('^' + _SPACES_RE2 + '|' + _SPACES_RE2 + '$')})", EDGE_MESSAGE),
)


def _py_class(ranges: tuple[tuple[int, int], ...]) -> str:
    return (
        "["
        + "".join(re.escape(chr(lo)) + ("-" + re.escape(chr(hi)) if hi != lo else "") for lo, hi in ranges)
        + "]"
    )


_REFUSED_PY: Final = re.compile(_py_class(REFUSED))
_SPACES_PY: Final = re.compile(_py_class(SPACES))


def problem(text: str) -> str | None:
    """Why ``text`` cannot be a served name (a phrase to follow the field's name), else ``None``."""
    if not text:
        return "may not be empty"
    if len(text) > SERVED_NAME_MAX_LENGTH:
        return f"has {len(text)} characters, more than {SERVED_NAME_MAX_LENGTH}"
    if _REFUSED_PY.search(text):
        return CONTROL_MESSAGE
    if _SPACES_PY.fullmatch(text[0]) or _SPACES_PY.fullmatch(text[-1]):
        return EDGE_MESSAGE
    return None


#: A served name as the CRD schema states it: the length bounds in the model and the schema,
#: the character rules in the schema only (see the module's docstring).
ServedName = Annotated[
    str,
    Field(
        min_length=1,
        max_length=SERVED_NAME_MAX_LENGTH,
        json_schema_extra=cel.rules(*SERVED_NAME_RULES),
    ),
]
