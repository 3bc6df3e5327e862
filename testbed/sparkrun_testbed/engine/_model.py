"""The deterministic "model": tokens, words, embeddings and tool-call decisions."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Iterator
from typing import Any

from ._http import BadRequest

_TOKEN_RE = re.compile(r"\w+|[^\w\s]")
_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which but "
    "have an they you were her she there one all we their can has been if more when will would who so "
    "no model token stream fox river stone light cloud garden lantern orbit signal harbor meadow "
    "copper velvet ember quartz willow falcon prism tide"
)
_VOCABULARY = tuple(_WORDS.split())


def count_tokens(text: str) -> int:
    """The stand-in's tokenizer: one token per word or punctuation mark (at least one)."""
    return max(1, len(_TOKEN_RE.findall(text)))


def generate_words(prompt: str, n: int, *, seed: int) -> list[str]:
    """``n`` output tokens for ``prompt``; the same inputs always give the same tokens."""
    digest = hashlib.sha256(f"{seed}\x00{prompt}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    words = [rng.choice(_VOCABULARY) for _ in range(n)]
    return [w if i == 0 else " " + w for i, w in enumerate(words)]


def embed(text: str, dim: int, *, seed: int) -> list[float]:
    """A deterministic unit vector for ``text``."""
    digest = hashlib.sha256(f"{seed}\x00embed\x00{text}".encode()).digest()
    rng = random.Random(int.from_bytes(digest[:8], "big"))
    vec = [rng.gauss(0.0, 1.0) for _ in range(dim)]
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


def content_text(content: Any) -> str:
    """Text of an OpenAI message ``content`` (a string or a list of parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, dict):
                text = part.get("text")
                if isinstance(text, str):
                    out.append(text)
            elif isinstance(part, str):
                out.append(part)
        return "\n".join(out)
    return str(content)


def chat_prompt(messages: list[Any]) -> str:
    lines = []
    for msg in messages:
        if not isinstance(msg, dict):
            raise BadRequest("Each message must be an object.")
        role = msg.get("role")
        if not isinstance(role, str):
            raise BadRequest("Each message needs a role.")
        text = content_text(msg.get("content"))
        for call in msg.get("tool_calls") or []:
            fn = call.get("function", {}) if isinstance(call, dict) else {}
            text += f" {fn.get('name', '')}({fn.get('arguments', '')})"
        lines.append(f"{role}: {text}")
    return "\n".join(lines)


def _schema_value(schema: Any, name: str, words: Iterator[str]) -> Any:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(schema, dict) and isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind == "integer":
        return len(name)
    if kind == "number":
        return len(name) / 2
    if kind == "boolean":
        return True
    if kind == "array":
        return [_schema_value(schema.get("items", {}), name, words)]
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _schema_value(v, k, words) for k, v in props.items()}
    return next(words).strip()


def tool_call(tools: list[Any], tool_choice: Any, prompt: str, seed: int) -> tuple[str, str] | None:
    """The (name, JSON arguments) the stand-in "decides" to call, or ``None`` to answer in text."""
    if not tools or tool_choice == "none":
        return None
    functions: list[dict[str, Any]] = [
        t["function"]
        for t in tools
        if isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
    ]
    if not functions:
        return None
    chosen = functions[0]
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        chosen = next((f for f in functions if f["name"] == wanted), chosen)
    words = iter(generate_words(prompt, 64, seed=seed))
    params = chosen.get("parameters") or {"type": "object", "properties": {}}
    args = _schema_value({**params, "type": "object"}, chosen["name"], words)
    return chosen["name"], json.dumps(args, separators=(", ", ": "))
