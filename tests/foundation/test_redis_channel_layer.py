"""With REDIS_URL set, the channel layer is Redis: a group message crosses it."""

from __future__ import annotations

import asyncio
import os
import socket

import pytest

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")


def redis_reachable() -> bool:
    from urllib.parse import urlsplit

    parts = urlsplit(REDIS_URL)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or 6379), timeout=1
        ):
            return True
    except OSError:
        return False


@pytest.mark.skipif(not redis_reachable(), reason=f"no Redis at {REDIS_URL}")
async def test_a_group_message_crosses_the_redis_channel_layer(settings):
    from channels.layers import channel_layers

    settings.CHANNEL_LAYERS = {
        "redis": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
    layer = channel_layers["redis"]
    try:
        channel = await layer.new_channel()
        await layer.group_add("dashboard-test", channel)
        await layer.group_send("dashboard-test", {"type": "snapshot", "at": 1.0})
        assert await asyncio.wait_for(layer.receive(channel), 5) == {"type": "snapshot", "at": 1.0}
        await layer.group_discard("dashboard-test", channel)
    finally:
        await layer.flush()
        channel_layers.backends.pop("redis", None)


def test_redis_url_selects_the_redis_channel_layer():
    import subprocess
    import sys

    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='llmserver.settings'; django.setup(); "
        "from django.conf import settings; print(settings.CHANNEL_LAYERS['default']['BACKEND'])"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "REDIS_URL": REDIS_URL},
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "channels_redis.core.RedisChannelLayer"
