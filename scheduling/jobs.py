"""The scheduler's vocabulary: who asks (`Principal`), what they ask for (`Job`), and the decision
it makes (`Dispatch`). Plain dataclasses, so the gateway and a future Redis-backed state can share
them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

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


class WithinPrincipal(StrEnum):
    """The order of one principal's own jobs: as they came, or the shortest answer first."""

    FIFO = "fifo"
    SJF = "sjf"


@dataclass(frozen=True, slots=True)
class TierPolicy:
    """What a tier says about scheduling its principals' jobs: one value, built once when a key
    is loaded and carried whole by each job (also across the cluster's wire).

    `weight` is the fair-share weight; `max_queued` and `max_concurrent` the principal's limits;
    `preemptible`: the job may be evicted from its backend to make room (and resumed later);
    `preempt_after`: once it has waited this long (seconds) with every slot busy, it may evict
    one (None: it never does); `within_principal` and `aging_seconds` (0: no aging): the tier's
    own order and aging period, None: the scheduler's.
    """

    weight: float = 1.0
    max_queued: int = 64
    max_concurrent: int = 4
    preemptible: bool = False
    preempt_after: float | None = None
    within_principal: WithinPrincipal | None = None
    aging_seconds: float | None = None


@dataclass(slots=True)
class Job:
    """One request waiting for a backend.

    `band` is the priority band (lower goes first); `policy` is its tier's; `estimated_cost` is in
    the configured cost unit (see `scheduling.cost`), and its token estimates what preemption
    weighs a pause by (`scheduling.engine_costs`). A queued job expires at its `deadline` (on
    the scheduler's clock), or once its principal's queue for its model has dispatched nothing
    for `patience` seconds: a job deep in its own principal's backlog waits behind that
    principal's own work while it is served, and times out only where the queue stalls.
    `demoted`: admission moved it to a lower band because its tenant is over budget (the
    dashboard says so). `prefix_blocks`: chained hashes of its prompt's leading blocks
    (`scheduling.prefix_index.block_hashes`), what backend choice and batching match on.
    `backends`: the backends of its model's pool that can serve it (those that serve its
    endpoint); None: any of the pool. Its fair share is its model's, whichever endpoint.
    """

    id: str
    principal: Principal
    model: str
    band: int
    policy: TierPolicy = field(default_factory=TierPolicy)
    estimated_cost: float = 1.0
    estimated_output_tokens: int = 0
    estimated_prompt_tokens: int = 0
    prefix_blocks: tuple[int, ...] = ()
    deadline: float | None = None
    patience: float | None = None
    enqueued_at: float | None = None
    demoted: bool = False
    backends: frozenset[str] | None = None

    def expires_at(self, waited_from: float) -> float | None:
        """When it expires if queued, having waited since `waited_from` without its queue
        moving: its deadline, or its patience from then, whichever comes first."""
        if self.patience is None:
            return self.deadline
        stalled = waited_from + self.patience
        return stalled if self.deadline is None else min(self.deadline, stalled)


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
    back to the head of its queue (its relay confirms with `Scheduler.preempted`). `recall`:
    it waits in the engine's own queue and had not started; its stop is no eviction."""

    job_id: str
    backend: str
    recall: bool = False
