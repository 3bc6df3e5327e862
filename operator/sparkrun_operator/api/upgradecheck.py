"""Would a new chart's CRDs reject the objects already stored? The pure half of
``sparkrun-k8s upgrade --check`` and of the chart's pre-upgrade hook (ADR 0046).

The apiserver re-validates a stored object against the new schema on its next write (a spec
edit, the operator's status patch, a finalizer removed), and refuses it there: a CRD upgrade
that tightens a bound or adds a CEL rule strands the objects it no longer admits. This module
evaluates each stored object offline the way that next write would be judged: the new CRD's
version of the object's ``apiVersion`` must exist and be served; the object is pruned of
fields the new schema no longer has (the apiserver drops them silently on read: reported, not
blocking), defaulted, validated against the OpenAPI schema and every CEL rule with
``api/admission.py``'s evaluator (ADR 0002, the one ``sparkrun-k8s validate`` uses), transition
rules (``oldSelf``) as an update of the object onto itself.

Every stored object is a tenant's: each one's findings are bounded (:data:`MESSAGE_CHARS`; a
schema error quotes the value it refuses), and an object the evaluator cannot walk (nested
beyond Python's recursion: stored before the depth bounds of ``api/bounds.py``) is a finding of
its own, never the end of the check.

Pure: CRD documents and objects in, :class:`Finding` values out. Reading the chart and the
cluster is the caller's (``cli/upgrade.py``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, replace
from typing import Any, Final, Literal

from sparkrun_operator import safeload
from sparkrun_operator.api.admission import validate
from sparkrun_operator.api.clip import ELLIPSIS
from sparkrun_operator.api.meta import GROUP
from sparkrun_operator.api.resources import KINDS_BY_NAME

#: What went wrong: ``rejected`` (schema or CEL), ``version`` (the object's version is gone or
#: unserved), ``unreadable`` (the object or its kind could not be read), ``pruned`` (a field
#: the new schema drops on the next write: data lost, not refused).
Problem = Literal["rejected", "version", "unreadable", "pruned"]
#: Problems that stop an upgrade (``pruned`` is a warning).
BLOCKING: Final = frozenset({"rejected", "version", "unreadable"})
#: The chart's CRD files (all of them together are about 300 KB today).
CRD_FILES: Final = safeload.Bounds("CRD YAML", 4 * safeload.MIB, 64)
#: A finding's message (and path) at most, in characters.
MESSAGE_CHARS: Final = 1024
#: A CEL failure's message carries the rule's evaluation error after this marker.
_RULE_ERROR: Final = " (rule error:"


@dataclass(frozen=True)
class Finding:
    """One object the new CRDs would not take as it is, and why."""

    kind: str
    namespace: str
    name: str
    problem: Problem
    #: the field path the apiserver names (``spec.model``), ``apiVersion``, or ``""``
    path: str
    #: the CEL rule, ``schema`` (OpenAPI), ``versions`` or ``read``
    rule: str
    message: str

    @property
    def blocking(self) -> bool:
        return self.problem in BLOCKING

    @property
    def object(self) -> str:
        """``Kind namespace/name`` (``Kind name`` when cluster-scoped)."""
        where = f"{self.namespace}/{self.name}" if self.namespace else self.name
        return f"{self.kind} {where}".rstrip()

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "object": self.object, "blocking": self.blocking}


def strip_template(text: str, source: str) -> str:
    """A chart CRD template as plain YAML: each line that is one Go template action
    (``{{- if .Values.crds.install }}``, ``{{- include ... }}``, ``{{- end }}``) is dropped; any
    other ``{{`` is refused (``ValueError``): such a file needs ``helm template``.

    The chart's CRD templates only wrap the generated CRD (install switch, keep annotation,
    labels), so the schema, all that the check reads, is the same rendered or not."""
    kept: list[str] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("{{") and stripped.endswith("}}") and stripped.count("{{") == 1:
            continue
        if "{{" in line:
            raise ValueError(f"{source}:{number}: a template expression inside a line; render the chart")
        kept.append(line)
    return "\n".join(kept) + "\n"


def crds_of(files: Iterable[tuple[str, str]]) -> dict[str, dict[str, Any]]:
    """kind -> CRD document of each sparkrun.dev CRD among ``files`` ((source, text) pairs,
    templates or rendered YAML); other documents are ignored. ``ValueError`` on a file that
    cannot be read within :data:`CRD_FILES` or a kind defined twice."""
    out: dict[str, dict[str, Any]] = {}
    for source, text in files:
        try:
            docs = safeload.load_yaml_all(strip_template(text, source), CRD_FILES)
        except safeload.DocumentError as error:
            raise ValueError(f"{source}: {error}") from error
        for doc in docs:
            if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc.get("spec") or {}
            kind = (spec.get("names") or {}).get("kind")
            if spec.get("group") != GROUP or not isinstance(kind, str):
                continue
            if kind in out:
                raise ValueError(f"{source}: {kind} is defined twice")
            out[kind] = doc
    return out


def _rules(schema: Any) -> Iterator[tuple[str, str]]:
    """(message, rule) of every CEL rule in a schema."""
    if isinstance(schema, dict):
        for entry in schema.get("x-kubernetes-validations") or []:
            yield str(entry.get("message") or entry.get("rule")), str(entry.get("rule"))
        for key, child in schema.items():
            if key != "x-kubernetes-validations":
                yield from _rules(child)
    elif isinstance(schema, list):
        for child in schema:
            yield from _rules(child)


def prune(schema: dict[str, Any], value: Any, path: str = "") -> tuple[Any, list[str]]:
    """``value`` without the fields ``schema`` does not declare (as the apiserver prunes on
    read; ``x-kubernetes-preserve-unknown-fields`` keeps a subtree), and the paths dropped.
    At the root, ``apiVersion``, ``kind`` and ``metadata`` are the apiserver's own."""
    dropped: list[str] = []
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return value, dropped
    if isinstance(value, dict) and "properties" in schema:
        out: dict[str, Any] = {}
        for key, child in value.items():
            where = f"{path}.{key}" if path else key
            if not path and key in ("apiVersion", "kind", "metadata"):
                out[key] = child
            elif key in schema["properties"]:
                out[key], more = prune(schema["properties"][key], child, where)
                dropped += more
            else:
                dropped.append(where)
        return out, dropped
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        out = {}
        for key, child in value.items():
            out[key], more = prune(schema["additionalProperties"], child, f"{path}.{key}")
            dropped += more
        return out, dropped
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        items = []
        for i, child in enumerate(value):
            item, more = prune(schema["items"], child, f"{path}[{i}]")
            items.append(item)
            dropped += more
        return items, dropped
    return value, dropped


def _identity(obj: Any) -> tuple[str, str, str]:
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    meta = meta if isinstance(meta, dict) else {}
    kind = obj.get("kind") if isinstance(obj, dict) else None
    return str(kind or "?"), str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _served_version(
    crd: dict[str, Any] | None, version: str, ident: tuple[str, str, str]
) -> tuple[dict[str, Any] | None, Finding | None]:
    """The new CRD's entry for ``version``, or the finding that says why there is none."""
    kind, namespace, name = ident
    if crd is None:
        message = f"the new chart has no CustomResourceDefinition for {kind}: its objects cannot be read"
        return None, Finding(kind, namespace, name, "version", "kind", "versions", message)
    versions = [v for v in (crd.get("spec") or {}).get("versions") or [] if isinstance(v, dict)]
    entry = next((v for v in versions if v.get("name") == version), None)
    names = ", ".join(str(v.get("name")) for v in versions) or "none"
    if entry is None:
        message = (
            f"version {version} is not in the new CRD (its versions: {names}): the apiserver refuses "
            "a CRD update that drops a version in status.storedVersions, and cannot read these objects"
        )
    elif not entry.get("served", False):
        message = f"version {version} is no longer served by the new CRD: these objects cannot be read"
    else:
        return entry, None
    return None, Finding(kind, namespace, name, "version", "apiVersion", "versions", message)


def check_object(crds: dict[str, dict[str, Any]], obj: Any) -> list[Finding]:
    """Every finding for one stored object against the new CRDs (``crds``: kind -> CRD), each
    message and path clipped to :data:`MESSAGE_CHARS` (a path names the keys of maps)."""
    try:
        findings = _check_object(crds, obj)
    except RecursionError:
        kind, namespace, name = _identity(obj)
        message = (
            "nested too deeply for the check to evaluate: the check cannot tell whether the new CRDs take it"
        )
        return [Finding(kind, namespace, name, "unreadable", "", "read", message)]
    return [replace(f, message=_middle(f.message), path=_middle(f.path)) for f in findings]


def _middle(message: str) -> str:
    """``message`` within :data:`MESSAGE_CHARS`, cut in the middle: a schema error quotes the
    value first and says what is wrong with it last (``'...' is too long``)."""
    if len(message) <= MESSAGE_CHARS:
        return message
    half = (MESSAGE_CHARS - len(ELLIPSIS)) // 2
    return message[:half] + ELLIPSIS + message[-half:]


def _check_object(crds: dict[str, dict[str, Any]], obj: Any) -> list[Finding]:
    ident = _identity(obj)
    kind, namespace, name = ident
    api_version = obj.get("apiVersion") if isinstance(obj, dict) else None
    group, _, version = str(api_version or "").partition("/")
    if not name or group != GROUP or kind not in KINDS_BY_NAME:
        message = f"not a readable {GROUP} object (apiVersion={api_version!r}, kind={kind!r})"
        return [Finding(kind, namespace, name, "unreadable", "", "read", message)]
    entry, problem = _served_version(crds.get(kind), version, ident)
    if problem is not None or entry is None:
        return [problem] if problem is not None else []
    schema = ((entry.get("schema") or {}).get("openAPIV3Schema")) or {}
    pruned, dropped = prune(schema, copy.deepcopy(obj))
    findings = [
        Finding(
            kind, namespace, name, "pruned", path, "schema",
            "field not in the new schema: the apiserver drops it on the next write",
        )
        for path in dropped
    ]  # fmt: skip
    one_version = {**crds[kind], "spec": {**crds[kind]["spec"], "versions": [entry]}}
    rules = dict(_rules(schema))
    for error in validate(pruned, old=pruned, crds={kind: one_version}):
        rule = rules.get(error.message.split(_RULE_ERROR, 1)[0], "schema")
        # a CEL rule's finding names the rule; a schema error says it in the apiserver's words
        message = error.message if rule != "schema" else (error.cause or error.message)
        findings.append(Finding(kind, namespace, name, "rejected", error.path, rule, message))
    return findings


def check(crds: dict[str, dict[str, Any]], objects: Iterable[Any]) -> list[Finding]:
    """Every finding for ``objects`` against ``crds``, in the order given."""
    return [finding for obj in objects for finding in check_object(crds, obj)]
