"""Queue limits on the HTTP surface: full queues are 429 with Retry-After, stale jobs 503."""

from __future__ import annotations

import asyncio
import json

from asgiref.sync import sync_to_async

from tests.api.conftest import chat_body, read_all, start, usage_rows, wait_for


def depth(gw) -> int:
    return sum(q.depth for q in gw.snapshot().queues)


def in_flight(gw) -> int:
    return sum(b.in_flight for b in gw.snapshot().backends)


async def test_a_full_per_user_queue_is_a_429_with_retry_after(gateway, world):
    running = await start(world["alice"], chat_body(max_tokens=300))
    assert (await running.receive_output(10))["status"] == 200
    queued = [await start(world["alice"], chat_body()) for _ in range(2)]
    await wait_for(lambda: depth(gateway) == 2, 5)

    status, headers, body = await read_all(await start(world["alice"], chat_body()))
    assert status == 429 and int(headers[b"retry-after"]) >= 1
    error = json.loads(body)["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "queue_full")
    for comm in [running, *queued]:
        await comm.send_input({"type": "http.disconnect"})
    await wait_for(lambda: depth(gateway) == 0, 5)
    await gateway.usage.flush_once()
    rejected = [r for r in await usage_rows() if r["status"] == "rejected"]
    assert [r["error_type"] for r in rejected] == ["queue_full"]


async def test_a_job_that_waits_past_the_tier_timeout_is_a_503(gateway, world):
    tier = world["tier"]
    tier.queue_timeout_seconds = 0.3
    await sync_to_async(tier.save)()
    gateway.keys.clear()
    running = await start(world["alice"], chat_body(max_tokens=300))
    assert (await running.receive_output(10))["status"] == 200

    status, headers, body = await read_all(await start(world["alice"], chat_body()))
    assert status == 503 and headers[b"retry-after"]
    assert json.loads(body)["error"]["code"] == "queue_timeout"
    await running.send_input({"type": "http.disconnect"})


async def test_a_request_behind_its_users_own_moving_queue_is_not_timed_out(gateway, world):
    """The tier's timeout is for a queue that does not move: each of Alice's requests is
    dispatched within it of the one before, though the last waits longer than it in all."""
    tier = world["tier"]
    tier.queue_timeout_seconds = 1.0
    await sync_to_async(tier.save)()
    gateway.keys.clear()
    first = await start(world["alice"], chat_body(max_tokens=3000))  # 5 s and more
    await wait_for(lambda: in_flight(gateway) == 1, 5)
    second = await start(world["alice"], chat_body(max_tokens=3000))
    await wait_for(lambda: depth(gateway) == 1, 5)
    third = await start(world["alice"], chat_body(max_tokens=5, stream=False))
    await wait_for(lambda: depth(gateway) == 2, 5)
    for running in (first, second):
        await asyncio.sleep(0.7)
        await running.send_input({"type": "http.disconnect"})
    status, _, body = await read_all(third)
    assert status == 200, body


async def test_a_bad_key_is_a_401_in_openais_shape(gateway, world):
    status, _, body = await read_all(await start("sk-llms-" + "x" * 40, chat_body()))
    assert status == 401
    assert json.loads(body)["error"]["code"] == "invalid_api_key"


async def test_an_unknown_model_is_a_404_and_is_recorded_as_rejected(gateway, world):
    body = json.dumps({"model": "nope", "messages": [{"role": "user", "content": "x"}]}).encode()
    status, _, raw = await read_all(await start(world["alice"], body))
    assert status == 404 and json.loads(raw)["error"]["code"] == "model_not_found"
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["error_type"]) == ("rejected", "model_not_found")


async def test_a_model_name_no_route_serves_is_recorded_as_unknown(gateway, world):
    body = json.dumps({"model": "made-up-123", "messages": [{"role": "user", "content": "x"}]})
    assert (await read_all(await start(world["alice"], body.encode())))[0] == 404
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert row["model"] == "unknown"
