"""Keys revoked in the database by another process leave this process's key cache."""

from __future__ import annotations

from typing import Any


async def test_revoked_keys_leave_the_cache_at_the_next_check(
    world: dict[str, Any], gateway: Any
) -> None:
    from asgiref.sync import sync_to_async

    from tenants.models import ApiKey

    await gateway.keys.resolve(world["alice"])
    assert await gateway.forget_revoked_keys_once() == set()
    # update() sends no signal: only the database can tell this process.
    await sync_to_async(ApiKey.objects.update)(revoked=True)
    assert len(await gateway.forget_revoked_keys_once()) == 1
    assert await gateway.keys.resolve(world["alice"]) is None
