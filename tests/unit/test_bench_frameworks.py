"""How framework, profile, bench_args and a scenario become a framework's command line, and the
result schema's pure parts (percentiles, error kinds, bounded raw output)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sparkrun_operator.runtime import benchframeworks as bf
from sparkrun_operator.runtime import benchparse

CRDS = Path(__file__).resolve().parents[2] / "crds"


def test_precedence_defaults_profile_bench_args_scenario() -> None:
    args = bf.merged_args(
        "llama-benchy",
        profile="quick",
        bench_args={"tg": [64], "prefix_caching": False, "runs": 9},
        scenario={"concurrency": 4, "requests": 10, "inputTokens": 256},
    )
    # pp: default 2048 -> profile 512 -> scenario 256; tg: profile 32 -> bench_args 64;
    # runs: profile 1 -> bench_args 9 -> scenario ceil(10 / 4)
    assert args["pp"] == [256]
    assert args["tg"] == [64]
    assert args["runs"] == 3
    assert args["concurrency"] == [4]
    assert args["enable_prefix_caching"] is False  # the alias maps onto the flag
    assert args["depth"] == [0]


def test_llama_benchy_command_line() -> None:
    args = {"pp": [64, 128], "enable_prefix_caching": True, "no_warmup": False, "runs": 2}
    call = bf.invocation(
        "llama-benchy",
        base_url="http://e/v1",
        model="org/m",
        served_name="m",
        tokenizer="/tok",
        args=args,
        workdir="/w",
    )
    argv = list(call.argv[1:])
    assert argv[:2] == ["-m", "llama_benchy"]
    assert argv[argv.index("--pp") + 1 : argv.index("--pp") + 3] == ["64", "128"]
    assert "--enable-prefix-caching" in argv
    assert "--no-warmup" not in argv
    assert argv[argv.index("--served-model-name") + 1] == "m"
    assert argv[argv.index("--tokenizer") + 1] == "/tok"
    assert argv[argv.index("--save-result") + 1] == "/w/result.json"


def test_tool_eval_bench_lists_and_csv() -> None:
    args = bf.merged_args(
        "tool-eval-bench",
        profile=None,
        bench_args={"scenarios": ["TC-01", "TC-02"], "depth": [1, 2]},
        scenario={"concurrency": 3},
    )
    assert args["parallel"] == 3
    call = bf.invocation(
        "tool-eval-bench",
        base_url="http://e/v1",
        model="org/m",
        served_name="m",
        tokenizer=None,
        args=args,
        workdir="/w",
    )
    argv = list(call.argv)
    i = argv.index("--scenarios")
    assert argv[i + 1 : i + 3] == ["TC-01", "TC-02"]
    assert argv[argv.index("--depth") + 1] == "1,2"
    assert argv[argv.index("--json-file") + 1] == "/w/result.json"


@pytest.mark.parametrize(
    ("framework", "profile", "bench_args", "message"),
    [
        ("locust", None, {}, "known: llama-benchy, tool-eval-bench"),
        ("llama-benchy", "nope", {}, "unknown benchmark profile 'nope'; known: long-context, quick"),
        ("llama-benchy", "tools-short", {}, "is for tool-eval-bench"),
        ("llama-benchy", None, {"base_url": "http://x"}, "the runner sets base_url"),
        ("tool-eval-bench", None, {"perf_only": True}, "without a JSON result: perf_only"),
    ],
)
def test_refusals_name_what_is_known(
    framework: str, profile: str | None, bench_args: dict[str, object], message: str
) -> None:
    with pytest.raises(bf.FrameworkError, match=message.replace("(", r"\(")):
        bf.merged_args(framework, profile=profile, bench_args=bench_args, scenario={})


def test_percentiles_and_error_kinds() -> None:
    assert benchparse.percentiles([]) is None
    assert benchparse.percentiles([float(v) for v in range(1, 101)]) == {
        "p50": 50.5,
        "p90": 90.1,
        "p99": 99.01,
    }
    assert benchparse.error_kind("HTTP 503: busy") == "http_503"
    assert benchparse.error_kind("Connection reset by peer") == "connection"
    assert benchparse.error_kind("TimeoutError()") == "timeout"
    assert benchparse.error_kind("boom") == "other"


def test_raw_output_is_bounded_to_its_tail() -> None:
    text = "x" * 40_000 + "THE END"
    kept = benchparse.bounded(text, 1024)
    assert len(kept.encode()) <= 1024
    assert kept.endswith("THE END")
    assert benchparse.bounded("short") == "short"


def test_printer_columns_of_inference_benchmark_name_status_fields() -> None:
    """``kubectl get ib`` shows the headline figures: every column's path exists in the schema."""
    crd = yaml.safe_load((CRDS / "inferencebenchmarks.sparkrun.dev.yaml").read_text())
    version = crd["spec"]["versions"][0]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert {"TTFT-ms", "ITL-ms", "Tok/s", "Req/s", "vs-prev", "Framework"} <= set(columns)
    schema = version["schema"]["openAPIV3Schema"]
    for name, path in columns.items():
        if "[" in path or path.startswith(".metadata"):
            continue  # the Complete condition, Age
        node = schema
        for part in path.strip(".").split("."):
            node = node["properties"][part]
        assert node["type"] in ("number", "string", "integer"), name
