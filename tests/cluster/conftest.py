"""Cluster tests run against a real Redis (CLUSTER_TEST_REDIS_URL, default 127.0.0.1:6379 db 4), each
under its own key prefix, removed afterwards; they skip, saying so, where Redis is absent."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from cluster_helpers import REDIS_URL, delete_prefix


@pytest.fixture
def prefix() -> Iterator[str]:
    """A key prefix of this test's own, cleaned up after it."""
    name = f"test-cluster-{uuid.uuid4().hex[:10]}"
    yield name
    delete_prefix(name)


@pytest.fixture
async def redis(prefix: str) -> AsyncIterator[object]:
    from redis.asyncio import Redis

    client = Redis.from_url(REDIS_URL)
    yield client
    await client.aclose()
