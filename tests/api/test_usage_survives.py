"""Usage is the bill: a bad row cannot stop it for everyone, and a reused client id drops nothing."""

from __future__ import annotations

import json
from dataclasses import replace

from llmserver.runtime.usage import UsageDraft
from tests.api.conftest import chat_body, read_all, start, usage_rows
from tests.api.test_websocket import BODY, collect, socket


async def test_a_model_name_no_column_can_hold_still_leaves_every_row_written(gateway, world):
    for model in ("\ud800", "x" * 200, "nul\x00model", "demo"):
        body = json.dumps({"model": model, "messages": [{"role": "user", "content": "x"}]})
        status, _, _ = await read_all(await start(world["alice"], body.encode()))
        assert status in (400, 404)
    status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    assert status == 200
    await gateway.usage.flush_once()
    rows = await usage_rows()
    assert len(rows) == 5 and gateway.usage.pending == 0 and gateway.usage.failed == 0
    assert max(len(r["model"]) for r in rows) <= 128


async def test_a_row_that_cannot_be_written_is_dropped_alone_and_counted(gateway, world):
    status, _, _ = await read_all(await start(world["alice"], chat_body(max_tokens=2)))
    assert status == 200
    await gateway.usage.flush_once()
    # The same request id again: the unique column refuses it, and only it.
    [row] = await usage_rows()
    template = UsageDraft(
        request_id=row["request_id"],
        tenant_id=row["tenant_id"],
        tenant_slug="acme",
        api_key_id=row["api_key_id"],
        user="alice",
        model=row["model"],
        tier="tight",
        band=0,
        queued_at=row["queued_at"],
    )
    gateway.usage.add(template)
    for i in range(3):
        gateway.usage.add(replace(template, request_id=f"fresh-{i}"))
    await gateway.usage.flush_once()
    assert len(await usage_rows()) == 4
    assert (gateway.usage.failed, gateway.usage.pending) == (1, 0)


async def test_ten_websocket_requests_with_one_client_id_leave_ten_rows(gateway, world):
    ws = socket(world["alice"])
    assert (await ws.connect())[0]
    for _ in range(10):
        await ws.send_json_to({"type": "request", "id": "1", "body": BODY})
        assert (await collect(ws, "1"))[-1]["type"] == "done"
    await ws.disconnect()
    await gateway.usage.flush_once()
    rows = await usage_rows()
    assert len(rows) == 10 and len({r["request_id"] for r in rows}) == 10
