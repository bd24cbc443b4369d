"""Bands come from the key's tier and application type; a client may only lower its own."""

from __future__ import annotations

from tests.api.conftest import chat_body, read_all, start, usage_rows


async def test_a_client_may_lower_its_own_band_with_service_tier_flex(gateway, world):
    status, _, _ = await read_all(
        await start(world["alice"], chat_body(max_tokens=2, service_tier="flex"))
    )
    assert status == 200
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert row["band"] == 2
