"""Dispatch: queue the job, wait for the backend the scheduler gives it, try another backend of
the pool while nothing has reached the client yet, and resume a job the scheduler preempted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from llmserver.backends.upstream import BackendError
from llmserver.cluster.transport import ClusterUnavailable, SchedulerTransport
from llmserver.pipeline.resume import Preempted
from llmserver.wire.errors import (
    ApiError,
    no_backend,
    queue_timeout,
    rate_limited,
    scheduler_unavailable,
    upstream_failed,
    upstream_rejected,
)
from scheduling import Job, NoBackend, QueueFull, QueueTimeout, Ticket


class Attempt(Protocol):
    """One request as dispatch drives it over the backends it is granted."""

    async def forward(self, backend: str, upstream_model: str, priority: int) -> None:
        """Serve the request on `backend` (its own name for the model; the priority to tell a
        backend that schedules by priority). Raises BackendError or Preempted."""
        ...

    def has_output(self) -> bool:
        """Whether anything of the answer has been relayed (no other backend may start it)."""
        ...

    def cost_so_far(self) -> float:
        """What a preempted run generated, in the scheduler's unit."""
        ...


def submit(scheduler: SchedulerTransport, job: Job) -> Ticket:
    try:
        return scheduler.submit(job)
    except (QueueFull, NoBackend) as exc:
        raise refusal(exc, job.model) from None
    except ClusterUnavailable:
        raise scheduler_unavailable() from None


def refusal(exc: QueueFull | NoBackend, model: str) -> ApiError:
    """The scheduler's refusal of a job, at submission (in process) or in place of its grant
    (a remote scheduler)."""
    if isinstance(exc, QueueFull):
        message = "You have too many requests queued; wait for some to finish."
        return rate_limited(message, exc.retry_after, "queue_full")
    return no_backend(model)


async def run_on_pool(
    scheduler: SchedulerTransport,
    ticket: Ticket,
    pool: Mapping[str, str],
    attempt: Attempt,
) -> None:
    """`attempt.forward` on each backend the scheduler grants, until one succeeds; a retryable
    failure before anything was sent goes back to the head of the queue, excluding the backends
    that failed; a preempted job goes back to the head of its queue, charged its cost so far,
    and continues when granted again."""
    failed: set[str] = set()
    while True:
        try:
            backend = await ticket.dispatched()
        except QueueTimeout:
            raise queue_timeout() from None
        except (QueueFull, NoBackend) as exc:
            raise refusal(exc, ticket.job.model) from None
        try:
            await attempt.forward(backend, pool[backend], ticket.priority)
            return
        except Preempted:
            scheduler.preempted(ticket, attempt.cost_so_far())
        except BackendError as exc:
            # Unreachable is down, not busy: closed to every queued job at once, and this one
            # waits (within its deadline) for it to come back or goes to another of the pool.
            # Any other failure: never back to this backend.
            down = exc.unreachable
            if not down:
                failed.add(backend)
            if exc.retryable and not attempt.has_output() and (down or set(pool) - failed):
                try:
                    scheduler.requeue(ticket, backend, unreachable=down)
                    continue
                except NoBackend:
                    pass
            raise as_api_error(exc) from None


def as_api_error(exc: BackendError) -> ApiError:
    """A backend's own refusal (4xx but 429) reaches the client as such; anything else is 502."""
    status = exc.status or 0
    if 400 <= status < 500 and status != 429 and not exc.retryable:
        return upstream_rejected(status, _upstream_message(exc))
    return upstream_failed(exc.message)


def _upstream_message(exc: BackendError) -> str:
    if isinstance(exc.body, dict):
        err = exc.body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
    return exc.message
