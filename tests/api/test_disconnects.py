"""A client that goes away costs the backend nothing more, in every code path."""

from __future__ import annotations

import asyncio

from tests.api.conftest import chat_body, read_all, simulator_metric, start, usage_rows, wait_for


def depth(gw) -> int:
    return sum(q.depth for q in gw.snapshot().queues)


def in_flight(gw) -> int:
    return sum(b.in_flight for b in gw.snapshot().backends)


async def test_a_client_that_disconnects_while_queued_leaves_the_queue_unseen_by_the_backend(
    gateway, world
):
    first = await start(world["alice"], chat_body(max_tokens=200))
    head = await first.receive_output(10)
    assert head["status"] == 200
    seen_before = await simulator_metric(world["sim"], "simulator_requests_received_total")
    second = await start(world["alice"], chat_body(max_tokens=5))
    await wait_for(lambda: depth(gateway) == 1, 5)

    await second.send_input({"type": "http.disconnect"})
    await wait_for(lambda: depth(gateway) == 0, 5)
    await first.send_input({"type": "http.disconnect"})
    await wait_for(lambda: in_flight(gateway) == 0, 5)
    await asyncio.sleep(0.2)
    assert await simulator_metric(world["sim"], "vllm:num_requests_running") == 0
    assert await simulator_metric(world["sim"], "simulator_requests_received_total") == seen_before
    await gateway.usage.flush_once()
    statuses = [row["status"] for row in await usage_rows()]
    assert statuses == ["cancelled", "cancelled"]


async def test_a_client_that_disconnects_mid_stream_aborts_the_upstream_and_frees_the_slot(
    gateway, world
):
    comm = await start(world["alice"], chat_body(max_tokens=500))
    head = await comm.receive_output(10)
    assert head["status"] == 200
    chunks = [await comm.receive_output(10) for _ in range(2)]
    assert all(c["body"].startswith(b"data: ") for c in chunks)
    assert in_flight(gateway) == 1

    await comm.send_input({"type": "http.disconnect"})
    await wait_for(lambda: in_flight(gateway) == 0, 5)

    async def backend_idle() -> bool:
        return await simulator_metric(world["sim"], "vllm:num_requests_running") == 0

    for _ in range(50):
        if await backend_idle():
            break
        await asyncio.sleep(0.05)
    assert await backend_idle()
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert row["status"] == "cancelled" and row["first_token_at"] is not None


async def test_a_finished_stream_releases_its_slot_and_is_recorded_with_the_backends_usage(
    gateway, world
):
    status, headers, body = await read_all(await start(world["alice"], chat_body(max_tokens=6)))
    assert status == 200 and headers[b"content-type"].startswith(b"text/event-stream")
    assert body.endswith(b"data: [DONE]\n\n")
    assert b'"choices": []' not in body and b'"choices":[]' not in body
    assert in_flight(gateway) == 0
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert row["status"] == "ok" and row["completion_tokens"] == 6 and row["prompt_tokens"] > 0
    assert row["backend"] == "sim" and row["dispatched_at"] and row["first_token_at"]
