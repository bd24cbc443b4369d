"""An upload to /v1/files never gets a 5xx: every line is parsed within bounds (its size, its
nesting, its encoding), and a line out of bounds is a 400 in OpenAI's shape that names it.
The fuzz at the end is bounded (150 files) so it runs in the suite."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmserver.batches.validation import MAX_LINE_DEPTH
from tests.api.batch_helpers import chat_line, jsonl, upload
from tests.api.http_helpers import openai_error

MAX_BODY = 64 * 1024
GOOD = json.dumps(chat_line("fine")).encode()


@pytest.fixture(autouse=True)
def files_dir(world: dict[str, Any], settings: Any, tmp_path: Path) -> Path:
    where = tmp_path / "files"
    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "FILES_DIR": str(where),
        "FILES_MAX_BYTES": 256 * 1024,
        "MAX_BODY_BYTES": MAX_BODY,
    }
    return where


def nested(depth: int) -> bytes:
    """An object line whose body nests `depth` arrays deep."""
    return b'{"custom_id": "deep", "body": ' + b"[" * depth + b"]" * depth + b"}"


async def refusal(key: str, content: bytes) -> str:
    """The message of the upload's 400, which must be OpenAI's invalid file error."""
    status, body = await upload(key, content)
    assert status == 400, body
    error = openai_error(json.dumps(body).encode())
    assert (error["param"], error["code"]) == ("file", "invalid_file")
    return str(error["message"])


async def test_a_line_nested_ten_thousand_deep_is_a_400_naming_the_line(gateway, world):
    message = await refusal(world["alice"], GOOD + b"\n" + nested(10_000) + b"\n")
    assert f"line 2: it nests deeper than {MAX_LINE_DEPTH} levels" in message


async def test_a_line_nested_past_the_bound_but_within_the_parser_is_refused(gateway, world):
    message = await refusal(world["alice"], nested(MAX_LINE_DEPTH + 1))
    assert f"line 1: it nests deeper than {MAX_LINE_DEPTH} levels" in message


async def test_a_line_nested_to_the_bound_is_taken(gateway, world):
    # The object itself is one level; its body takes the rest.
    status, body = await upload(world["alice"], nested(MAX_LINE_DEPTH - 1))
    assert status == 200, body


async def test_a_line_longer_than_a_request_body_is_a_400_naming_the_line(gateway, world):
    line = json.dumps(chat_line("x" * MAX_BODY)).encode()
    message = await refusal(world["alice"], GOOD + b"\n\n" + line + b"\n")
    assert f"line 3: it is longer than {MAX_BODY} bytes" in message


async def test_a_line_that_is_not_utf8_is_a_400_naming_the_line(gateway, world):
    latin1 = json.dumps(chat_line("café"), ensure_ascii=False).encode("latin-1")
    message = await refusal(world["alice"], latin1)
    assert "line 1: it is not UTF-8 text" in message


async def test_a_line_in_utf16_is_refused_rather_than_guessed(gateway, world):
    message = await refusal(world["alice"], json.dumps(chat_line("a")).encode("utf-16"))
    assert "line 1:" in message


async def test_a_line_with_half_a_surrogate_pair_is_a_400_naming_the_line(gateway, world):
    message = await refusal(world["alice"], jsonl([chat_line("a"), chat_line("\ud800")]))
    assert "line 2: it holds half a surrogate pair" in message


async def test_a_line_starting_with_a_byte_order_mark_is_taken(gateway, world):
    status, body = await upload(world["alice"], b"\xef\xbb\xbf" + GOOD)
    assert status == 200, body


depths = st.integers(1, 20_000)
odd_lines = (
    depths.map(lambda d: b"[" * d + b"]" * d)
    | depths.map(lambda d: b'{"a":' * d + b"1" + b"}" * d)
    | depths.map(nested)
    | depths.map(lambda d: b"[" * d)  # never closed
    | st.integers(MAX_BODY - 16, MAX_BODY + 16).map(lambda n: b'{"a": "' + b"x" * n + b'"}')
    | st.binary(max_size=64)
    | st.text(max_size=40).map(lambda t: json.dumps({"t": t}).encode("utf-16"))
    | st.text(max_size=40).map(lambda t: json.dumps({"t": t}, ensure_ascii=False).encode())
    | st.sampled_from([b'{"a": "\\udc00"}', b'{"\\ud83d": 1}', b"\xed\xa0\x80", b"\x00", b"\xff"])
    | st.just(GOOD)
)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(lines=st.lists(odd_lines, min_size=1, max_size=4), joiner=st.sampled_from([b"\n", b"\r\n"]))
async def test_no_upload_gets_a_5xx_and_every_refusal_is_openai_shaped(
    world: dict[str, Any], gateway: Any, lines: list[bytes], joiner: bytes
) -> None:
    status, body = await upload(world["alice"], joiner.join(lines))
    assert status in (200, 400, 413), body
    if status != 200:
        openai_error(json.dumps(body).encode())
