"""The asyncio face of the scheduler: tickets to await, and a loop that wakes on events.

The loop repeats `dispatch_once()`; between steps it sleeps until something that can open a gate
happens (a job, a completion, a cancel, new metrics, a config change) or until the next deadline
or aging time. It never polls.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from scheduling.backend_state import BackendMetrics
from scheduling.config import BackendConfig, SchedulerConfig
from scheduling.core import Scheduler, Step
from scheduling.engine_cache import CacheEvent
from scheduling.errors import JobCancelled, QueueTimeout
from scheduling.jobs import Job
from scheduling.position import QueuePosition, queue_position
from scheduling.snapshot import SchedulerSnapshot, build_snapshot


class TicketOwner(Protocol):
    """Whoever a ticket reports a declined eviction to: this service, or a remote scheduler's
    relay (the gateway's cluster transport)."""

    def keep_running(self, ticket: Ticket) -> None: ...


class Ticket:
    """A submitted job's handle: await `dispatched()` for the backend it was given; while it
    runs, `evict_requested` / `eviction()` say the scheduler wants its slot back."""

    __slots__ = (
        "_error",
        "_evict",
        "_service",
        "_waiter",
        "backend",
        "band",
        "job",
        "priority",
        "recalled",
    )

    def __init__(self, job: Job, service: TicketOwner) -> None:
        self.job = job
        self._service = service
        self.backend: str | None = None
        self.band: int = job.band  # the band it was dispatched from (aging may promote it)
        self.priority: int = 2 * job.band  # for a priority-scheduling backend, set at dispatch
        self._error: BaseException | None = None
        self._waiter: asyncio.Future[str] | None = None
        self._evict: asyncio.Event | None = None
        # The stop asked for is a call back from the engine's queue, not an eviction.
        self.recalled = False

    @property
    def evict_requested(self) -> bool:
        return self._evict is not None and self._evict.is_set()

    async def eviction(self) -> None:
        """Returns once the scheduler asks this running job to make room."""
        if self._evict is None:
            self._evict = asyncio.Event()
        await self._evict.wait()

    def decline_eviction(self) -> None:
        """This job cannot give up its slot without harm (it cannot be resumed): keep it."""
        self._evict = None
        self._service.keep_running(self)

    def _request_eviction(self, recall: bool = False) -> None:
        self.recalled = recall
        if self._evict is None:
            self._evict = asyncio.Event()
        self._evict.set()

    async def dispatched(self) -> str:
        """The backend name; raises QueueTimeout past the deadline, JobCancelled if cancelled."""
        if self.backend is not None:
            return self.backend
        if self._error is not None:
            raise self._error
        if self._waiter is None or self._waiter.done():
            self._waiter = asyncio.get_running_loop().create_future()
        return await asyncio.shield(self._waiter)

    def _resolve(self, backend: str, band: int, priority: int) -> None:
        self.backend = backend
        self.band = band
        self.priority = priority
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(backend)

    def _fail(self, error: BaseException) -> None:
        self._error = error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_exception(error)
            self._waiter.exception()  # retrieved here so an unawaited ticket logs nothing

    def _reset(self) -> None:
        self.backend = None
        self._waiter = None
        self._evict = None
        self.recalled = False


class SchedulerService:
    """Owns a `Scheduler`, its tickets and its dispatch loop task."""

    def __init__(
        self,
        config: SchedulerConfig,
        backends: Iterable[BackendConfig],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.core = Scheduler(config, backends)
        self.clock = clock
        self._tickets: dict[str, Ticket] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.immediate = True  # see `submit`

    # lifecycle ------------------------------------------------------------------------------

    @property
    def leading(self) -> bool:
        """In process, the one scheduler holds every queue (a cluster's leader is one of many)."""
        return True

    @property
    def state(self) -> str:
        return "local"

    async def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run())

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """Repeat the step; sleep until woken or until the next clock-driven change."""
        while True:
            self._wake.clear()
            self.dispatch_once()
            wakeup = self.core.next_wakeup()
            timeout = None if wakeup is None else max(0.0, wakeup - self.clock())
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout)

    def dispatch_once(self) -> Step:
        """One step: resolve tickets of dispatched jobs, fail tickets of expired ones."""
        step = self.core.dispatch_once(self.clock())
        for job in step.expired:
            ticket = self._tickets.pop(job.id, None)
            if ticket is not None:
                ticket._fail(QueueTimeout(f"job {job.id} waited past its deadline"))
        for d in step.dispatched:
            ticket = self._tickets.get(d.job.id)
            if ticket is not None:
                ticket._resolve(d.backend, d.band, d.priority)
        for e in step.evicted:
            ticket = self._tickets.get(e.job_id)
            if ticket is not None:
                ticket._request_eviction(e.recall)
        return step

    def _poke(self) -> None:
        self._wake.set()

    # calls from the gateway -----------------------------------------------------------------

    def submit(self, job: Job) -> Ticket:
        """Queue a job; raises QueueFull or NoBackend synchronously. With `immediate`, a job
        alone in the queue gets the step the loop would take next at once, without the two
        loop turns of waking the loop and then the caller. The decision differs from the
        loop's only for jobs that arrive together while slots are free: each takes one as it
        comes, where a loop that ran after all of them would have ordered them by account.
        Once a queue forms, the loop decides. A cluster leader, which takes in a burst of
        submissions at once, sets `immediate` off."""
        self.core.submit(job, self.clock())
        ticket = Ticket(job, self)
        self._tickets[job.id] = ticket
        if self.immediate and self.core.queued_jobs == 1:
            self.dispatch_once()
        if ticket.backend is None:
            self._poke()  # it waits: the loop takes it from here (and its deadline)
        return ticket

    def complete(self, ticket: Ticket, real_cost: float | None = None) -> None:
        """The slot is free; the loop is woken only if a queued job may take it."""
        self.core.complete(ticket.job.id, real_cost)
        self._tickets.pop(ticket.job.id, None)
        if self.core.queued_jobs:
            self._poke()

    def cancel(self, ticket: Ticket, real_cost: float | None = None) -> None:
        """Queued: never dispatched. Dispatched: slot released. Unknown/finished: no-op."""
        if ticket.job.id not in self.core.entries or self._tickets.get(ticket.job.id) is not ticket:
            return
        was_queued = self.core.cancel(ticket.job.id, real_cost)
        self._tickets.pop(ticket.job.id, None)
        if was_queued:
            ticket._fail(JobCancelled(f"job {ticket.job.id} cancelled"))
        self._poke()

    def requeue(self, ticket: Ticket, failed_backend: str, unreachable: bool = False) -> None:
        """Back to the head of its queue, never to `failed_backend` (unless it was `unreachable`:
        then closed to all for a while, see `Scheduler.requeue`); await `dispatched()` again.
        Raises NoBackend when no other backend serves the model."""
        try:
            self.core.requeue(ticket.job.id, failed_backend, self.clock() if unreachable else None)
        except Exception:
            self._tickets.pop(ticket.job.id, None)
            raise
        ticket._reset()
        self._poke()

    def preempted(self, ticket: Ticket, real_cost: float) -> None:
        """The evicted job has stopped, having generated `real_cost` worth: back to the head of
        its queue; await `dispatched()` again to resume it."""
        self.core.preempted(ticket.job.id, real_cost, self.clock())
        ticket._reset()
        self._poke()

    def keep_running(self, ticket: Ticket) -> None:
        """Decline an eviction the job cannot survive (it cannot be resumed)."""
        if ticket.job.id in self.core.entries:
            self.core.keep_running(ticket.job.id)
        self._poke()

    def update_metrics(self, backend_name: str, metrics: BackendMetrics) -> None:
        self.core.update_metrics(backend_name, metrics)
        self._poke()

    def cache_events(self, backend_name: str, events: Iterable[CacheEvent]) -> None:
        self.core.apply_cache_events(backend_name, events)

    def configure(
        self, config: SchedulerConfig | None = None, backends: Iterable[BackendConfig] | None = None
    ) -> None:
        self.core.configure(config, backends)
        self._poke()

    def position(self, job_id: str) -> QueuePosition | None:
        """Where a job stands (queued: jobs before it in its band and pool), or None if done."""
        return queue_position(self.core, job_id)

    def snapshot(self) -> SchedulerSnapshot:
        return build_snapshot(self.core, self.clock())

    def backend_full(self, backend_name: str) -> bool:
        """Whether a request sent to the backend now would wait there (`BackendState.is_full`);
        False for one not configured."""
        state = self.core.backends.get(backend_name)
        return state is not None and state.is_full()
