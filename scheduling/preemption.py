"""Preemption: where every slot is busy, which running job makes room for a waiter, and whether
making room pays, within the bounds that keep evictions from thrashing. Decisions only; the
scheduler (`scheduling.core`) owns the state they read and counts what they decide, and the
relay confirms each eviction (`Scheduler.preempted`, or `Scheduler.keep_running` where a job
cannot be resumed).

Whether it pays: a pause costs the engine the step cut short and the re-prefill of the victim's
prompt and generated text, in the engine's own learned costs (`scheduling.engine_costs`); the
waiter gains the time until a slot would free without it, the next natural completion of the
running jobs (their estimated output left, one token a step). Where that comes sooner than the
pause would cost, the waiter waits for it. Each decision is counted by reason
(`Scheduler.decisions`) and explained in one debug log line."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from scheduling.backend_state import BackendState
from scheduling.fairshare import BandHeap
from scheduling.gate import gate_open
from scheduling.jobs import Eviction
from scheduling.lanes import DISPATCHED, Entry, Lane

if TYPE_CHECKING:
    from scheduling.core import Scheduler

log = logging.getLogger(__name__)

# Gate reasons that mean "every slot is busy", the only case in which preemption makes room.
FULL = frozenset({"max_in_flight", "waiting"})

# Decision reasons, as counted in `Scheduler.decisions`.
EVICT_PAYS = "evict_pays"  # the next completion is further off than the pause costs
EVICT_COSTS_UNKNOWN = "evict_costs_unknown"  # the engine's costs are not learned yet
WAIT_FOR_COMPLETION = "wait_for_completion"  # a slot frees sooner than a pause would cost


def preempt(sched: Scheduler, now: float) -> list[Eviction]:
    """Make room where every slot is busy: per (pool, band), each waiting principal whose
    head job has waited past its `preempt_after` (least served first) may evict one running
    job of a lower band, or of its own band where that job started ahead of the waiter's
    turn by more than the eviction costs (see `_victim`), and only where the eviction pays
    (see the module's docstring: the k-th waiter of a round weighs the pause against the
    k-th next completion). The bounds, so evictions never thrash: never a job protected
    after it ran again, nor one evicted `preempt_max_per_job` times; per backend, one
    eviction at a time (until its relay confirms that the upstream request is closed) and
    `preempt_max_per_backend_second` in any second; one per waiter, whose slot the victim
    does not take back before the waiter's lane has had its next dispatch."""
    sched.preempt_due = None
    out: list[Eviction] = []
    for model, band in sorted(sched.heaps, key=lambda k: k[1]):
        heap = sched.heaps[(model, band)]
        pool = sched.pools.get(model, [])
        if not heap or not any(s.config.preemption for s in pool):
            continue
        gates = [
            gate_open(s, sched.config.gates.get(band), now, sched.config.stale_after) for s in pool
        ]
        if any(g.open or g.reason not in FULL for g in gates):
            continue  # room somewhere, or closed for a reason eviction does not cure
        waiters = list(_waiters(sched, heap, now))
        if not waiters:
            continue
        out += _clear_engine_queues(sched, pool, now)
        served = {e.yield_to for e in sched.entries.values() if e.evicting}
        completions = _completions(sched, pool, now)
        for waiter in waiters:
            if waiter in served:
                continue
            victim = _victim(sched, waiter, pool, now)
            if victim is None:
                break
            backend = sched.backends[victim.backend or ""]
            # This waiter's natural turn: the next completion not already promised to an
            # earlier waiter of this round.
            natural = completions.pop(0) if completions else None
            if not _pays(sched, waiter, victim, backend, natural, now):
                continue  # it waits for that completion; the next waiter's comes later
            victim.yield_to = waiter
            victim.yield_mark = waiter.dispatches
            out.append(_evict(sched, victim, backend, now))
    return out


def _completions(sched: Scheduler, pool: list[BackendState], now: float) -> list[float]:
    """Seconds from now until each running job of the pool is expected to end, soonest first:
    those on backends whose costs are learned and with an estimate of their output, not yet
    past it (an overdue job's end is unknown) and not already being evicted."""
    names = {s.name: s for s in pool if s.costs.known}
    out: list[float] = []
    for entry in sched.entries.values():
        backend = names.get(entry.backend or "")
        if entry.state != DISPATCHED or entry.evicting or backend is None:
            continue
        if entry.job.estimated_output_tokens <= 0:
            continue
        left = backend.costs.seconds_left(
            entry.job.estimated_output_tokens, _generated(entry, backend, now)
        )
        if left > 0:
            out.append(left)
    return sorted(out)


def _generated(entry: Entry, backend: BackendState, now: float) -> float:
    """Tokens `entry` has likely generated over all its runs (its earlier runs' as estimated
    when they were paused)."""
    prompt = entry.job.estimated_prompt_tokens + int(entry.generated)
    return entry.generated + backend.costs.generated(prompt, now - entry.dispatched_at)


def _pause_seconds(entry: Entry, backend: BackendState, now: float) -> float | None:
    """What pausing `entry` now costs its engine; None where the engine's costs are unknown."""
    if not backend.costs.known:
        return None
    return backend.costs.pause_seconds(
        entry.job.estimated_prompt_tokens, _generated(entry, backend, now)
    )


def _pays(
    sched: Scheduler,
    waiter: Lane,
    victim: Entry,
    backend: BackendState,
    natural: float | None,
    now: float,
) -> bool:
    """Whether evicting `victim` for `waiter` beats waiting `natural` seconds for a slot (None:
    no completion can be foreseen). Counted and logged once per waiting job and outcome."""
    head = waiter.queue.peek()
    pause = _pause_seconds(victim, backend, now)
    if pause is not None and natural is not None and natural <= pause:
        due = now + natural
        if sched.preempt_due is None or due < sched.preempt_due:
            sched.preempt_due = due  # look again when that job should have ended
        if head is not None and head.held_for != WAIT_FOR_COMPLETION:
            head.held_for = WAIT_FOR_COMPLETION
            sched.decisions[WAIT_FOR_COMPLETION] += 1
            log.debug(
                "preemption: %s waits on %s: a slot frees in about %.3f s, a pause of %s "
                "would cost %.3f s",
                head.job.id,
                backend.name,
                natural,
                victim.job.id,
                pause,
            )
        return False
    reason = EVICT_COSTS_UNKNOWN if pause is None else EVICT_PAYS
    sched.decisions[reason] += 1
    if head is not None:
        head.held_for = reason
    log.debug(
        "preemption: %s evicted on %s for %s (%s): next completion in %s, pause costs %s",
        victim.job.id,
        backend.name,
        head.job.id if head is not None else waiter.principal,
        reason,
        "unknown" if natural is None else f"{natural:.3f} s",
        "unknown" if pause is None else f"{pause:.3f} s",
    )
    return True


def _evict(
    sched: Scheduler, entry: Entry, backend: BackendState, now: float, running: bool = True
) -> Eviction:
    """`running`: the job runs on the engine, and its eviction counts against the backend's
    per-second bound; one still in the engine's queue stops at no cost, and does not."""
    if backend.costs.known:
        entry.generated = _generated(entry, backend, now)
    entry.evicting = True
    entry.evictions += 1
    backend.evicting += 1
    if running:
        backend.evicted_at.append(now)
    sched.totals["evicted"] += 1
    return Eviction(entry.job.id, backend.name)


def _clear_engine_queues(sched: Scheduler, pool: list[BackendState], now: float) -> list[Eviction]:
    """Where jobs of ours wait inside a preempting engine's own queue (sent before its
    capacity was learned, or before it shrank), a waiter due to preempt would queue behind
    them there, FIFO, whatever it evicts. So they come back here first: the newest jobs
    sent to the backend, as many as its queue holds (the engine admits in order, so those
    have not started; stopping them costs nothing, and the relay stops a stream that waits
    for its first chunk at once), outside its evictions-per-second bound, which is for
    running work: a waiter's own eviction is not held back by them. From then on the
    gateway's own queue, in fair order, is the only one."""
    out: list[Eviction] = []
    c = sched.config
    for state in pool:
        if not state.config.preemption or state.capacity is None:
            continue
        # Only ours beyond the capacity surely wait there: others' traffic (another
        # gateway's) may be what queues, and ours then runs.
        n = state.in_flight - state.capacity - state.evicting
        if n <= 0:
            continue
        queued_there = sorted(
            (
                e
                for e in sched.entries.values()
                if e.state == DISPATCHED
                and e.backend == state.name
                and not e.evicting
                and e.job.policy.preemptible
                and e.evictions < c.preempt_max_per_job
                and e.resumed_at is None
            ),
            key=lambda e: (e.dispatched_at, e.seq),
            reverse=True,
        )
        out += [_evict(sched, e, state, now, running=False) for e in queued_there[:n]]
    return out


def _waiters(sched: Scheduler, heap: BandHeap, now: float) -> Iterator[Lane]:
    """Lanes whose head job may preempt now, least served first (the order of `_victim`'s
    own test: a waiter with more service has no victim that one with less lacks, its own
    jobs included, so once one finds none no later one can); notes when one may later."""
    for lane in sorted(heap.lanes(), key=lambda x: x.service):
        head = lane.queue.peek()
        busy = sched.principals[lane.principal].in_flight
        if head is None or busy >= head.job.policy.max_concurrent:
            continue
        after = head.job.policy.preempt_after
        if after is None or head.job.enqueued_at is None:
            continue
        due = head.job.enqueued_at + after
        if due <= now:
            yield lane
        elif sched.preempt_due is None or due < sched.preempt_due:
            sched.preempt_due = due


def _victim(sched: Scheduler, waiter: Lane, pool: list[BackendState], now: float) -> Entry | None:
    """The job to evict for `waiter`'s head: of the lowest band below the waiter's if any
    runs, else of its own band and model where the job started ahead of the waiter's turn
    by more than `preempt_slack` times its charge. A job's start is bounded above by its
    principal's service less its charge (what dispatch ordered it by); among candidates,
    the one whose pause costs its engine least (the least prompt and text to prefill
    again), then of the principal with the most service, then the newest. Under fair share a backlogged
    principal is never more than one job's charge ahead of another (the least served is
    dispatched next), so backlogged equals never evict each other: what dispatch gives,
    preemption does not take back."""
    c = sched.config
    names = {
        s.name
        for s in pool
        if s.config.preemption and not s.evicting and _eviction_allowance(sched, s, now) > 0
    }
    best: tuple[int, float, float, float] | None = None
    chosen: Entry | None = None
    for entry in sched.entries.values():
        lane = entry.lane
        if (
            entry.state != DISPATCHED
            or entry.evicting
            or not entry.job.policy.preemptible
            or entry.backend not in names
            or lane is None
            or entry.evictions >= c.preempt_max_per_job
            or (entry.resumed_at is not None and now - entry.resumed_at < c.preempt_protect_seconds)
        ):
            continue
        if lane.band < waiter.band:
            continue
        if lane.band == waiter.band:
            ahead = lane.service - entry.charged - waiter.service
            if (
                lane.model != waiter.model
                or lane is waiter
                or ahead <= c.preempt_slack * entry.charged
            ):
                continue
        backend = sched.backends[entry.backend or ""]
        pause = _pause_seconds(entry, backend, now) or 0.0
        rank = (lane.band, -pause, lane.service, entry.dispatched_at)
        if best is None or rank > best:
            best, chosen = rank, entry
    return chosen


def _eviction_allowance(sched: Scheduler, backend: BackendState, now: float) -> int:
    """How many more evictions its per-second bound allows now; at none, notes when it
    allows one again."""
    left = sched.config.preempt_max_per_backend_second
    left -= backend.evictions_in_last_second(now)
    if left <= 0:
        again = backend.evicted_at[0] + 1.0
        if sched.preempt_due is None or again < sched.preempt_due:
            sched.preempt_due = again
    return left


def yields(entry: Entry) -> bool:
    """An evicted job waits while the lane it was evicted for has a job waiting and has not
    been dispatched since, so the slot it gave up is not taken back; no longer, or a
    backlogged waiter would hold it back for good."""
    lane = entry.yield_to
    if (
        lane is not None
        and lane.dispatches == entry.yield_mark
        and lane.token is not None
        and lane.queue.peek() is not None
    ):
        return True
    entry.yield_to = None
    return False
