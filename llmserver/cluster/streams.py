"""Reading Redis streams as typed tuples: redis-py's replies are loosely typed, so the casts
live here and nowhere else."""

from __future__ import annotations

import asyncio
from typing import Any

from redis.asyncio import Redis

from llmserver.cluster.wire import Message

StreamId = bytes | str


async def read(
    redis: Redis, cursors: dict[str, StreamId], block_ms: int, count: int | None = None
) -> list[tuple[str, StreamId, Message]]:
    """Entries after each cursor, waiting up to `block_ms` for the first: (stream, id, message)
    in stream order."""
    streams: Any = cursors
    found: Any = await redis.xread(streams, count=count, block=block_ms)
    out: list[tuple[str, StreamId, Message]] = []
    for stream, entries in found or ():
        name = stream.decode() if isinstance(stream, bytes) else str(stream)
        for entry_id, fields in entries:
            out.append((name, entry_id, Message.decode(fields[b"m"])))
    return out


async def last(redis: Redis, stream: str) -> tuple[StreamId, Message] | None:
    """The stream's newest entry, or None if it is empty or missing."""
    found: Any = await redis.xrevrange(stream, count=1)
    if not found:
        return None
    entry_id, fields = found[0]
    return entry_id, Message.decode(fields[b"m"])


def cancelled_meanwhile() -> bool:
    """Whether this task was asked to stop. redis-py does not always let a cancellation through
    a command in progress (it may come out as a RedisError, or not at all), so every loop that
    talks to Redis asks this on each turn instead of trusting CancelledError to reach it."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


async def stop_tasks(tasks: list[asyncio.Task[None]], timeout: float) -> None:
    """Cancel and wait for `tasks`, at most `timeout` seconds (see `cancelled_meanwhile`)."""
    for task in tasks:
        task.cancel()
    if tasks:
        done, _ = await asyncio.wait(tasks, timeout=timeout)
        for task in done:
            if not task.cancelled():
                task.exception()  # retrieved: a loop that ended on an error logs nothing more
