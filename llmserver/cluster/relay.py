"""The relay's side: submit jobs to whoever leads, receive their grants, report their end.

Every gateway process is a relay. Grants are pushed: one blocking `XREAD` waits on this relay's
own grant stream and on the control stream at once, so a grant wakes the waiting request with no
polling. Messages out are batched by one writer task (one round trip per batch, kept and resent
in order while Redis is unreachable). A grant from an epoch older than the newest one seen is
refused: the fencing on the relay's side. When a new leader announces itself, or this relay's
heartbeat had lapsed, the relay re-registers every job it holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from llmserver.cluster import streams, wire
from llmserver.cluster.lease import Keys, epoch_of
from llmserver.cluster.streams import StreamId
from llmserver.cluster.transport import ClusterUnavailable
from llmserver.cluster.wire import Message
from scheduling import (
    Job,
    JobCancelled,
    NoBackend,
    QueueFull,
    QueuePosition,
    QueueTimeout,
    Ticket,
)
from scheduling.position import QUEUED_STATE, RUNNING_STATE
from scheduling.service import TicketOwner

log = logging.getLogger(__name__)
STREAM_MAXLEN = 100_000
READ_BLOCK_MS = 1000
RETRY_SECONDS = 0.2


class RemoteTicket(Ticket):
    """A ticket granted by a leader elsewhere. It also enforces its deadline here, so a job
    still times out while no process leads: its patience is counted from the later of its
    submission and the last grant this relay received (the leader, which sees its principal's
    queue move, expires it where that queue stalls; here, no grant at all means none leads)."""

    __slots__ = ("clock", "excluded", "granted_at", "queued_at", "resumed_at", "resuming")

    def __init__(
        self,
        job: Job,
        clock: Callable[[], float],
        owner: TicketOwner,
        granted_at: Callable[[], float],
    ) -> None:
        super().__init__(job, owner)
        self.clock = clock
        self.granted_at = granted_at
        self.queued_at = clock()
        self.excluded: set[str] = set()
        self.resuming = False  # paused by preemption: it waits to resume, past any deadline
        self.resumed_at: float | None = None  # granted again after a pause: protected a while

    async def dispatched(self) -> str:
        while True:
            expiry = self._expiry()
            timeout = None if expiry is None else max(0.0, expiry - self.clock())
            try:
                return await asyncio.wait_for(super().dispatched(), timeout)
            except TimeoutError:
                expiry = self._expiry()
                if expiry is None or expiry <= self.clock():
                    raise QueueTimeout(f"job {self.job.id} waited past its deadline") from None

    def _expiry(self) -> float | None:
        if self.resuming:
            return None
        return self.job.expires_at(max(self.queued_at, self.granted_at()))

    def grant(self, backend: str, band: int, priority: int) -> None:
        if self.resuming:
            self.resumed_at = self.clock()
        self._resolve(backend, band, priority)

    def refuse(self, error: BaseException) -> None:
        self._fail(error)

    def requeued(self, failed_backend: str, unreachable: bool) -> None:
        if not unreachable:
            self.excluded.add(failed_backend)
        self._reset()

    def evict(self, recall: bool = False) -> None:
        self._request_eviction(recall)

    def paused(self) -> None:
        self.resuming = True
        self._reset()


class ClusterRelay:
    def __init__(
        self, redis: Redis, keys: Keys, node: str, clock: Callable[[], float], heartbeat_ms: int
    ) -> None:
        self.redis, self.keys, self.node, self.clock = redis, keys, node, clock
        self.heartbeat_ms = heartbeat_ms
        self.tickets: dict[str, RemoteTicket] = {}
        self.epoch = 0  # the newest leader epoch seen: the fencing token
        self.available = False
        self.refused = 0  # grants refused as stale
        self.granted_at = 0.0  # when the last grant of a leader's current epoch arrived
        self._outbox: list[str] = []
        self._mail = asyncio.Event()
        self._grants_cursor: StreamId = "0-0"
        self._control_cursor: StreamId = "0-0"

    # calls from the gateway -----------------------------------------------------------------

    def submit(self, job: Job) -> RemoteTicket:
        if not self.available:
            raise ClusterUnavailable("the scheduler's Redis is unreachable")
        ticket = RemoteTicket(job, self.clock, self, lambda: self.granted_at)
        self.tickets[job.id] = ticket
        self._send(wire.SUBMIT, {"relay": self.node, "job": wire.encode_job(job, self.clock())})
        return ticket

    def finish(self, ticket: Ticket, real_cost: float | None, completed: bool) -> None:
        if self.tickets.pop(ticket.job.id, None) is None:
            return
        if ticket.backend is None and isinstance(ticket, RemoteTicket):
            ticket.refuse(JobCancelled(f"job {ticket.job.id} cancelled"))
        kind = wire.COMPLETE if completed else wire.CANCEL
        self._send(kind, {"id": ticket.job.id, "cost": real_cost})

    def requeue(self, ticket: Ticket, failed_backend: str, unreachable: bool = False) -> None:
        if isinstance(ticket, RemoteTicket) and ticket.job.id in self.tickets:
            ticket.requeued(failed_backend, unreachable)
            body = {"id": ticket.job.id, "failed": failed_backend, "unreachable": unreachable}
            self._send(wire.REQUEUE, body)

    def preempted(self, ticket: Ticket, real_cost: float) -> None:
        """The job gave up its slot when asked: it waits for a new grant to resume."""
        if isinstance(ticket, RemoteTicket) and ticket.job.id in self.tickets:
            ticket.paused()
            self._send(wire.PREEMPTED, {"id": ticket.job.id, "cost": real_cost})

    def keep_running(self, ticket: Ticket) -> None:
        """The job declined an eviction; the leader stops waiting for its slot."""
        if ticket.job.id in self.tickets:
            self._send(wire.KEEP, {"id": ticket.job.id})

    def position(self, job_id: str) -> QueuePosition | None:
        """A follower's view of its own job: running, or queued behind at least this relay's
        own earlier jobs of its model and band (a lower bound: only the leader sees the rest)."""
        ticket = self.tickets.get(job_id)
        if ticket is None:
            return None
        job = ticket.job
        mine = [t for t in self.tickets.values() if t.job.model == job.model]
        running = sum(1 for t in mine if t.backend is not None)
        if ticket.backend is not None:
            return QueuePosition(RUNNING_STATE, job.model, ticket.band, 0, running)
        ahead = sum(
            1
            for t in mine
            if t.backend is None and t.job.band == job.band and t.queued_at < ticket.queued_at
        )
        return QueuePosition(QUEUED_STATE, job.model, job.band, ahead, running)

    # heartbeat and re-registration ----------------------------------------------------------

    async def heartbeat(self) -> None:
        """Renew this relay's liveness key; if it had lapsed, the leader may have dropped our
        jobs, so they are registered again."""
        before = await self.redis.set(
            self.keys.alive(self.node), b"1", px=self.heartbeat_ms, get=True
        )
        if before is None and self.tickets:
            self.reregister()

    def reregister(self) -> None:
        now = self.clock()
        for ticket in self.tickets.values():
            body: dict[str, Any] = {
                "relay": self.node,
                "job": wire.encode_job(ticket.job, now),
                "waited": now - ticket.queued_at,
                "excluded": sorted(ticket.excluded),
            }
            if ticket.backend is not None:
                body["backend"] = ticket.backend
                if ticket.resumed_at is not None:
                    body["resumed"] = now - ticket.resumed_at
            elif ticket.resuming:
                body["paused"] = True
            self._send(wire.REGISTER, body)

    # the loops ------------------------------------------------------------------------------

    async def read_loop(self) -> None:
        """Wait on the grant and control streams; on a Redis error, mark the cluster unavailable
        and try again until it answers."""
        synced = self.available
        while not streams.cancelled_meanwhile():
            try:
                if not synced:
                    await self.connect()
                    synced = True
                cursors: dict[str, StreamId] = {
                    self.keys.grants(self.node): self._grants_cursor,
                    self.keys.control: self._control_cursor,
                }
                self.available = True
                found = await streams.read(self.redis, cursors, READ_BLOCK_MS)
            except RedisError as exc:
                if streams.cancelled_meanwhile():
                    raise asyncio.CancelledError from exc
                if self.available:
                    log.warning("the scheduler's Redis is unreachable: %s", exc)
                self.available, synced = False, False
                await asyncio.sleep(RETRY_SECONDS)
                continue
            for name, entry_id, message in found:
                if name == self.keys.control:
                    self._control_cursor = entry_id
                else:
                    self._grants_cursor = entry_id
                self.receive(message)

    async def connect(self) -> None:
        """Start reading the control stream after its last entry, learn the epoch it names, and
        count as available (raises RedisError if Redis does not answer)."""
        newest = await streams.last(self.redis, self.keys.control)
        if newest is not None:
            self._control_cursor, announcement = newest
            self.receive(announcement)
        else:
            self.learn_epoch(epoch_of(await self.redis.get(self.keys.leader)))
        self.available = True

    async def write_loop(self) -> None:
        while not streams.cancelled_meanwhile():
            await self._mail.wait()
            self._mail.clear()
            batch, self._outbox = self._outbox, []
            if not batch:
                continue
            try:
                async with self.redis.pipeline(transaction=False) as pipe:
                    for raw in batch:
                        pipe.xadd(
                            self.keys.sched, {"m": raw}, maxlen=STREAM_MAXLEN, approximate=True
                        )
                    await pipe.execute()
            except RedisError as exc:
                if streams.cancelled_meanwhile():
                    raise asyncio.CancelledError from exc
                self.available = False
                self._outbox[:0] = batch  # resent in order once Redis answers
                await asyncio.sleep(RETRY_SECONDS)
                self._mail.set()

    # messages from the leader ---------------------------------------------------------------

    def receive(self, m: Message) -> None:
        if m.e < self.epoch:
            if m.t == wire.GRANT:
                self.refused += 1
                log.warning("refused a grant of %s from deposed epoch %d", m.body.get("id"), m.e)
            return
        self.learn_epoch(m.e)
        if m.t == wire.GRANT:
            self.granted_at = self.clock()
            ticket = self.tickets.get(m.body["id"])
            if ticket is not None and ticket.backend is None:
                ticket.grant(m.body["backend"], int(m.body["band"]), int(m.body["priority"]))
        elif m.t == wire.EVICT:
            ticket = self.tickets.get(m.body["id"])
            if ticket is not None and ticket.backend is not None:
                ticket.evict(bool(m.body.get("recall")))
        elif m.t == wire.REJECT:
            ticket = self.tickets.pop(m.body["id"], None)
            if ticket is not None:
                ticket.refuse(_refusal(m.body["reason"], m.body.get("retry_after"), ticket.job))

    def learn_epoch(self, epoch: int) -> None:
        if epoch > self.epoch:
            self.epoch = epoch
            self.reregister()

    def _send(self, kind: str, body: dict[str, Any]) -> None:
        self._outbox.append(Message(kind, self.epoch, body).encode())
        self._mail.set()

    def wake_writer(self) -> None:
        """Let the writer see that it is being stopped."""
        self._mail.set()

    async def close(self) -> None:
        with contextlib.suppress(RedisError):
            await self.redis.delete(self.keys.grants(self.node), self.keys.alive(self.node))


def _refusal(reason: str, retry_after: float | None, job: Job) -> BaseException:
    if reason == wire.QUEUE_FULL:
        return QueueFull(retry_after or 1.0)
    if reason == wire.EXPIRED:
        return QueueTimeout(f"job {job.id} waited past its deadline")
    return NoBackend(f"no backend serves model {job.model!r}")
