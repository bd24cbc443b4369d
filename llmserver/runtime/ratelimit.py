"""Sliding-window counters for requests-per-minute and tokens-per-minute limits.

One small interface, two homes: `InProcessWindow` (the default, one gateway process) and
`RedisWindow` (when REDIS_URL is set), whose check-and-take is one Lua script, so several
gateway processes share one limit and a burst cannot overshoot it between a read and a write.
The window is a log of (time, amount) entries: a take succeeds when the amounts taken in the
last `window` seconds plus this one stay within the limit, and the reset is the time until the
oldest entries have slid out far enough for this amount to fit. Refused takes are not counted.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from redis.asyncio import Redis

WINDOW_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class WindowState:
    """What a take found: the figures behind OpenAI's x-ratelimit-* headers."""

    allowed: bool
    limit: int
    remaining: int  # after this take, if it was allowed
    # Refused: until this amount fits. Allowed: until the oldest entry leaves and room grows.
    reset_seconds: float


class SlidingWindow(Protocol):
    async def take(self, key: str, amount: int, limit: int) -> WindowState:
        """Count `amount` against `key` if it fits under `limit` in the window; else refuse."""
        ...

    async def aclose(self) -> None: ...


def _reset(entries: list[tuple[float, int]], need: int, now: float, window: float) -> float:
    """Seconds until enough of the oldest entries leave the window to free `need` units."""
    freed = 0
    for at, amount in entries:
        freed += amount
        if freed >= need:
            return max(0.0, at + window - now)
    return window


class InProcessWindow:
    """The window in this process's memory; an asyncio lock makes check-and-take one step.
    Once a window while any key is held (a timer, so with no traffic at all too), the logs of
    keys not seen within it are dropped: an idle key is forgotten one to two windows after its
    last take, and costs nothing."""

    def __init__(self, window: float = WINDOW_SECONDS) -> None:
        self._window = window
        self._logs: dict[str, deque[tuple[float, int]]] = {}
        self._lock = asyncio.Lock()
        self._sweeper: asyncio.TimerHandle | None = None

    def sweep_once(self) -> None:
        """Drop the logs of keys not seen within the window; again a window later while any
        remain. Synchronous, so it never falls between a take's check and its append."""
        self._sweeper = None
        old = time.monotonic() - self._window
        for key in [k for k, log in self._logs.items() if not log or log[-1][0] <= old]:
            del self._logs[key]
        if self._logs:
            self._arm()

    def _arm(self) -> None:
        if self._sweeper is None:
            loop = asyncio.get_running_loop()
            self._sweeper = loop.call_later(self._window, self.sweep_once)

    async def take(self, key: str, amount: int, limit: int) -> WindowState:
        async with self._lock:
            now = time.monotonic()
            self._arm()
            log = self._logs.setdefault(key, deque())
            while log and log[0][0] <= now - self._window:
                log.popleft()
            used = sum(amount for _, amount in log)
            if used + amount > limit:
                reset = _reset(list(log), used + amount - limit, now, self._window)
                return WindowState(False, limit, max(0, limit - used), reset)
            log.append((now, amount))
            return WindowState(True, limit, limit - used - amount, log[0][0] + self._window - now)

    def __len__(self) -> int:
        """How many keys' logs it holds."""
        return len(self._logs)

    async def aclose(self) -> None:
        """Stop sweeping: the window lives in this process."""
        if self._sweeper is not None:
            self._sweeper.cancel()
            self._sweeper = None


# KEYS[1]: the window's sorted set. ARGV: now (ms), window (ms), amount, limit, a unique member.
# Members are "<amount>:<unique>" scored by time; returns {allowed, used, reset_ms}.
_TAKE = """
local now, window = tonumber(ARGV[1]), tonumber(ARGV[2])
local amount, limit = tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local entries = redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')
local used = 0
for i = 1, #entries, 2 do
  used = used + tonumber(string.match(entries[i], '^(%d+):'))
end
if used + amount > limit then
  local need, freed = used + amount - limit, 0
  for i = 1, #entries, 2 do
    freed = freed + tonumber(string.match(entries[i], '^(%d+):'))
    if freed >= need then
      return {0, used, math.max(0, tonumber(entries[i + 1]) + window - now)}
    end
  end
  return {0, used, window}
end
redis.call('ZADD', KEYS[1], now, amount .. ':' .. ARGV[5])
redis.call('PEXPIRE', KEYS[1], window)
local oldest = now
if #entries > 0 then oldest = tonumber(entries[2]) end
return {1, used, oldest + window - now}
"""


class RedisWindow:
    """The window in Redis, shared by every gateway process that uses the same `prefix`.

    Time comes from the Redis server (TIME), so processes with skewed clocks agree."""

    def __init__(self, client: Redis, prefix: str, window: float = WINDOW_SECONDS) -> None:
        self._client = client
        self._prefix = prefix
        self._window_ms = int(window * 1000)
        self._script = client.register_script(_TAKE)

    async def take(self, key: str, amount: int, limit: int) -> WindowState:
        seconds, micros = await self._client.time()
        now_ms = seconds * 1000 + micros // 1000
        args: list[int | str] = [now_ms, self._window_ms, amount, limit, uuid.uuid4().hex]
        allowed, used, reset_ms = await self._script(keys=[self._prefix + key], args=args)
        if allowed:
            return WindowState(True, limit, limit - int(used) - amount, int(reset_ms) / 1000)
        return WindowState(False, limit, max(0, limit - int(used)), int(reset_ms) / 1000)

    async def aclose(self) -> None:
        await self._client.aclose()


def sliding_window(redis_url: str, prefix: str) -> SlidingWindow:
    """Redis when a URL is configured (limits shared by every gateway process), else memory."""
    if redis_url:
        return RedisWindow(Redis.from_url(redis_url), prefix)
    return InProcessWindow()
