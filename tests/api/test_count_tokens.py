"""POST /v1/messages/count_tokens (Anthropic's `messages.count_tokens`): the key checked, the
count the backend's, nothing queued and nothing billed; refusals in Anthropic's shape."""

from __future__ import annotations

import json

import httpx

from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows

COUNT = {"model": MODEL, "messages": [{"role": "user", "content": "How many tokens?"}]}


async def test_anthropics_token_count_is_the_backends_and_is_not_billed(gateway, world):
    payload = json.dumps(COUNT).encode()
    status, headers, raw = await read_all(
        await start(world["alice"], payload, "/v1/messages/count_tokens")
    )
    async with httpx.AsyncClient(timeout=10) as client:
        direct = await client.post(f"{world['sim'].url}/v1/messages/count_tokens", json=COUNT)
    assert status == 200 and json.loads(raw) == direct.json()
    assert b"request-id" in headers
    await gateway.usage.flush_once()
    assert await usage_rows() == []


async def test_a_token_count_does_not_wait_behind_the_principals_running_chat(gateway, world):
    running = await start(world["alice"], chat_body(max_tokens=2000))
    assert (await running.receive_output(10))["status"] == 200
    payload = json.dumps(COUNT).encode()
    # The chat runs about 3 s; a count queued behind it would miss this timeout.
    status, _, _ = await read_all(
        await start(world["alice"], payload, "/v1/messages/count_tokens"), timeout=1.5
    )
    assert status == 200
    await running.send_input({"type": "http.disconnect"})


async def test_a_token_count_for_an_unknown_model_is_anthropics_not_found(gateway, world):
    payload = json.dumps({**COUNT, "model": "claude-none"}).encode()
    status, _, raw = await read_all(
        await start(world["alice"], payload, "/v1/messages/count_tokens")
    )
    assert status == 404 and json.loads(raw)["error"]["type"] == "not_found_error"


async def test_a_token_count_needs_a_key(gateway, world):
    payload = json.dumps(COUNT).encode()
    status, _, raw = await read_all(await start(None, payload, "/v1/messages/count_tokens"))
    assert status == 401 and json.loads(raw)["type"] == "error"


async def test_a_token_count_the_backend_refuses_is_its_refusal(gateway, world):
    payload = json.dumps({"model": MODEL}).encode()
    status, _, raw = await read_all(
        await start(world["alice"], payload, "/v1/messages/count_tokens")
    )
    assert status == 400 and json.loads(raw)["error"]["type"] == "invalid_request_error"
