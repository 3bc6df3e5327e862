"""The project's one loader of YAML and JSON that a tenant wrote: bounded before it is walked.

Every place that parses a document a tenant (or a user's own file) supplies goes through here
(ADR 0038): recipe content (``catalog.import``), the daemon API's request bodies, manifests of
``model_cache.import``, benchmark plans, recipe override values, ``sparkrun-k8s validate``.
Each kind of document has its :class:`Bounds`, named below with its figures:

- **size** in bytes (UTF-8), checked before parsing starts;
- **nesting depth** (mappings/objects and sequences/arrays inside one another; the top-level
  collection is level 1), checked while parsing: YAML in the composer, as each collection
  opens; JSON by a linear pre-scan of the text (string contents skipped) before ``json.loads``
  runs, whose own recursion is bounded only by the interpreter's recursion limit;
- **no YAML anchors or aliases**: the composer refuses the first ``&anchor`` or ``*alias`` it
  meets, naming its line and column, before any aliased structure exists. (An alias chain of a
  few hundred bytes expands to 10^8 nodes for whoever walks or copies the result.) What is
  left is a tree at most as large as the document.
- JSON: no ``NaN``/``Infinity``; YAML: a single document (:func:`load_yaml`) or a stream
  (:func:`load_yaml_all`), the safe tags only.

Every refusal is a :class:`DocumentError` (a ``ValueError``; :class:`LimitExceeded` for the size
and depth bounds) whose message names the document (``Bounds.what``) and the problem; callers
turn it into their own error (the daemon API's 422).
:func:`check_tree` applies the same depth and size bounds to a value that is already parsed
(an argument of a DaemonJob), without recursion.

YAML events come from libyaml when PyYAML has it (no recursion, in C), else from PyYAML's own
parser; the composer is always PyYAML's, with the checks above. Pure: imports nothing of the
project (it sits below every layer, beside ``retry``).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import yaml
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.events import AliasEvent, CollectionStartEvent, NodeEvent
from yaml.nodes import Node, ScalarNode
from yaml.resolver import Resolver

__all__ = [
    "ALIAS_STATE",
    "BENCH_PLAN",
    "MANIFEST",
    "MAX_DEPTH",
    "MODEL_CONFIG",
    "OVERRIDE_VALUE",
    "RECIPE",
    "REQUEST_BODY",
    "TOOL_EVENT",
    "USER_MANIFESTS",
    "Bounds",
    "DocumentError",
    "LimitExceeded",
    "check_tree",
    "json_depth",
    "load_json",
    "load_yaml",
    "load_yaml_all",
]

KIB: Final = 1024
MIB: Final = 1024 * KIB
#: The deepest bound a document may be given.
MAX_DEPTH: Final = 128


class DocumentError(ValueError):
    """A document refused: too large, too deep, an anchor or alias, or not valid YAML/JSON."""


class LimitExceeded(DocumentError):
    """A document over its size or depth bound (valid or not otherwise)."""


@dataclass(frozen=True)
class Bounds:
    """The bounds of one kind of document; ``what`` names it in every message."""

    what: str
    max_bytes: int
    max_depth: int

    def __post_init__(self) -> None:
        # NB: PyYAML's composer recurses (3 frames a level): keep well inside the interpreter's
        # recursion limit, whatever the caller's stack.
        if not 1 <= self.max_depth <= MAX_DEPTH:
            raise ValueError(f"max_depth must be within 1..{MAX_DEPTH}")


#: Recipe YAML of ``catalog.import`` (the operation's schema allows 262,144 characters; a real
#: recipe is a few KiB and nests 4 or 5 levels).
RECIPE: Final = Bounds("recipe YAML", 256 * KIB, 32)
#: A daemon API request body (the shim refuses more than 1 MiB with 413 before reading it; the
#: operation schemas then allow 20 levels below the arguments object).
REQUEST_BODY: Final = Bounds("request body", 1 * MIB, 64)
#: A ``model_cache.import`` manifest: compact JSON (ASCII) that travels as one command-line
#: argument of the tool Job (``--manifest-json``), and Linux caps one argument at 128 KiB
#: (``MAX_ARG_STRLEN``, 131,072 bytes with its NUL): 120 KiB is about 780 files. It sits at
#: level 2 of a DaemonJob's arguments, which nest at most 8 levels (``api/bounds.py``); the
#: daemon's shape nests 3 (the manifest, ``files``, one file).
MANIFEST: Final = Bounds("manifest", 120 * KIB, 7)
#: A benchmark runner's ``--plan`` (``render/benchmark.py``: the spec's free-form ``benchArgs``).
BENCH_PLAN: Final = Bounds("benchmark plan", 1 * MIB, 32)
#: A JSON-looking string value of a recipe override (``"defaults.x": "{...}"``; the daemon API
#: bounds strings to 65,536 characters).
OVERRIDE_VALUE: Final = Bounds("override value", 64 * KIB, 32)
#: The manifests a user gives ``sparkrun-k8s validate`` (their own files; the same rules).
USER_MANIFESTS: Final = Bounds("manifest YAML", 8 * MIB, 64)
#: A value of the gateway's alias ConfigMap (``aliases.json``: alias -> model; ``loaded-models.json``:
#: recipe -> its launch overrides, which nest inside a DaemonJob's 8 levels). Whoever may write
#: ConfigMaps in a namespace the gateway watches writes it; a ConfigMap holds at most 1 MiB.
ALIAS_STATE: Final = Bounds("alias ConfigMap value", 1 * MIB, 16)
#: One JSON event line of a tool Job's log (``plan/logtail.py``: the cache tool and downloader
#: print one per line; a ``resolve`` event carries a whole manifest).
TOOL_EVENT: Final = Bounds("tool event", 8 * MIB, 32)
#: A model's ``config.json`` read from a cache volume (``runtime/modelshape.py``): real ones are
#: a few KiB and nest 3 or 4 levels (``text_config`` -> ``rope_scaling``).
MODEL_CONFIG: Final = Bounds("model config.json", 1 * MIB, 16)

_ANCHORS_REFUSED: Final = "anchors and aliases are not allowed"


def _where(event: Any) -> str:
    mark = event.start_mark
    return f"line {mark.line + 1}, column {mark.column + 1}"


if yaml.__with_libyaml__:
    from yaml._yaml import CParser as _EventSource
else:  # pragma: no cover - PyYAML without libyaml
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _EventSource(Reader, Scanner, _PyParser):  # type: ignore[no-redef]
        def __init__(self, stream: str) -> None:
            Reader.__init__(self, stream)
            Scanner.__init__(self)
            _PyParser.__init__(self)


class _Loader(Composer, _EventSource, SafeConstructor, Resolver):
    """Events from ``_EventSource``; nodes from PyYAML's composer (before ``_EventSource`` in the
    MRO, so it replaces libyaml's own), which refuses anchors, aliases and collections past the
    depth bound as it meets them, before their node exists; safe tags only."""

    def __init__(self, text: str, bounds: Bounds) -> None:
        _EventSource.__init__(self, text)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.bounds = bounds
        self.depth = 0

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event = self.peek_event()
        what = self.bounds.what
        if isinstance(event, AliasEvent):
            raise DocumentError(
                f"{what} uses an alias (*{event.anchor}) at {_where(event)}: {_ANCHORS_REFUSED}"
            )
        if isinstance(event, NodeEvent) and event.anchor is not None:
            raise DocumentError(
                f"{what} uses an anchor (&{event.anchor}) at {_where(event)}: {_ANCHORS_REFUSED}"
            )
        if not isinstance(event, CollectionStartEvent):
            return super().compose_node(parent, index)
        if self.depth >= self.bounds.max_depth:
            raise LimitExceeded(f"{what} nests deeper than {self.bounds.max_depth} levels at {_where(event)}")
        self.depth += 1
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


#: Characters of a YAML integer (digits, sign, ``_``, base prefix): 2^64 takes 20 decimal digits.
MAX_INT_CHARS: Final = 64


def _construct_int(loader: _Loader, node: Node) -> Any:
    """YAML 1.1 integers without the sexagesimal form (``1:0:0:...``, whose construction is
    quadratic in its length and makes integers past any digit limit) and at most
    ``MAX_INT_CHARS`` long."""
    text = str(node.value)
    what = loader.bounds.what
    if ":" in text:
        raise DocumentError(f"{what} has a sexagesimal integer at {_where(node)}: write it in decimal")
    if len(text) > MAX_INT_CHARS:
        raise LimitExceeded(
            f"{what} has an integer of {len(text)} characters at {_where(node)}; at most {MAX_INT_CHARS}"
        )
    assert isinstance(node, ScalarNode)  # NB: the int tag resolves on scalars only
    return loader.construct_yaml_int(node)


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)  # type: ignore[type-var]


def _size(data: str | bytes) -> int:
    if isinstance(data, bytes) or data.isascii():
        return len(data)
    return len(data.encode("utf-8", "surrogatepass"))


def _text(data: str | bytes, bounds: Bounds) -> str:
    """``data`` as text, refused when over ``bounds.max_bytes`` of UTF-8 (checked first)."""
    if len(data) > bounds.max_bytes or _size(data) > bounds.max_bytes:
        raise LimitExceeded(f"{bounds.what} is {_size(data)} bytes; at most {bounds.max_bytes} are allowed")
    if isinstance(data, str):
        return data
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DocumentError(f"{bounds.what} is not UTF-8: {error.reason} at byte {error.start}") from None


def _yaml_documents(data: str | bytes, bounds: Bounds) -> Iterator[Any]:
    loader = _Loader(_text(data, bounds), bounds)
    try:
        while loader.check_node():
            yield loader.construct_document(loader.get_node())
    except DocumentError:
        raise
    except (yaml.YAMLError, ValueError, TypeError, RecursionError) as error:
        raise DocumentError(f"{bounds.what} does not parse: {error}") from None
    finally:
        loader.dispose()


def load_yaml(data: str | bytes, bounds: Bounds) -> Any:
    """The single YAML document of ``data`` (``None`` when empty). Raises ``DocumentError``."""
    documents = _yaml_documents(data, bounds)
    first = next(documents, None)
    if next(documents, None) is not None:
        raise DocumentError(f"{bounds.what} holds more than one document")
    return first


def load_yaml_all(data: str | bytes, bounds: Bounds) -> list[Any]:
    """Every document of a YAML stream (the size bound is the whole stream's)."""
    return list(_yaml_documents(data, bounds))


# A JSON string: from a quote to the closing quote, escapes skipped; an unterminated one runs to
# the end. Possessive, and it matches at every quote, so the scan is linear in any input.
_JSON_STRING: Final = re.compile(r'"(?:[^"\\]++|\\.?)*+(?:"|\Z)', re.DOTALL)
_NOT_BRACKET: Final = re.compile(r"[^\[\]{}]++")
_STEP: Final = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """The deepest nesting of arrays and objects in JSON ``text``, in linear time, without
    parsing it (for invalid JSON: of its brackets outside strings)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    opening = brackets.count("[") + brackets.count("{")
    if opening <= 1:
        return opening
    return max(itertools.accumulate(map(_STEP.__getitem__, brackets)))


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def load_json(data: str | bytes, bounds: Bounds) -> Any:
    """The JSON value of ``data``: size, then depth (a pre-scan), then ``json.loads`` (no
    ``NaN``/``Infinity``). Raises ``DocumentError``."""
    text = _text(data, bounds)
    depth = json_depth(text)
    if depth > bounds.max_depth:
        raise LimitExceeded(f"{bounds.what} nests deeper than {bounds.max_depth} levels ({depth})")
    try:
        return json.loads(text, parse_constant=_no_constants)
    except (ValueError, RecursionError) as error:
        raise DocumentError(f"{bounds.what} is not valid JSON: {error}") from None


def check_tree(value: Any, bounds: Bounds) -> None:
    """``value`` (parsed already: dicts, lists, scalars) within ``bounds``: its depth (walked
    without recursion, stopping at the first collection too deep), then the size of its compact
    JSON. Raises ``DocumentError``."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, dict | list):
            if depth >= bounds.max_depth:
                raise LimitExceeded(f"{bounds.what} nests deeper than {bounds.max_depth} levels")
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
    try:
        size = len(json.dumps(value, separators=(",", ":"), allow_nan=False).encode())
    except (TypeError, ValueError) as error:
        raise DocumentError(f"{bounds.what} is not JSON: {error}") from None
    if size > bounds.max_bytes:
        raise LimitExceeded(f"{bounds.what} is {size} bytes of JSON; at most {bounds.max_bytes} are allowed")
