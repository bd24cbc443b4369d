"""Leadership: one Redis lease, and the fencing token that makes a deposed leader harmless.

The lease is a key set with `SET NX PX` and renewed well inside its expiry by its holder only.
Each acquisition takes a new epoch, the fencing token: at least one more than the last one and
at least Redis's clock in milliseconds, so epochs keep rising even if Redis restarts with its
data lost. Every grant is written by a script that first checks the lease still holds this
leader's value, so a leader that lost the lease (paused, partitioned, slow) cannot grant at all;
relays also refuse any message from an epoch older than one they have seen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis

ACQUIRE = """
if redis.call('EXISTS', KEYS[1]) == 1 then return false end
local epoch = redis.call('INCR', KEYS[2])
local t = redis.call('TIME')
local floor = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if epoch < floor then
  epoch = floor
  redis.call('SET', KEYS[2], string.format('%d', epoch))
end
local value = string.format('%d', epoch) .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
return value
"""

RENEW = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
"""

RELEASE = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('DEL', KEYS[1])
return 1
"""

# KEYS: the lease, then one stream per message; ARGV: the lease value, the streams' length
# cap, their expiry (ms: the stream of a relay that died goes away by itself), then the
# messages. Nothing is written unless the lease is still ours.
FENCED_XADD = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
for i = 2, #KEYS do
  redis.call('XADD', KEYS[i], 'MAXLEN', '~', ARGV[2], '*', 'm', ARGV[i + 2])
  redis.call('PEXPIRE', KEYS[i], ARGV[3])
end
return 1
"""
STREAM_EXPIRY_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Keys:
    """Every Redis key of one cluster, under one prefix (several clusters, or tests, can share
    a Redis database)."""

    prefix: str

    @property
    def leader(self) -> str:
        return f"{self.prefix}:leader"

    @property
    def epoch(self) -> str:
        return f"{self.prefix}:epoch"

    @property
    def sched(self) -> str:
        """Relays -> leader: submits, reports, registrations."""
        return f"{self.prefix}:sched"

    @property
    def control(self) -> str:
        """Leader -> everyone: a new leader's announcement."""
        return f"{self.prefix}:control"

    def grants(self, node: str) -> str:
        """Leader -> one relay: grants and refusals of its jobs."""
        return f"{self.prefix}:grants:{node}"

    def alive(self, node: str) -> str:
        """A relay's heartbeat: gone means its jobs are dropped by the leader."""
        return f"{self.prefix}:alive:{node}"


def epoch_of(lease_value: str | bytes | None) -> int:
    """The epoch in a lease value (`<epoch>:<node>`), 0 for none."""
    if lease_value is None:
        return 0
    text = lease_value.decode() if isinstance(lease_value, bytes) else lease_value
    return int(text.split(":", 1)[0])


class Lease:
    """One contender's handle on the lease; `value` is set while it believes it holds it."""

    def __init__(self, redis: Redis, keys: Keys, node: str, seconds: float) -> None:
        self.redis, self.keys, self.node = redis, keys, node
        self.ms = max(1, int(seconds * 1000))
        self.value: str | None = None
        self._acquire: Any = redis.register_script(ACQUIRE)
        self._renew: Any = redis.register_script(RENEW)
        self._release: Any = redis.register_script(RELEASE)
        self._fenced: Any = redis.register_script(FENCED_XADD)

    @property
    def epoch(self) -> int:
        return epoch_of(self.value)

    async def try_acquire(self) -> bool:
        raw = await self._acquire(
            keys=[self.keys.leader, self.keys.epoch], args=[self.node, self.ms]
        )
        self.value = raw.decode() if raw else None
        return self.value is not None

    async def renew(self) -> bool:
        """False (and the lease forgotten) if another process holds it now."""
        if self.value is None:
            return False
        ok = await self._renew(keys=[self.keys.leader], args=[self.value, self.ms])
        if not ok:
            self.value = None
        return bool(ok)

    async def release(self) -> None:
        value, self.value = self.value, None
        if value is not None:
            await self._release(keys=[self.keys.leader], args=[value])

    async def fenced_send(self, messages: list[tuple[str, str]], maxlen: int) -> bool:
        """Append each (stream, message) only if the lease is still ours; False if deposed."""
        if self.value is None:
            return False
        if not messages:
            return True
        keys = [self.keys.leader, *(stream for stream, _ in messages)]
        args = [self.value, maxlen, STREAM_EXPIRY_MS, *(message for _, message in messages)]
        return bool(await self._fenced(keys=keys, args=args))
