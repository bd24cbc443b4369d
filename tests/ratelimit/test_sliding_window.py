"""The sliding-window counters behind RPM/TPM limits: in-process, and Redis shared by processes."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from urllib.parse import urlsplit

import pytest

from llmserver.runtime.ratelimit import InProcessWindow, RedisWindow

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/3")


def redis_reachable() -> bool:
    parts = urlsplit(REDIS_URL)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 6379), timeout=1
        ):
            return True
    except OSError:
        return False


async def test_takes_within_the_limit_are_allowed_and_count_down_the_remainder():
    window = InProcessWindow()
    states = [await window.take("k", 1, 3) for _ in range(3)]
    assert [s.allowed for s in states] == [True, True, True]
    assert [s.remaining for s in states] == [2, 1, 0]


async def test_keys_not_seen_for_a_window_are_forgotten():
    window = InProcessWindow(window=0.05)
    for i in range(100):
        await window.take(f"k{i}", 1, 3)
    await asyncio.sleep(0.1)
    await window.take("now", 1, 3)
    assert len(window) == 1


async def test_idle_keys_are_forgotten_without_a_request_after_them():
    window = InProcessWindow(window=0.05)
    for i in range(100):
        await window.take(f"k{i}", 1, 3)
    await asyncio.sleep(0.2)  # up to two windows, and nothing taken since
    assert len(window) == 0
    await window.aclose()


async def test_a_take_past_the_limit_is_refused_with_a_reset_inside_the_window():
    window = InProcessWindow(window=60)
    await window.take("k", 70, 100)
    refused = await window.take("k", 40, 100)
    assert not refused.allowed
    assert refused.remaining == 30
    assert 0 < refused.reset_seconds <= 60


async def test_entries_slide_out_of_the_window():
    window = InProcessWindow(window=0.05)
    await window.take("k", 1, 1)
    await asyncio.sleep(0.1)
    assert (await window.take("k", 1, 1)).allowed


async def test_keys_have_separate_windows():
    window = InProcessWindow()
    await window.take("a", 1, 1)
    assert (await window.take("b", 1, 1)).allowed


async def test_a_concurrent_burst_never_takes_more_than_the_limit():
    window = InProcessWindow()
    states = await asyncio.gather(*(window.take("k", 1, 5) for _ in range(20)))
    assert sum(s.allowed for s in states) == 5


@pytest.fixture
async def redis_client():
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()


@pytest.mark.skipif(not redis_reachable(), reason=f"no Redis at {REDIS_URL}")
async def test_two_redis_windows_share_one_limit_under_a_concurrent_burst(redis_client):
    prefix = f"test-ratelimit-{uuid.uuid4().hex}:"
    first, second = RedisWindow(redis_client, prefix), RedisWindow(redis_client, prefix)
    try:
        takes = [w.take("key", 10, 100) for w in (first, second) for _ in range(8)]
        states = await asyncio.gather(*takes)
        assert sum(s.allowed for s in states) == 10
        refused = [s for s in states if not s.allowed]
        assert all(s.remaining == 0 and 0 < s.reset_seconds <= 60 for s in refused)
    finally:
        await redis_client.delete(prefix + "key")


@pytest.mark.skipif(not redis_reachable(), reason=f"no Redis at {REDIS_URL}")
async def test_a_redis_window_refuses_what_does_not_fit_but_accepts_what_does(redis_client):
    prefix = f"test-ratelimit-{uuid.uuid4().hex}:"
    window = RedisWindow(redis_client, prefix)
    try:
        assert (await window.take("key", 900, 1000)).remaining == 100
        assert not (await window.take("key", 200, 1000)).allowed
        assert (await window.take("key", 100, 1000)).allowed
    finally:
        await redis_client.delete(prefix + "key")
