"""The leader's side: the one scheduler of the cluster, fed from Redis, granting through Redis.

`LeaderService` is the process's own `SchedulerService` (it always holds the config and the
scraped metrics, so a process that wins the lease can dispatch at once) that also hands each
step's decisions to whoever sends them. `Leader` runs one term: it announces its epoch, lets the
relays re-register what they hold for a short settle time (running jobs first, so slots and
accounts are rebuilt, then queued ones in their original order), then serves the relays'
messages until it is cancelled or finds itself deposed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from redis.asyncio import Redis

from llmserver.cluster import streams, wire
from llmserver.cluster.lease import Keys, Lease
from llmserver.cluster.streams import StreamId
from llmserver.cluster.wire import Message
from scheduling import (
    BackendConfig,
    Job,
    NoBackend,
    QueueFull,
    SchedulerConfig,
    SchedulerService,
    Step,
    Ticket,
)

log = logging.getLogger(__name__)
SETTLE_SECONDS = 0.25
STREAM_MAXLEN = 10_000  # per relay's grant stream: far more than one relay has in flight
READ_BLOCK_MS = 1000
READ_COUNT = 1000


class Deposed(Exception):
    """The lease is no longer this leader's: its grants were not written."""


class LeaderService(SchedulerService):
    """A `SchedulerService` whose dispatches and expiries also go to `on_step`."""

    def __init__(
        self,
        config: SchedulerConfig,
        backends: Iterable[BackendConfig],
        clock: Callable[[], float],
    ) -> None:
        super().__init__(config, backends, clock)
        self.on_step: Callable[[Step], None] | None = None
        # Submissions arrive in bursts (one read of the stream): the loop orders each burst.
        self.immediate = False

    def dispatch_once(self) -> Step:
        step = super().dispatch_once()
        if self.on_step is not None and (step.dispatched or step.expired or step.evicted):
            self.on_step(step)
        return step

    def ticket(self, job_id: str) -> Ticket | None:
        return self._tickets.get(job_id)

    def adopt_running(self, job: Job, backend: str, resumed_ago: float | None = None) -> None:
        """A job already streaming from `backend` under an earlier leader (resumed there
        `resumed_ago` seconds ago, if it was paused and resumed)."""
        self.core.adopt(job, backend, self.clock(), resumed_ago)
        self._tickets[job.id] = Ticket(job, self)
        self._poke()

    def adopt_queued(
        self, job: Job, waited: float, excluded: Iterable[str], paused: bool = False
    ) -> None:
        """A job queued under an earlier leader, keeping the time it has already waited; one
        that leader paused to make room goes back to the head of its lane and never expires.
        When its principal's queue last moved was lost with that leader: its patience counts
        from the take-over."""
        now = self.clock()
        if paused:
            self.core.adopt_paused(job, now - waited)
        else:
            self.core.submit(job, now - waited)
            self.core.taken_over(job.id, now)
        self.core.entries[job.id].excluded.update(excluded)
        self._tickets[job.id] = Ticket(job, self)
        self._poke()

    def clear(self) -> None:
        """Forget every job (a term ended): queued ones dropped, slots released."""
        for job_id in list(self._tickets):
            ticket = self._tickets[job_id]
            self.cancel(ticket)
            self._tickets.pop(job_id, None)


class Leader:
    """One term of leadership; `run()` returns only by cancellation or `Deposed`."""

    def __init__(
        self, redis: Redis, keys: Keys, lease: Lease, service: LeaderService, check_every: float
    ) -> None:
        self.redis, self.keys, self.lease, self.service = redis, keys, lease, service
        self.epoch = lease.epoch
        self.check_every = check_every
        self.owners: dict[str, str] = {}  # job id -> the relay (node) holding it
        self._outbox: list[tuple[str, str]] = []
        self._mail = asyncio.Event()
        self._settling: list[tuple[float, Message]] = []
        self._deferred: list[Message] = []  # reports that came in while settling

    async def run(self) -> None:
        newest = await streams.last(self.redis, self.keys.sched)
        cursor: StreamId = newest[0] if newest else "0-0"
        self.service.on_step = self._on_step
        announce = Message(wire.LEADER, self.epoch, {"node": self.lease.node}).encode()
        if not await self.lease.fenced_send([(self.keys.control, announce)], 100):
            raise Deposed
        log.info("leading the cluster as epoch %d", self.epoch)
        sender = asyncio.ensure_future(self._send_loop())
        liveness = asyncio.ensure_future(self._liveness_loop())
        try:
            loop = asyncio.get_running_loop()
            settle_until = loop.time() + SETTLE_SECONDS
            while loop.time() < settle_until:
                block = max(1, int((settle_until - loop.time()) * 1000))
                cursor = await self._read(cursor, block, settling=True)
            self._adopt_settled()
            await self.service.start()
            while not streams.cancelled_meanwhile():
                if sender.done():
                    sender.result()  # Deposed or a Redis error ends the term
                cursor = await self._read(cursor, READ_BLOCK_MS, settling=False)
        finally:
            self._mail.set()
            await streams.stop_tasks([sender, liveness], READ_BLOCK_MS / 1000 + 1)
            self.service.on_step = None

    async def _read(self, cursor: StreamId, block: int, settling: bool) -> StreamId:
        found = await streams.read(self.redis, {self.keys.sched: cursor}, block, READ_COUNT)
        for _stream, entry_id, message in found:
            cursor = entry_id
            if message.e == self.epoch:
                self._handle(message, settling)
        return cursor

    # messages from relays -------------------------------------------------------------------

    def _handle(self, m: Message, settling: bool) -> None:
        now = self.service.clock()
        body = m.body
        if settling:
            if m.t == wire.REGISTER:
                self._settling.append((float(body.get("waited", 0.0)), m))
            else:
                self._deferred.append(m)  # after the registrations it may refer to
        elif m.t in (wire.SUBMIT, wire.REGISTER):
            self._intake(m, now)
        elif m.t in (wire.COMPLETE, wire.CANCEL):
            # One call for both: a running job is released and charged its real cost, a queued
            # one (the grant crossed the report) just leaves.
            ticket = self.service.ticket(body["id"])
            self.owners.pop(body["id"], None)
            if ticket is not None:
                self.service.cancel(ticket, body.get("cost"))
        elif m.t in (wire.PREEMPTED, wire.KEEP):
            ticket = self.service.ticket(body["id"])
            if ticket is None:
                return
            if m.t == wire.KEEP:
                self.service.keep_running(ticket)
            else:
                with contextlib.suppress(KeyError):  # not running here (re-registered queued)
                    self.service.preempted(ticket, float(body["cost"]))
        elif m.t == wire.REQUEUE:
            ticket = self.service.ticket(body["id"])
            if ticket is None:
                return
            try:
                self.service.requeue(ticket, body["failed"], bool(body.get("unreachable")))
            except (KeyError, NoBackend):
                self._refuse(body["id"], wire.NO_BACKEND)

    def _intake(self, m: Message, now: float) -> None:
        body = m.body
        relay, job = body["relay"], wire.decode_job(body["job"], now)
        if job.id in self.owners:
            return  # registered twice (a submit and a re-registration of one epoch)
        self.owners[job.id] = relay
        try:
            if m.t == wire.SUBMIT:
                self.service.submit(job)
            elif body.get("backend"):
                resumed = body.get("resumed")
                self.service.adopt_running(
                    job, body["backend"], None if resumed is None else float(resumed)
                )
            else:
                self.service.adopt_queued(
                    job,
                    float(body["waited"]),
                    body.get("excluded", ()),
                    bool(body.get("paused")),
                )
        except QueueFull as exc:
            self._refuse(job.id, wire.QUEUE_FULL, exc.retry_after)
        except (NoBackend, KeyError):
            self._refuse(job.id, wire.NO_BACKEND)
        except ValueError:
            pass  # already live here

    def _adopt_settled(self) -> None:
        """Running jobs first (their slots count before anything is granted), then the queued
        ones, longest waiting first, so each principal's own order survives the change; then
        the reports that arrived meanwhile (a registered job may already have ended)."""
        now = self.service.clock()
        running = [m for _, m in self._settling if m.body.get("backend")]
        queued = [x for x in self._settling if not x[1].body.get("backend")]
        queued.sort(key=_waited, reverse=True)
        for m in [*running, *(m for _, m in queued)]:
            self._intake(m, now)
        deferred, self._settling, self._deferred = self._deferred, [], []
        for m in deferred:
            self._handle(m, settling=False)

    # messages to relays ---------------------------------------------------------------------

    def _on_step(self, step: Step) -> None:
        for d in step.dispatched:
            relay = self.owners.get(d.job.id)
            if relay is not None:
                body = {
                    "id": d.job.id,
                    "backend": d.backend,
                    "band": d.band,
                    "priority": d.priority,
                }
                self._post(relay, Message(wire.GRANT, self.epoch, body))
        for job in step.expired:
            self._refuse(job.id, wire.EXPIRED)
        for eviction in step.evicted:
            relay = self.owners.get(eviction.job_id)
            if relay is not None:
                body = {"id": eviction.job_id, "recall": eviction.recall}
                self._post(relay, Message(wire.EVICT, self.epoch, body))

    def _refuse(self, job_id: str, reason: str, retry_after: float | None = None) -> None:
        relay = self.owners.pop(job_id, None)
        if relay is not None:
            body = {"id": job_id, "reason": reason, "retry_after": retry_after}
            self._post(relay, Message(wire.REJECT, self.epoch, body))

    def _post(self, relay: str, message: Message) -> None:
        self._outbox.append((self.keys.grants(relay), message.encode()))
        self._mail.set()

    async def _send_loop(self) -> None:
        while not streams.cancelled_meanwhile():
            await self._mail.wait()
            self._mail.clear()
            batch, self._outbox = self._outbox, []
            if not await self.lease.fenced_send(batch, STREAM_MAXLEN):
                raise Deposed

    async def _liveness_loop(self) -> None:
        """Jobs of a relay whose heartbeat is missing twice in a row (its process died) are
        dropped: their slots would otherwise stay taken for ever."""
        missing: set[str] = set()
        while not streams.cancelled_meanwhile():
            await asyncio.sleep(self.check_every)
            relays = sorted(set(self.owners.values()))
            if not relays:
                missing = set()
                continue
            async with self.redis.pipeline(transaction=False) as pipe:
                for relay in relays:
                    pipe.exists(self.keys.alive(relay))
                found = await pipe.execute()
            gone = {relay for relay, alive in zip(relays, found, strict=True) if not alive}
            for relay in gone & missing:
                self._drop_relay(relay)
            missing = gone

    def _drop_relay(self, relay: str) -> None:
        log.warning("relay %s is gone: dropping its jobs", relay)
        for job_id in [j for j, r in self.owners.items() if r == relay]:
            self.owners.pop(job_id)
            ticket = self.service.ticket(job_id)
            if ticket is not None:
                self.service.cancel(ticket)


def _waited(item: tuple[float, Message]) -> float:
    return item[0]
