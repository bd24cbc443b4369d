"""Input that used to crash the gateway or leave OpenAI's shape: every /v1 answer is OpenAI's."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.api.conftest import MODEL
from tests.api.http_helpers import exchange, openai_error

JSON = [(b"content-type", b"application/json")]


def chat(**extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], **extra}


async def test_json_nested_5000_deep_is_a_400_not_a_500(
    world: dict[str, Any], gateway: Any
) -> None:
    body = b'{"model": "m", "messages": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    status, _, raw = await exchange("POST", "/v1/chat/completions", body, JSON, world["alice"])
    assert status == 400 and openai_error(raw)["code"] == "invalid_json"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        (b'{"model": "%s", "messages": [{"role": "user", "content": "a\\ud800b"}]}', "messages"),
        (
            b'{"model": "%s", "messages": [{"role": "user", "content": "hi"}], "user": "\\udfff"}',
            "user",
        ),
    ],
)
async def test_a_lone_surrogate_is_a_400_that_names_the_field(
    world: dict[str, Any], gateway: Any, body: bytes, param: str
) -> None:
    raw_body = body.replace(b"%s", MODEL.encode())
    status, _, raw = await exchange("POST", "/v1/chat/completions", raw_body, JSON, world["alice"])
    error = openai_error(raw)
    assert (status, error["param"], error["code"]) == (400, param, "invalid_unicode")


async def test_a_surrogate_pair_is_text_not_an_error(world: dict[str, Any], gateway: Any) -> None:
    body = json.dumps(chat(user="\U0001f600")).encode()  # escaped as \ud83d\ude00
    status, _, _ = await exchange("POST", "/v1/chat/completions", body, JSON, world["alice"])
    assert status == 200


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("POST", "/v1/audio/speech"),
        ("GET", "/v1/fine_tuning/jobs"),
        ("DELETE", "/v1/models"),
        ("GET", "/v1/"),
    ],
)
async def test_an_unknown_v1_path_is_a_404_in_openai_shape(
    world: dict[str, Any], method: str, path: str
) -> None:
    status, headers, raw = await exchange(method, path, b"{}", JSON, world["alice"])
    if method == "DELETE":
        assert status == 405 and headers[b"allow"] == b"GET, HEAD"
    else:
        assert status == 404 and openai_error(raw)["code"] == "unknown_url"
    assert headers[b"content-type"] == b"application/json"


async def test_a_model_the_key_may_use_is_served_as_a_model_object(
    world: dict[str, Any], gateway: Any
) -> None:
    status, _, raw = await exchange("GET", f"/v1/models/{MODEL}", key=world["alice"])
    assert status == 200
    assert json.loads(raw) == {
        "id": MODEL,
        "object": "model",
        "created": 0,
        "owned_by": "llm-server",
    }


async def test_an_unknown_or_forbidden_model_is_a_404_model_not_found(
    world: dict[str, Any], gateway: Any
) -> None:
    from asgiref.sync import sync_to_async

    from tenants.models import ApiKey

    status, _, raw = await exchange("GET", "/v1/models/org/nope", key=world["alice"])
    assert status == 404 and openai_error(raw)["code"] == "model_not_found"
    await sync_to_async(ApiKey.objects.update)(allowed_models="other-*")
    gateway.keys.clear()
    status, _, raw = await exchange("GET", f"/v1/models/{MODEL}", key=world["alice"])
    assert status == 404 and openai_error(raw)["code"] == "model_not_found"
    status, _, raw = await exchange("GET", f"/v1/models/{MODEL}", key="sk-wrong")
    assert status == 401 and openai_error(raw)["code"] == "invalid_api_key"


async def test_head_gets_the_status_and_headers_of_a_get_without_a_body(
    world: dict[str, Any], gateway: Any
) -> None:
    status, headers, raw = await exchange("HEAD", "/v1/models", key=world["alice"])
    _, _, got = await exchange("GET", "/v1/models", key=world["alice"])
    assert (status, raw, headers[b"content-length"]) == (200, b"", str(len(got)).encode())
    status, headers, raw = await exchange("HEAD", "/v1/chat/completions", key=world["alice"])
    assert (status, raw, headers[b"allow"]) == (405, b"", b"POST")


async def test_a_multipart_body_is_a_415_in_openai_shape(
    world: dict[str, Any], gateway: Any
) -> None:
    form = [(b"content-type", b"multipart/form-data; boundary=xyz")]
    body = b'--xyz\r\nContent-Disposition: form-data; name="model"\r\n\r\nm\r\n--xyz--\r\n'
    status, _, raw = await exchange("POST", "/v1/chat/completions", body, form, world["alice"])
    assert status == 415 and openai_error(raw)["code"] == "unsupported_media_type"


async def test_a_content_length_of_non_ascii_digits_is_not_a_500(
    world: dict[str, Any], gateway: Any
) -> None:
    """'²' is a digit to str.isdigit() but not to int() (found by the fuzzer): a declared
    length that is no number is ignored, the body's real size is what counts."""
    headers = [*JSON, (b"content-length", b"\xb2")]
    body = json.dumps(chat(max_tokens=2)).encode()
    status, _, _ = await exchange("POST", "/v1/chat/completions", body, headers, world["alice"])
    assert status == 200
