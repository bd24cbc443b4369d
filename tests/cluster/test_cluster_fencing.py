"""A deposed leader cannot grant: Redis refuses its writes, and relays refuse its epoch."""

from __future__ import annotations

from cluster_helpers import job, needs_redis, node, until

from llmserver.cluster import wire
from llmserver.cluster.lease import Keys, Lease
from llmserver.cluster.relay import ClusterRelay
from llmserver.cluster.wire import Message

pytestmark = needs_redis


async def test_a_deposed_leaders_grant_is_not_written(prefix: str, redis) -> None:
    keys = Keys(prefix)
    old, new = Lease(redis, keys, "old", 5.0), Lease(redis, keys, "new", 5.0)
    assert await old.try_acquire()
    await redis.delete(keys.leader)  # the old leader's lease lapsed (paused, partitioned)
    assert await new.try_acquire()
    grant = Message(wire.GRANT, old.epoch, {"id": "j1", "backend": "b1", "band": 1, "priority": 2})
    assert not await old.fenced_send([(keys.grants("relay"), grant.encode())], 100)
    assert await redis.xlen(keys.grants("relay")) == 0
    assert new.epoch > old.epoch


async def test_a_relay_refuses_a_grant_from_an_older_epoch(prefix: str, redis) -> None:
    relay = ClusterRelay(redis, Keys(prefix), "relay", lambda: 0.0, 1000)
    relay.available = True
    ticket = relay.submit(job())
    relay.receive(Message(wire.LEADER, 20, {"node": "new"}))
    body = {"id": ticket.job.id, "backend": "b1", "band": 1, "priority": 2}
    relay.receive(Message(wire.GRANT, 10, body))
    assert ticket.backend is None
    assert relay.refused == 1
    relay.receive(Message(wire.GRANT, 20, body))
    assert ticket.backend == "b1"


async def test_a_leader_that_lost_its_lease_steps_down(prefix: str, redis) -> None:
    member = node(prefix, lease=0.6)
    await member.start()
    try:
        await until(lambda: member.leading)
        first = member.lease.epoch
        await redis.set(Keys(prefix).leader, "1:someone-else", px=600)
        await until(lambda: not member.leading or member.lease.epoch != first)
        await until(lambda: member.leading)  # and takes it again once the other's lapses
        assert member.lease.epoch > first
    finally:
        await member.stop()


async def test_a_leaders_grant_stream_expires_if_nobody_reads_it(prefix: str, redis) -> None:
    keys = Keys(prefix)
    lease = Lease(redis, keys, "leader", 5.0)
    assert await lease.try_acquire()
    grant = Message(
        wire.GRANT, lease.epoch, {"id": "j1", "backend": "b1", "band": 1, "priority": 2}
    )
    assert await lease.fenced_send([(keys.grants("gone"), grant.encode())], 100)
    assert await redis.xlen(keys.grants("gone")) == 1
    assert await redis.pttl(keys.grants("gone")) > 0  # a dead relay's stream goes by itself
