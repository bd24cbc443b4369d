"""Configuration notices: a change saved in one process reaches every process's gateway at once,
through Redis, instead of at its next periodic reload."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from cluster_helpers import REDIS_URL, needs_redis, until
from redis.asyncio import Redis

from llmserver.runtime import notices

pytestmark = needs_redis


async def test_a_listener_hears_every_notice_published_on_its_prefix(prefix: str) -> None:
    heard: list[int] = []
    listener = asyncio.ensure_future(notices.listen(REDIS_URL, prefix, lambda: heard.append(1)))
    try:
        client = Redis.from_url(REDIS_URL)
        await until_subscribed(client, notices.channel(prefix))
        await asyncio.to_thread(notices.publish, REDIS_URL, prefix)
        await asyncio.to_thread(notices.publish, REDIS_URL, "another-cluster")
        await until(lambda: len(heard) == 1)
        await client.aclose()
    finally:
        listener.cancel()


async def until_subscribed(client: Redis, channel: str) -> None:
    for _ in range(200):
        if (await client.pubsub_numsub(channel))[0][1]:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"nobody subscribed to {channel}")


@pytest.mark.django_db(transaction=True)
async def test_saving_a_tier_tells_the_other_processes_once_it_commits(
    prefix: str, settings: Any
) -> None:
    from tenants.models import Band, Tier

    settings.LLMSERVER = {**settings.LLMSERVER, "REDIS_URL": REDIS_URL, "CLUSTER_PREFIX": prefix}
    client = Redis.from_url(REDIS_URL)
    async with client.pubsub() as pubsub:
        await pubsub.subscribe(notices.channel(prefix))
        await pubsub.get_message(timeout=1.0)  # the subscription's confirmation
        await sync_to_async(Tier.objects.create)(name="gold", band=Band.INTERACTIVE)
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5.0)
    await client.aclose()
    assert message is not None and message["channel"] == notices.channel(prefix).encode()


@pytest.mark.django_db(transaction=True)
async def test_a_gateway_reloads_when_another_process_announces_a_change(
    prefix: str, settings: Any
) -> None:
    from llmserver.process import get_gateway, reset_gateway

    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "REDIS_URL": REDIS_URL,
        "RATE_LIMIT_REDIS_URL": "",
        "CLUSTER_PREFIX": prefix,
    }
    from tenants.models import Backend, ModelRoute

    gw = await get_gateway()
    try:
        client = Redis.from_url(REDIS_URL)
        await until_subscribed(client, notices.channel(prefix))
        await client.aclose()

        def another_process_adds_a_route() -> None:  # bulk_create sends no signal here
            (backend,) = Backend.objects.bulk_create([Backend(name="b", base_url="http://h:1")])
            ModelRoute.objects.bulk_create([ModelRoute(public_name="fresh", backend=backend)])

        await sync_to_async(another_process_adds_a_route)()
        await asyncio.to_thread(notices.publish, REDIS_URL, prefix)
        # Well inside the periodic reload's 5 s.
        await until(lambda: "fresh" in gw.routes(), seconds=2.0)
    finally:
        await reset_gateway()
