"""Changes made in the database without Django's signals (another process, a SQL shell) reach
this process's key cache and configuration: the database counts them (triggers), the gateway
reads that count every WATCH_INTERVAL."""

from __future__ import annotations

import asyncio
from typing import Any

from asgiref.sync import sync_to_async

from llmserver.runtime.config_watch import WATCH_INTERVAL
from tests.api.conftest import wait_for

SEVERAL_WATCHES = 3 * WATCH_INTERVAL


async def test_a_key_revoked_without_signals_leaves_the_cache_at_the_next_watch(
    world: dict[str, Any], gateway: Any
) -> None:
    from tenants.models import ApiKey

    assert await gateway.keys.resolve(world["alice"]) is not None
    await sync_to_async(ApiKey.objects.update)(revoked=True)
    await wait_for(lambda: len(gateway.keys) == 0, 5.0)
    assert await gateway.keys.resolve(world["alice"]) is None


async def test_nothing_changed_keeps_the_cache_and_the_configuration(
    world: dict[str, Any], gateway: Any
) -> None:
    info = await gateway.keys.resolve(world["alice"])
    config = gateway.config
    await asyncio.sleep(SEVERAL_WATCHES)
    assert gateway.config is config
    assert len(gateway.keys) == 1 and await gateway.keys.resolve(world["alice"]) is info


async def test_usage_touching_a_key_is_not_a_change(world: dict[str, Any], gateway: Any) -> None:
    from django.utils import timezone

    from tenants.models import ApiKey

    config = gateway.config
    await gateway.keys.resolve(world["alice"])
    await sync_to_async(ApiKey.objects.update)(last_used_at=timezone.now())
    await asyncio.sleep(SEVERAL_WATCHES)
    assert gateway.config is config and len(gateway.keys) == 1


async def test_a_backend_edited_without_signals_is_reloaded(
    world: dict[str, Any], gateway: Any
) -> None:
    from tenants.models import Backend

    await sync_to_async(Backend.objects.update)(max_in_flight=7)
    backends = gateway.scheduler.core.backends
    await wait_for(lambda: backends["sim"].config.max_in_flight == 7, 5.0)


async def test_a_key_read_while_the_cache_was_cleared_is_not_kept(
    world: dict[str, Any], monkeypatch: Any
) -> None:
    """The read may predate the change that cleared the cache (a revocation committed while it
    ran): kept, it would outlive that clear, and an open socket would never look again."""
    from llmserver.runtime import keys

    cache = keys.KeyCache(ttl=30.0)
    load_key = keys.load_key

    def load_then_change(secret: str) -> Any:
        info = load_key(secret)
        cache.clear()  # the revocation's commit, between the read and its caching
        return info

    monkeypatch.setattr(keys, "load_key", load_then_change)
    assert await cache.resolve(world["alice"]) is not None
    assert len(cache) == 0
