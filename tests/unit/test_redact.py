"""``ops.redact``: what is redacted (by name, shape and known value) and what ordinary text keeps."""

from __future__ import annotations

import pytest

from sparkrun_operator.ops.redact import REDACTED, Redactor


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("HF_TOKEN=hf_abcdefghijklmnopqrstu", "hf_abcdefghijklmnopqrstu"),
        ('export API_KEY="abc123xyz"', "abc123xyz"),
        ("x-api-key: abcd1234", "abcd1234"),
        ('curl -H "Authorization: Bearer abc.def.ghi"', "abc.def.ghi"),
        ("Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
        ("  client(api_key='k-998877')", "k-998877"),
        ('{"apiKey": "zzz999"}', "zzz999"),
        ("password: hunter22", "hunter22"),
        ("saw sk-abcdefghijklmnopqrstuv in the output", "sk-abcdefghijklmnopqrstuv"),
        ("jwt eyJhbGciOi.eyJzdWIiOi.c2ln here", "eyJhbGciOi.eyJzdWIiOi.c2ln"),
        ("connecting with s3cr3t-known now", "s3cr3t-known"),
        ("refresh_token_v2=r3fr3sh", "r3fr3sh"),  # "token" then another name character
        ("X-AUTH: abcd1234", "abcd1234"),  # "auth" at the end of the name
        ("authorization_header=zz9", "zz9"),
        ("Bearer\tabc.def.ghi", "abc.def.ghi"),
    ],
)
def test_secrets_in_text_are_redacted(text: str, secret: str) -> None:
    out = Redactor(["s3cr3t-known"])(text)
    assert secret not in out
    assert REDACTED in out


@pytest.mark.parametrize(
    "text",
    [
        "max_tokens: 4096",
        "generated tokens=5",
        "tokenizer: qwen",
        "author: bob",
        "passed: 3 tests",
        "TOKENS=12",
        "Tokenizer_Mode: auto",
        "authentication: none",
        "co-author: alice",
    ],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert Redactor()(text) == text


def test_structures_by_key_and_by_name_value_pairs() -> None:
    record = {
        "env": [{"name": "HF_TOKEN", "value": "hf_x"}, {"name": "PATH", "value": "/bin"}],
        "apiKey": "k",
        "api_key": "k",
        "Authorization": "Bearer x",
        "tokens": 5,
        "password": 1234,
        "secretKeyRef": {"name": "creds", "key": "token"},
    }
    assert Redactor()(record) == {
        "env": [{"name": "HF_TOKEN", "value": REDACTED}, {"name": "PATH", "value": "/bin"}],
        "apiKey": REDACTED,
        "api_key": REDACTED,
        "Authorization": REDACTED,
        "tokens": 5,
        "password": REDACTED,
        "secretKeyRef": {"name": "creds", "key": "token"},
    }


def test_short_known_values_are_not_used() -> None:
    assert Redactor(["abc"])("abc abc") == "abc abc"
