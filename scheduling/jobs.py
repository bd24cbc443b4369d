"""The scheduler's vocabulary: who asks (`Principal`), what they ask for (`Job`), and the decision
it makes (`Dispatch`). Plain dataclasses, so the gateway and a future Redis-backed state can share
them.
"""

from __future__ import annotations

from dataclasses import dataclass

# Priority bands, lower first: the one home of their numbers (the tiers' choices use them too).
INTERACTIVE = 0
STANDARD = 1
BATCH = 2
BANDS = (INTERACTIVE, STANDARD, BATCH)


@dataclass(frozen=True, slots=True)
class Principal:
    """The fairness unit: fair share is computed between principals, not between requests."""

    tenant: str
    user: str


@dataclass(slots=True)
class Job:
    """One request waiting for a backend.

    `band` is the priority band (lower goes first); `weight` is the tier's fair-share weight;
    `estimated_cost` is in the configured cost unit (see `scheduling.cost`); `deadline` is on the
    scheduler's clock; `max_queued` and `max_concurrent` are the principal's limits from its tier.
    `preemptible`: the job may be evicted from its backend to make room (and resumed later);
    `preempt_after`: once it has waited this long (seconds) with every slot busy, it may evict
    one (None: it never does).
    """

    id: str
    principal: Principal
    model: str
    band: int
    weight: float = 1.0
    estimated_cost: float = 1.0
    estimated_output_tokens: int = 0
    prefix_key: str | None = None
    deadline: float | None = None
    max_queued: int = 64
    max_concurrent: int = 4
    enqueued_at: float | None = None
    preemptible: bool = False
    preempt_after: float | None = None


@dataclass(frozen=True, slots=True)
class Dispatch:
    """The scheduler's decision: this job goes to this backend now; `priority` is what to tell a
    backend that schedules by priority (see `Scheduler._priority`)."""

    job: Job
    backend: str
    band: int
    priority: int = 0


@dataclass(frozen=True, slots=True)
class Eviction:
    """The scheduler's decision to make room: the job running on `backend` is to stop and go
    back to the head of its queue (its relay confirms with `Scheduler.preempted`)."""

    job_id: str
    backend: str
