"""Property: whatever body and headers a client sends under /v1, no 5xx, and every error is in
OpenAI's shape. Bounded (200 examples) so it runs in the suite."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.api.conftest import MODEL
from tests.api.http_helpers import exchange, openai_error

# Text with lone surrogates, NUL, controls and astral characters, which JSON can all carry.
text = st.text(st.characters(codec=None, exclude_categories=()), max_size=20)
scalars = st.none() | st.booleans() | st.integers() | st.floats() | text
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(text, inner, max_size=3),
    max_leaves=10,
)
FIELDS = [
    "model",
    "messages",
    "prompt",
    "stream",
    "stream_options",
    "max_tokens",
    "user",
    "n",
    "temperature",
    "top_p",
    "stop",
    "service_tier",
    "max_completion_tokens",
    "priority",
]
message = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "system", "assistant", "wizard"]) | values,
        "content": text | values,
    }
)
chat = st.fixed_dictionaries(
    {"model": st.just(MODEL) | values, "messages": st.lists(message, max_size=2) | values},
    optional={name: values for name in FIELDS[2:]},
)


def encode(data: Any) -> bytes:
    # ensure_ascii escapes lone surrogates as \udXXX, as a hostile client's JSON would.
    return json.dumps(data).encode()


bodies = (
    chat.map(encode)
    | st.dictionaries(st.sampled_from(FIELDS) | text, values, max_size=5).map(encode)
    | st.binary(max_size=64)
    | st.integers(1, 3000).map(lambda depth: b"[" * depth + b"]" * depth)
    | st.integers(1, 3000).map(lambda depth: b'{"model":' + b'{"a":' * depth + b"1" + b"}" * depth)
)
header_names = st.sampled_from(
    [b"content-type", b"content-length", b"authorization", b"accept", b"x-request-id"]
) | st.binary(min_size=1, max_size=12).map(bytes.lower)
headers = st.lists(st.tuples(header_names, st.binary(max_size=40)), max_size=6)
paths = st.sampled_from(
    [
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/models",
        f"/v1/models/{MODEL}",
        "/v1/embeddings",
        "/v1/models/x/y",
    ]
)
methods = st.sampled_from(["POST", "GET", "HEAD", "PUT", "DELETE", "OPTIONS"])


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(method=methods, path=paths, body=bodies, extra=headers, good_key=st.booleans())
async def test_no_request_under_v1_gets_a_5xx_or_leaves_openai_shape(
    world: dict[str, Any],
    gateway: Any,
    method: str,
    path: str,
    body: bytes,
    extra: list[tuple[bytes, bytes]],
    good_key: bool,
) -> None:
    sent = [(b"content-type", b"application/json"), *extra]
    key = world["alice"] if good_key else None
    status, response_headers, raw = await exchange(method, path, body, sent, key)
    assert status < 500, raw
    if status >= 400 and method != "HEAD":
        openai_error(raw)
        assert response_headers[b"content-type"] == b"application/json"
