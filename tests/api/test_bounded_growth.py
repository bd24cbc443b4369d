"""What clients send cannot grow the gateway's memory: /metrics labels and the key cache."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from llmserver.runtime.keys import KeyCache
from tests.api.conftest import open_request, read_all


async def get(path: str, key: str = "") -> tuple[int, bytes]:
    comm = open_request(key, b"", path)
    comm.scope["method"] = "GET"
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    status, _, body = await read_all(comm)
    return status, body


async def post_unknown_model(key: str, i: int) -> int:
    body = json.dumps(
        {"model": f"no-such-model-{i}", "messages": [{"role": "user", "content": "x"}]}
    ).encode()
    comm = open_request(key, body)
    await comm.send_input({"type": "http.request", "body": body, "more_body": False})
    status, _, _ = await read_all(comm)
    return status


async def test_requests_for_3000_unknown_models_do_not_grow_metrics(
    world: dict[str, Any], gateway: Any
) -> None:
    await post_unknown_model(world["alice"], -1)  # the "unknown" series exist from here on
    before = len((await get("/metrics"))[1])
    for batch in range(30):
        statuses = await asyncio.gather(
            *(post_unknown_model(world["alice"], batch * 100 + i) for i in range(100))
        )
        assert set(statuses) == {404}
    text = (await get("/metrics"))[1]
    assert len(text) - before < 200  # counter values get longer; no new series
    assert b"no-such-model" not in text and b'model="unknown"' in text


async def test_the_key_cache_holds_at_most_max_entries_hashes(world: dict[str, Any]) -> None:
    cache = KeyCache(ttl=30.0, max_entries=16)
    assert await cache.resolve(world["alice"]) is not None
    for i in range(200):
        assert await cache.resolve(f"sk-bad-{i}-" + "x" * 12_000) is None
        assert len(cache) <= 16
    assert len(cache) == 16


async def test_the_key_cache_evicts_the_least_recently_used_first(world: dict[str, Any]) -> None:
    ticks = iter(range(10**6))
    cache = KeyCache(ttl=30.0, clock=lambda: float(next(ticks)), max_entries=3)
    alice = await cache.resolve(world["alice"])
    for i in range(10):
        await cache.resolve(f"sk-bad-{i}")
        assert await cache.resolve(world["alice"]) is alice  # used again: stays, same object
    assert len(cache) == 3


async def test_the_key_cache_gives_back_entries_past_their_time(world: dict[str, Any]) -> None:
    now = [0.0]
    cache = KeyCache(ttl=30.0, clock=lambda: now[0])
    await cache.resolve(world["alice"])
    for i in range(50):
        await cache.resolve(f"sk-bad-{i}")
    now[0] = 31.0
    cache.drop_expired()
    assert len(cache) == 0


async def test_a_cached_key_stops_working_when_it_expires(world: dict[str, Any]) -> None:
    from datetime import timedelta

    from asgiref.sync import sync_to_async
    from django.utils import timezone

    from tenants.models import ApiKey

    soon = timezone.now() + timedelta(seconds=0.3)
    await sync_to_async(ApiKey.objects.update)(expires_at=soon)
    cache = KeyCache(ttl=30.0)
    assert await cache.resolve(world["alice"]) is not None
    await asyncio.sleep(0.4)
    assert await cache.resolve(world["alice"]) is None
