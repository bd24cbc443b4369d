"""RPM and TPM limits per key (on its tier) and per tenant, as OpenAI states them: the
x-ratelimit-* headers on every response of a limited key, and 429 with Retry-After past a limit."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from asgiref.sync import sync_to_async

from simulator.launcher import free_port
from tenants.models import ApiKey, AppType, Tenant, Tier
from tests.api.conftest import chat_body, read_all, start, usage_rows


async def limit(gateway: Any, world: dict[str, Any], **fields: Any) -> None:
    """Set limits on the tier (rpm_per_key, tpm_per_key) or tenant (rpm_limit, tpm_limit)."""
    tier = {k: v for k, v in fields.items() if k.endswith("_per_key")}
    tenant = {k: v for k, v in fields.items() if k not in tier}

    def save() -> None:
        Tier.objects.filter(pk=world["tier"].pk).update(
            max_concurrent_per_user=20, max_queued_per_user=20, **tier
        )
        Tenant.objects.filter(pk=world["tenant"].pk).update(**tenant)

    await sync_to_async(save)()
    await gateway.reload_once()
    gateway.keys.clear()


async def send(key: str, max_tokens: int = 2) -> tuple[int, dict[bytes, bytes], bytes]:
    return await read_all(await start(key, chat_body(max_tokens=max_tokens)))


async def test_a_limited_key_gets_openai_ratelimit_headers_on_success(world, gateway):
    await limit(gateway, world, rpm_per_key=5, tpm_per_key=10_000)
    status, headers, _ = await send(world["alice"], max_tokens=2)
    assert status == 200
    assert headers[b"x-ratelimit-limit-requests"] == b"5"
    assert headers[b"x-ratelimit-remaining-requests"] == b"4"
    assert headers[b"x-ratelimit-limit-tokens"] == b"10000"
    assert 10_000 - 2 - 100 < int(headers[b"x-ratelimit-remaining-tokens"]) <= 10_000 - 2
    assert headers[b"x-ratelimit-reset-requests"].endswith(b"s")
    assert headers[b"x-ratelimit-reset-tokens"].endswith(b"s")


async def test_a_key_without_limits_gets_no_ratelimit_headers(world, gateway):
    status, headers, _ = await send(world["alice"])
    assert status == 200
    assert not [name for name in headers if name.startswith(b"x-ratelimit-")]


async def test_past_the_rpm_limit_a_request_gets_429_in_openai_shape_with_retry_after(
    world, gateway
):
    await limit(gateway, world, rpm_per_key=2)
    assert [(await send(world["alice"]))[0] for _ in range(2)] == [200, 200]
    status, headers, body = await send(world["alice"])
    assert status == 429
    error = json.loads(body)["error"]
    assert (error["type"], error["code"]) == ("rate_limit_error", "rate_limit_exceeded")
    assert "requests per minute (RPM): Limit 2, Used 2" in error["message"]
    assert 1 <= int(headers[b"retry-after"]) <= 60
    assert headers[b"x-ratelimit-remaining-requests"] == b"0"


async def test_a_request_whose_tokens_do_not_fit_the_tpm_limit_is_refused(world, gateway):
    await limit(gateway, world, tpm_per_key=200)
    assert (await send(world["alice"], max_tokens=120))[0] == 200
    status, headers, body = await send(world["alice"], max_tokens=120)
    assert status == 429
    assert "tokens per minute (TPM)" in json.loads(body)["error"]["message"]
    assert int(headers[b"x-ratelimit-remaining-tokens"]) < 120


async def test_the_tenant_limit_is_shared_by_all_its_keys(world, gateway):
    _, bob = await sync_to_async(ApiKey.objects.create_key)(
        tenant=world["tenant"], user="bob", app_type=AppType.CHAT
    )
    await limit(gateway, world, rpm_limit=1)
    assert (await send(world["alice"]))[0] == 200
    status, headers, _ = await send(bob)
    assert status == 429
    assert headers[b"x-ratelimit-limit-requests"] == b"1"


async def test_a_refusal_writes_one_rejected_usage_row(world, gateway):
    await limit(gateway, world, rpm_per_key=1)
    await send(world["alice"])
    await send(world["alice"])
    await gateway.usage.flush_once()
    rows = await usage_rows()
    assert [(r["status"], r["error_type"]) for r in rows] == [
        ("ok", ""),
        ("rejected", "rate_limit_exceeded"),
    ]


async def test_ten_concurrent_requests_against_three_per_minute_let_exactly_three_through(
    world, gateway
):
    await limit(gateway, world, rpm_per_key=3)
    await gateway.keys.resolve(world["alice"])  # one key lookup, not ten racing ones
    comms = [await start(world["alice"], chat_body(max_tokens=2)) for _ in range(10)]
    results = await asyncio.gather(*(read_all(c, timeout=20) for c in comms))
    assert sorted(status for status, _, _ in results) == [200] * 3 + [429] * 7


async def test_a_limit_whose_shared_window_cannot_be_reached_refuses_with_503(world, settings):
    from llmserver.process import get_gateway, reset_gateway

    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "RATE_LIMIT_REDIS_URL": f"redis://127.0.0.1:{free_port()}/4",  # nothing listens there
    }
    gw = await get_gateway()
    try:
        await limit(gw, world, rpm_per_key=5)
        status, headers, body = await send(world["alice"])
        assert (status, headers[b"retry-after"]) == (503, b"5")
        assert json.loads(body)["error"]["code"] == "limits_unavailable"
        await gw.usage.flush_once()
        rows = await usage_rows()
        assert [(r["status"], r["error_type"]) for r in rows] == [
            ("rejected", "limits_unavailable")
        ]
    finally:
        await reset_gateway()
