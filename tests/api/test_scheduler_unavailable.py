"""With a shared scheduler (SCHEDULER_TRANSPORT=redis) whose Redis cannot be reached, a request
is refused at once with 503 and Retry-After, billed as rejected, and /readyz says why."""

from __future__ import annotations

import json
from typing import Any

from simulator.launcher import free_port
from tests.api.conftest import chat_body, read_all, start, usage_rows
from tests.api.http_helpers import exchange


async def test_a_request_is_refused_while_the_shared_scheduler_is_unreachable(
    world: dict[str, Any], settings: Any
) -> None:
    from llmserver.process import get_gateway, reset_gateway

    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "SCHEDULER_TRANSPORT": "redis",
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/4",  # nothing listens there
    }
    gw = await get_gateway()
    try:
        status, headers, body = await read_all(await start(world["alice"], chat_body()))
        assert status == 503
        assert headers[b"retry-after"] == b"5"
        assert json.loads(body)["error"]["code"] == "scheduler_unavailable"
        await gw.usage.flush_once()
        rows = await usage_rows()
        assert [(r["status"], r["error_type"]) for r in rows] == [
            ("rejected", "scheduler_unavailable")
        ]
        status, _, body = await exchange("GET", "/readyz")
        assert status == 503
        assert json.loads(body)["scheduler"] == "redis_unavailable"
    finally:
        await reset_gateway()
