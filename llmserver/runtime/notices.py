"""Configuration notices between gateway processes: an operator's change reaches every process
at once, not at its next periodic reload.

A process reloads its configuration on its own admin saves (signals) and every few seconds.
With several processes sharing `REDIS_URL`, a save anywhere (the admin of any process, a
management command) also publishes a notice on one Redis channel once its transaction commits;
every gateway process listens, clears its key cache and reloads. The periodic reload stays as
the fallback for what publishes nothing (an SQL UPDATE, a notice lost while Redis was away).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable

import redis
from redis.asyncio import Redis
from redis.exceptions import RedisError

log = logging.getLogger(__name__)
RETRY_SECONDS = 1.0

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def channel(prefix: str) -> str:
    return f"{prefix}:config-changed"


def publish(redis_url: str, prefix: str) -> None:
    """Tell every process the configuration changed (from any thread; a failure only logs:
    the periodic reload still brings the change)."""
    with _clients_lock:
        client = _clients.get(redis_url)
        if client is None:
            client = _clients[redis_url] = redis.Redis.from_url(
                redis_url, socket_timeout=1.0, socket_connect_timeout=1.0
            )
    try:
        client.publish(channel(prefix), b"1")
    except RedisError as exc:
        log.warning("the configuration notice was not sent: %s", exc)


async def listen(redis_url: str, prefix: str, on_notice: Callable[[], None]) -> None:
    """Call `on_notice` for every notice, until cancelled; after an outage, once more for what
    may have been missed meanwhile."""
    missed = False
    while True:
        client = Redis.from_url(redis_url)
        try:
            async with client.pubsub() as pubsub:
                await pubsub.subscribe(channel(prefix))
                if missed:
                    on_notice()
                async for message in pubsub.listen():
                    if message["type"] == "message":
                        on_notice()
        except RedisError as exc:
            if not missed:
                log.warning("configuration notices unavailable: %s", exc)
            missed = True
            await asyncio.sleep(RETRY_SECONDS)
        finally:
            await client.aclose()
