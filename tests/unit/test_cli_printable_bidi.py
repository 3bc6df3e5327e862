"""``common.printable`` (every tenant string in the CLI's text output) against display spoofing
(review R2 of issue 33): besides the C0/C1 controls a terminal acts on, Unicode's bidirectional
formatting characters (RLO, LRI, ...) reorder what follows them on the line ("Trojan Source"),
so a tenant's message in a ``status`` table could show another row's text or flip the columns
after it. They are shown as ``?``; other non-ASCII text (names in any script, "…") is kept."""

from __future__ import annotations

import pytest

from sparkrun_operator.cli import common


@pytest.mark.parametrize(
    "char",
    [
        "\u202e",
        "\u202a",
        "\u202b",
        "\u202c",
        "\u202d",
        "\u2066",
        "\u2067",
        "\u2068",
        "\u2069",
        "\u200e",
        "\u200f",
        "\u061c",
    ],
)
def test_bidi_controls_are_replaced(char: str) -> None:
    assert common.printable(f"ready{char}deliaf") == "ready?deliaf"


def test_other_text_is_kept() -> None:
    text = "modèle 模型 ready… ✓"
    assert common.printable(text) == text
    assert common.printable({"m": ["a\x1b[2Jb", "\u202eX"]}) == {"m": ["a?[2Jb", "?X"]}
