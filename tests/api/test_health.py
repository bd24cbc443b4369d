"""GET /health as vLLM answers it and load tools expect: an empty 200 while the gateway serves,
503 in OpenAI's error shape once it drains."""

from __future__ import annotations

from typing import Any

from tests.api.http_helpers import exchange, openai_error


async def test_health_is_an_empty_200_while_the_gateway_serves(gateway: Any) -> None:
    status, headers, body = await exchange("GET", "/health")
    assert (status, body) == (200, b"")
    assert headers[b"content-length"] == b"0"


async def test_health_answers_head_as_it_answers_get(gateway: Any) -> None:
    status, _, body = await exchange("HEAD", "/health")
    assert (status, body) == (200, b"")


async def test_health_is_a_503_while_the_gateway_drains(gateway: Any) -> None:
    await gateway.drain(0)
    status, headers, body = await exchange("GET", "/health")
    assert status == 503
    assert headers[b"retry-after"] == b"5"
    assert openai_error(body)["code"] == "shutting_down"
