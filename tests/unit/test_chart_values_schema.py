"""hack/chart-values-schema.py: values.schema.json from values.yaml's `# --` comments and
`# @keyword:` lines; checked here with the `jsonschema` library (tests/deploy/test_chart_schema.py
checks it with the real helm)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import jsonschema
import pytest

from tests import hack_script

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "sparkrun-operator"


def _tool() -> ModuleType:
    return hack_script.load("chart-values-schema.py", "chart_values_schema")


def _schema(tmp_path: Path, text: str) -> dict[str, Any]:
    values = tmp_path / "values.yaml"
    values.write_text(text)
    out: dict[str, Any] = _tool().schema(values)
    return out


def _errors(schema: dict[str, Any], values: dict[str, Any]) -> list[str]:
    return [error.message for error in jsonschema.Draft7Validator(schema).iter_errors(values)]


SAMPLE = """\
# -- Labels of everything.
commonLabels: {}
image:
  # -- Tag; empty: appVersion.
  tag: ""
  # -- Pull policy.
  # @enum: [Always, IfNotPresent, Never]
  pullPolicy: IfNotPresent
gateway:
  # -- Replicas.
  # @minimum: 0
  replicas: 2
  # -- (int or string) At most this many down.
  # @pattern: '^[0-9]+%$'
  maxUnavailable: 1
  # -- A whole map.
  resources:
    limits: {memory: 1Gi}
  # -- Extra arguments.
  # @items: {type: string}
  extraArgs: []
  # -- A ratio.
  ratio: 0.5
  # -- (string) Anything, nullable.
  note: null
  # -- Untyped null.
  free: null
"""


def test_the_committed_schema_is_current() -> None:
    tool = _tool()
    written = (CHART / "values.schema.json").read_text()
    assert tool.dump(tool.schema(CHART / "values.yaml")) == written
    jsonschema.Draft7Validator.check_schema(json.loads(written))


def test_keys_documented_one_by_one_close_their_map(tmp_path: Path) -> None:
    schema = _schema(tmp_path, SAMPLE)
    assert schema["$schema"] == "http://json-schema.org/draft-07/schema#"
    assert schema["additionalProperties"] is False
    assert schema["properties"]["image"]["additionalProperties"] is False
    assert _errors(schema, {"noSuchValue": 1}) == [
        "Additional properties are not allowed ('noSuchValue' was unexpected)"
    ]
    assert _errors(schema, {"gateway": {"replicass": 2}})
    # documented as a whole: open, whatever is inside
    assert _errors(schema, {"commonLabels": {"team": "a"}, "gateway": {"resources": {"claims": []}}}) == []


def test_types_come_from_defaults_and_overrides(tmp_path: Path) -> None:
    props = _schema(tmp_path, SAMPLE)["properties"]
    gateway = props["gateway"]["properties"]
    assert props["commonLabels"]["type"] == "object"
    assert props["image"]["properties"]["tag"]["type"] == "string"
    assert gateway["replicas"]["type"] == "integer"
    assert gateway["maxUnavailable"]["type"] == ["integer", "string"]
    assert gateway["resources"]["type"] == "object"
    assert gateway["extraArgs"]["type"] == "array"
    assert gateway["ratio"]["type"] == "number"
    assert gateway["note"]["type"] == ["string", "null"]
    assert "type" not in gateway["free"]
    assert gateway["replicas"]["description"] == "Replicas."
    assert gateway["maxUnavailable"]["description"] == "At most this many down."


def test_annotations_become_keywords_and_refuse_values(tmp_path: Path) -> None:
    schema = _schema(tmp_path, SAMPLE)
    gateway = schema["properties"]["gateway"]["properties"]
    assert schema["properties"]["image"]["properties"]["pullPolicy"]["enum"] == [
        "Always",
        "IfNotPresent",
        "Never",
    ]
    assert gateway["maxUnavailable"]["pattern"] == "^[0-9]+%$"
    assert gateway["extraArgs"]["items"] == {"type": "string"}
    assert _errors(schema, {"image": {"pullPolicy": "Sometimes"}})
    assert _errors(schema, {"gateway": {"replicas": -1}})
    assert _errors(schema, {"gateway": {"replicas": "2"}})
    assert _errors(schema, {"gateway": {"maxUnavailable": "half"}})
    assert _errors(schema, {"gateway": {"extraArgs": [1]}})
    assert _errors(schema, {"gateway": {"maxUnavailable": "50%", "extraArgs": ["--x"]}}) == []


def test_annotations_stay_out_of_the_readme_table(tmp_path: Path) -> None:
    values = tmp_path / "values.yaml"
    values.write_text(SAMPLE)
    table = _tool()._table_module()
    rows = {row.path: row for row in table.rows(values)}
    assert rows["image.pullPolicy"].description == "Pull policy."
    assert rows["gateway.maxUnavailable"].type == "int or string"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("# -- A.\n# @colour: red\na: 1\n", r"a: `# @colour:` is not one of"),
        ("# -- A.\n# @enum [x]\na: x\n", r"a: an annotation is `# @keyword: <YAML value>`"),
        ("# -- A.\n# @enum: [x, y]\na: z\n", r"the default of a breaks its schema"),
        ("# -- (integer) A.\na: 1\n", r"a: unknown type 'integer'"),
        ("b:\n  # -- A.\n  a: 1\n  c: {}\n", r"keys without a `# --` comment: b\.c"),
        ("# -- B.\n# @minimum: 1\nb:\n  # -- A.\n  a: 1\n", r"b: a map documented key by key takes no"),
    ],
)
def test_bad_comments_fail_naming_the_key(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SystemExit, match=message):
        _schema(tmp_path, text)
