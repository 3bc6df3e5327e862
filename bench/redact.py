"""Redaction of hostile text (issue 23, ADR 0037): ``ops.redact`` against one plain scan of the
same bytes (the limit) and against the backtracking patterns it replaced (the "before"), side
by side in one run.

For each kind of adversarial input (word runs, near-misses of every secret shape and name rule,
separator runs, the densest real matches ...), interleaved A B C per round: the time to redact
``--kib`` (default 1 MiB) with ``Redactor``; one pass of ``bytes.find`` over the same encoded
text (what any scan costs); and the old patterns on ``--old-kib`` (default 1 KiB: they are
quadratic or worse, 4 KiB of one kind takes over 30 s and 1 MiB hours), reported per KiB beside
the new per-KiB figure. Medians of ``--rounds``.
``tests/unit/test_redact_linear.py`` uses the same inputs and the old patterns as its oracle.

    python -m bench.redact [--kib 1024] [--old-kib 1] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Callable

from bench import _common
from sparkrun_operator.ops.redact import REDACTED, Redactor

#: Known secret values given to the redactor (each kind also has its near-miss).
KNOWN = ("s3cr3t-Known-Value-42", "multi-line-secret-part-two", "pässwörd-ünïcode-9")

#: Fragments of adversarial text: near-misses of every shape and name rule, and matches.
FRAGMENTS = (
    "a",
    "A",
    "_",
    "-",
    ".",
    "=",
    ":",
    " ",
    "\t",
    '"',
    "'",
    "token",
    "tokens",
    "tokeniz",
    "auth",
    "author",
    "authen",
    "authorization",
    "password",
    "api_key",
    "x-api-key",
    "secret",
    "Bearer ",
    "Basic ",
    "bearer",
    "sk-",
    "hf_",
    "ghp_",
    "github_pat_",
    "xoxb-",
    "AKIA",
    "eyJ",
    "eyJ-",
    "abc",
    "0123456789",
    "[redacted",
    "s3cr3t-Known",
    "é",
    "\u00a0",
)


def adversarial(size: int) -> dict[str, str]:
    """Strings of about ``size`` characters, each one kind of hostile input."""

    def fill(unit: str) -> str:
        return unit * max(1, size // len(unit))

    return {
        "word run": "a" * size,
        "word run, then =": "A" * size + "=",
        "--x= and a word run": "--x=" + "A" * size,
        "secret words, no separator": fill("tokenauthpasswordsecret"),
        "near-miss names": fill("tokens=1 tokenizer: 2 author=3 authentic:4 "),
        "name, long blank, no separator": "token" + " " * size + "x",
        "quoted name, long blank": '"token"' + " " * size + '"',
        "separators": fill("=:"),
        "chained assignments": fill("a=b:"),
        "names and separators": fill("token=:"),
        "near-miss sk-": fill("sk-" + "a" * 15 + " "),
        "near-miss hf_": fill("hf_" + "a" * 15 + " "),
        "near-miss github_pat_": fill("github_pat_" + "a" * 15 + " "),
        "near-miss xoxb-": fill("xoxb-" + "a" * 9 + " "),
        "near-miss AKIA": fill("AKIA" + "A" * 17 + " "),
        "near-miss JWT": fill("eyJ" + "a" * 40 + "." + "b" * 3 + " "),
        "eyJ- run": fill("eyJ-"),
        "near-miss bearer": fill("Bearer abc "),
        "bearer, long blank": "Bearer" + " " * size + "!",
        "near-miss known value": fill(KNOWN[0][:-1] + " "),
        "dense assignments": fill("token=x "),
        "dense shapes": fill("sk-" + "a" * 16 + " "),
        "dense known values": fill(KNOWN[0] + " "),
        "no newline, mixed": "".join(FRAGMENTS[i * 7 % len(FRAGMENTS)] for i in range(size // 5))[:size],
    }


# -- before issue 23: Python's backtracking patterns ------------------------------------------------

OLD_WORDS = (
    r"pass(?:word|wd|phrase)|secret|token(?!s|iz)|api[-_.]?key|apikey|access[-_.]?key|private[-_.]?key"
    r"|auth(?:orization)?(?!or|en)|credentials?|cookie|session[-_.]?id|bearer|signature"
)
OLD_ASSIGNMENT = re.compile(
    rf"""[A-Za-z0-9_.-]*(?:{OLD_WORDS})[A-Za-z0-9_.-]*["']?"""
    r"""(?:\s*[=:]\s*|\s*["']?\s*:\s*["']?)["']?(?P<value>[^\s"',;&}\]]+)""",
    re.I,
)
OLD_SHAPES = (
    re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]{4,}"),
    re.compile(r"\beyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*"),
    re.compile(r"\b(?:hf|ghp|gho|ghs|ghu|github_pat)_[A-Za-z0-9_]{16,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{16,}"),
    re.compile(r"\bxox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b"),
)


def old_redact(text: str, known: tuple[str, ...]) -> str:
    """Redaction as it was before issue 23 (Python's backtracking ``re``): the oracle of the
    unit tests on short ASCII text, and this benchmark's "before"."""
    for value in sorted(known, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    for shape in OLD_SHAPES:
        text = shape.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}" if m.lastindex else REDACTED, text)

    def value(m: re.Match[str]) -> str:
        if m.group("value").startswith("[redacted"):
            return m.group(0)
        return m.group(0)[: m.start("value") - m.start(0)] + REDACTED

    return OLD_ASSIGNMENT.sub(value, text)


def _seconds(call: Callable[[], object]) -> float:
    started = time.perf_counter()
    call()
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.redact", description=__doc__)
    parser.add_argument("--kib", type=int, default=1024, help="size of each input for ops.redact")
    parser.add_argument("--old-kib", type=int, default=1, help="size of each input for the old patterns")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    inputs, old_inputs = adversarial(args.kib * 1024), adversarial(args.old_kib * 1024)
    redactor = Redactor(KNOWN)
    samples: dict[str, dict[str, list[float]]] = {
        kind: {"redact": [], "scan": [], "old": []} for kind in inputs
    }
    for _ in range(args.rounds):
        for kind, text in inputs.items():
            encoded = text.encode("utf-8", "surrogatepass")
            samples[kind]["redact"].append(_seconds(lambda t=text: redactor(t)))
            samples[kind]["scan"].append(_seconds(lambda e=encoded: e.find(b"\x00")))
            old = old_inputs[kind]
            samples[kind]["old"].append(_seconds(lambda o=old: old_redact(o, KNOWN)))
    rows = []
    print(
        f"{'input':32s} {'redact ms':>10s} {'scan ms':>8s} {'x scan':>7s} "
        f"{'old ms/KiB':>11s} {'redact ms/KiB':>14s}"
    )
    for kind, text in inputs.items():
        redact_s, scan_s, old_s = (_common.median(samples[kind][k]) for k in ("redact", "scan", "old"))
        row = {
            "input": kind,
            "kib": len(text) / 1024,
            "redact_ms": redact_s * 1000,
            "scan_ms": scan_s * 1000,
            "redact_over_scan": redact_s / scan_s if scan_s else None,
            "old_ms_per_kib": old_s * 1000 / (len(old_inputs[kind]) / 1024),
            "redact_ms_per_kib": redact_s * 1000 / (len(text) / 1024),
        }
        rows.append(row)
        ratio = f"{row['redact_over_scan']:7.0f}" if row["redact_over_scan"] else "      -"
        print(
            f"{kind:32s} {row['redact_ms']:10.1f} {row['scan_ms']:8.2f} {ratio} "
            f"{row['old_ms_per_kib']:11.3f} {row['redact_ms_per_kib']:14.4f}"
        )
    summary = {
        "max_redact_ms": max(r["redact_ms"] for r in rows),
        "all_kinds_redact_ms": sum(r["redact_ms"] for r in rows),
    }
    print(
        f"slowest kind {summary['max_redact_ms']:.1f} ms; all kinds {summary['all_kinds_redact_ms']:.1f} ms"
    )
    path = _common.write_json(
        "redact",
        {
            "inputs": vars(args),
            "environment": _common.environment(["google-re2"]),
            "rows": rows,
            "summary": summary,
            "raw": samples,
        },
    )
    print(f"wrote {path}")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
