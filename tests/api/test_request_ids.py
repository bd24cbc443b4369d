"""One id per request everywhere (body, chunks, `X-Request-Id`, usage row), and an honest
`X-Queue-Time-Ms`: the time from admission to dispatch, not to the first byte."""

from __future__ import annotations

import json
import time

from tests.api.conftest import chat_body, read_all, start, usage_rows, wait_for


def chunks(body: bytes) -> list[dict]:
    events = [e[len(b"data: ") :] for e in body.split(b"\n\n") if e.startswith(b"data: ")]
    return [json.loads(e) for e in events if e != b"[DONE]"]


async def test_a_whole_response_has_the_request_id_in_body_header_and_usage_row(gateway, world):
    status, headers, body = await read_all(await start(world["alice"], chat_body(stream=False)))
    assert status == 200
    request_id = headers[b"x-request-id"].decode()
    assert json.loads(body)["id"] == request_id
    await gateway.usage.flush_once()
    assert [r["request_id"] for r in await usage_rows()] == [request_id]


async def test_every_stream_chunk_carries_the_request_id(gateway, world):
    status, headers, body = await read_all(await start(world["alice"], chat_body(max_tokens=5)))
    assert status == 200
    request_id = headers[b"x-request-id"].decode()
    ids = {c["id"] for c in chunks(body)}
    assert ids == {request_id}
    await gateway.usage.flush_once()
    assert [r["request_id"] for r in await usage_rows()] == [request_id]


async def test_queue_time_is_the_wait_for_a_slot_not_the_whole_latency(gateway, world):
    # The tier runs one request at a time: the second waits for the first to finish.
    first = await start(world["alice"], chat_body(max_tokens=200, stream=False))
    await wait_for(lambda: gateway.snapshot().totals["in_flight"] == 1, 5)
    began = time.monotonic()
    second = await start(world["alice"], chat_body(max_tokens=200, stream=False))
    status, first_headers, _ = await read_all(first)
    assert status == 200
    status, headers, _ = await read_all(second)
    latency_ms = (time.monotonic() - began) * 1000
    assert status == 200
    waited = float(headers[b"x-queue-time-ms"])
    assert float(first_headers[b"x-queue-time-ms"]) < 100
    # It waited about as long as the first one ran, and then ran about as long itself.
    assert latency_ms * 0.3 < waited < latency_ms * 0.7, (waited, latency_ms)
