"""A model name the usage table cannot hold is refused at the edge, and usage keeps flowing."""

from __future__ import annotations

import json

import pytest

from tests.api.conftest import chat_body, read_all, start, usage_rows


@pytest.mark.parametrize("model", ["\ud800", "m" * 129, "a\x00b"])
async def test_an_unstorable_model_gets_a_400_and_the_next_request_is_billed(gateway, world, model):
    status, _, body = await read_all(await start(world["alice"], chat_body(model=model)))
    assert status == 400
    assert json.loads(body)["error"]["param"] == "model"
    status, headers, _ = await read_all(await start(world["alice"], chat_body()))
    assert status == 200
    await gateway.usage.flush_once()
    assert gateway.usage.pending == 0
    assert [r["request_id"] for r in await usage_rows()] == [headers[b"x-request-id"].decode()]
