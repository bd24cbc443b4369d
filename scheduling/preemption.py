"""Preemption's decisions: where every slot is busy, which running job makes room for a waiter,
and whether making room pays, within the bounds that keep evictions from thrashing.

Decisions only, over a read-only view of the scheduler's state: `decide` returns a `Plan` (the
jobs to stop, the decisions to count, when to look again) and the scheduler applies it
(`Scheduler.preempt`), so the state is written in one place. The relay confirms each eviction
(`Scheduler.preempted`, or `Scheduler.keep_running` where a job cannot be resumed).

Whether it pays: a pause costs the engine the step cut short and the re-prefill of the victim's
prompt and generated text, in the engine's own learned costs (`scheduling.engine_costs`); the
waiter gains the time until a slot would free without it, the next natural completion of the
running jobs (their estimated output left, one token a step). Where that comes sooner than the
pause would cost, the waiter waits for it. Each decision is counted by reason
(`Scheduler.decisions`) and explained in one debug log line."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.backend_state import BackendState
from scheduling.config import SchedulerConfig
from scheduling.fairshare import BandHeap
from scheduling.gate import gate_open
from scheduling.jobs import Principal
from scheduling.lanes import DISPATCHED, Entry, Lane, PrincipalState

log = logging.getLogger(__name__)

# Gate reasons that mean "every slot is busy", the only case in which preemption makes room.
FULL = frozenset({"max_in_flight", "waiting"})

# Decision reasons, as counted in `Scheduler.decisions`.
EVICT_PAYS = "evict_pays"  # the next completion is further off than the pause costs
EVICT_COSTS_UNKNOWN = "evict_costs_unknown"  # the engine's costs are not learned yet
WAIT_FOR_COMPLETION = "wait_for_completion"  # a slot frees sooner than a pause would cost


@dataclass(frozen=True, slots=True, eq=False)
class Victim:
    """A job to stop for `waiter`, the lane it then yields to. `recall`: it is called back
    from the engine's own queue, where it had not started (stopping it costs nothing and is
    no eviction: not counted against the backend's bounds). `generated`: the tokens it has
    likely generated over all its runs, kept for its resume's cost; None where the engine's
    costs are unknown."""

    entry: Entry
    backend: BackendState
    waiter: Lane
    generated: float | None
    recall: bool = False


@dataclass(frozen=True, slots=True)
class Decision:
    """One decision to count, and the waiting job it was taken for (None: none waits), which
    keeps it so that a wait is counted once however often it is weighed again."""

    reason: str
    head: Entry | None


@dataclass(slots=True)
class Plan:
    """What one round of preemption decided: whom to stop, in order, the decisions to count,
    and when to look again (None: nothing will change by the clock alone)."""

    victims: list[Victim] = field(default_factory=list)
    decisions: list[Decision] = field(default_factory=list)
    due: float | None = None

    def look_again(self, at: float) -> None:
        if self.due is None or at < self.due:
            self.due = at


def decide(
    now: float,
    config: SchedulerConfig,
    heaps: Mapping[tuple[str, int], BandHeap],
    pools: Mapping[str, Sequence[BackendState]],
    entries: Collection[Entry],
    principals: Mapping[Principal, PrincipalState],
) -> Plan:
    """Make room where every slot is busy: per (pool, band), each waiting principal whose
    head job has waited past its `preempt_after` (least served first) may evict one running
    job of a lower band, or of its own band where that job started ahead of the waiter's
    turn by more than the eviction costs (see `_Round.victim`), and only where the eviction
    pays (see the module's docstring: the k-th waiter of a round weighs the pause against the
    k-th next completion). A job waiting in a preempting engine's own queue
    (`_Round.note_engine_queues`) is a waiter there too, first in that engine's line, and a
    job there that a waiter should go before is called back (`_Round.recall`). The bounds,
    so evictions never thrash: never a job protected after it ran again, nor one evicted
    `preempt_max_per_job` times; per backend, one eviction at a time (until its relay
    confirms that the upstream request is closed) and `preempt_max_per_backend_second` in
    any second; one per waiter, whose slot the victim does not take back before the
    waiter's lane has had its next dispatch."""
    return _Round(now, config, entries, principals).run(heaps, pools)


class _Round:
    """One call of `decide`: the view it reads, and the victims it has chosen so far, which
    count as evicting for the rest of the round as they will once the plan is applied."""

    def __init__(
        self,
        now: float,
        config: SchedulerConfig,
        entries: Collection[Entry],
        principals: Mapping[Principal, PrincipalState],
    ) -> None:
        self.now = now
        self.config = config
        self.entries = entries
        self.principals = principals
        self.plan = Plan()
        self._stopping: set[Entry] = set()
        self._stopping_on: Counter[str] = Counter()
        # Per backend, our jobs waiting in its own queue, newest first (`note_engine_queues`).
        self.queued: dict[str, list[Entry]] = {}
        self.in_engine: set[Entry] = set()

    def run(
        self,
        heaps: Mapping[tuple[str, int], BandHeap],
        pools: Mapping[str, Sequence[BackendState]],
    ) -> Plan:
        now, c = self.now, self.config
        self.note_engine_queues(pools)
        groups = {k for k, heap in heaps.items() if heap}
        groups |= {(e.job.model, lane.band) for e in self.in_engine if (lane := e.lane)}
        for model, band in sorted(groups, key=lambda k: k[1]):
            pool = pools.get(model, [])
            if not any(s.config.preemption for s in pool):
                continue
            heap = heaps.get((model, band))
            waiters = list(self.waiters(heap)) if heap else []
            queued = [e for e in self.queued_waiters(pool, model, band) if self.due(e)]
            if not waiters and not queued:
                continue
            gates = [gate_open(s, c.gates.get(band), now, c.stale_after) for s in pool]
            if any(g.open or g.reason not in FULL for g in gates):
                continue  # room somewhere, or closed for a reason eviction does not cure
            self.recall(pool, waiters)
            served = {v.waiter for v in self.plan.victims if not v.recall}
            served |= {
                e.yield_to
                for e in self.entries
                if e.evicting and not e.recalled and e.yield_to is not None
            }
            completions = self.completions(pool)
            by_name = {s.name: s for s in pool}
            # First those already in an engine's own queue: first in its line for a slot there.
            for entry in queued:
                lane, backend = entry.lane, by_name[entry.backend or ""]
                if lane is None or lane in served:
                    continue
                victim = self.victim(lane, {backend.name: backend})
                if victim is None:
                    continue
                mine = self.completions([backend])
                natural = mine[0] if mine else None
                if natural in completions:
                    completions.remove(natural)
                if self.pays(entry, victim, backend, natural):
                    self.stop(victim, backend, lane)
                    served.add(lane)
            for waiter in waiters:
                if waiter in served:
                    continue
                victim = self.victim(waiter, by_name)
                if victim is None:
                    break
                backend = by_name[victim.backend or ""]
                # This waiter's natural turn: the next completion not already promised to an
                # earlier waiter of this round.
                natural = completions.pop(0) if completions else None
                head = waiter.queue.peek()
                if head is not None and self.pays(head, victim, backend, natural):
                    self.stop(victim, backend, waiter)
                # else it waits for that completion; the next waiter's comes later
        return self.plan

    def note_engine_queues(self, pools: Mapping[str, Sequence[BackendState]]) -> None:
        """Which of our dispatched jobs wait inside a preempting engine's own queue rather than
        run: on each backend, the newest beyond its capacity (the engine admits in order): those
        sent before the capacity was learned, or before it shrank (once it is known the gate
        sends none there, `scheduling.gate`)."""
        over = {
            s.name: s.in_flight - s.capacity
            for pool in pools.values()
            for s in pool
            if s.config.preemption and s.capacity is not None and s.in_flight > s.capacity
        }
        if not over:
            return
        dispatched = sorted(
            (e for e in self.entries if e.state == DISPATCHED and e.backend in over),
            key=lambda e: e.sent,
            reverse=True,
        )
        for entry in dispatched:
            name = entry.backend or ""
            mine = self.queued.setdefault(name, [])
            if len(mine) < over[name]:
                mine.append(entry)
                self.in_engine.add(entry)

    def queued_waiters(
        self, pool: Sequence[BackendState], model: str, band: int
    ) -> Iterator[Entry]:
        """The jobs of (`model`, `band`) in the engine queues of `pool`, oldest first."""
        for state in pool:
            for entry in reversed(self.queued.get(state.name, [])):
                lane = entry.lane
                mine = lane is not None and lane.model == model and lane.band == band
                if mine and not self.evicting(entry):
                    yield entry

    def due(self, entry: Entry) -> bool:
        """Whether `entry` has waited its `preempt_after` (else notes when it will have)."""
        after, since = entry.job.policy.preempt_after, entry.job.enqueued_at
        if after is None or since is None:
            return False
        if since + after <= self.now:
            return True
        self.plan.look_again(since + after)
        return False

    def evicting(self, entry: Entry) -> bool:
        return entry.evicting or entry in self._stopping

    def evicting_on(self, backend: BackendState) -> int:
        return backend.evicting + self._stopping_on[backend.name]

    def stop(self, entry: Entry, backend: BackendState, waiter: Lane, recall: bool = False) -> None:
        """Plan `entry`'s stop for `waiter`: an eviction that makes room, or a call back from
        the engine's queue, which is not an eviction and does not hold one back."""
        known = backend.costs.known and not recall
        generated = self.generated(entry, backend) if known else None
        self.plan.victims.append(Victim(entry, backend, waiter, generated, recall))
        self._stopping.add(entry)
        if not recall:
            self._stopping_on[backend.name] += 1

    def completions(self, pool: Sequence[BackendState]) -> list[float]:
        """Seconds from now until each running job of the pool is expected to end, soonest
        first: those on backends whose costs are learned and with an estimate of their output,
        not yet past it (an overdue job's end is unknown) and not already being evicted."""
        names = {s.name: s for s in pool if s.costs.known}
        out: list[float] = []
        for entry in self.entries:
            backend = names.get(entry.backend or "")
            if entry.state != DISPATCHED or self.evicting(entry) or backend is None:
                continue
            if entry in self.in_engine or entry.job.estimated_output_tokens <= 0:
                continue
            left = backend.costs.seconds_left(
                entry.job.estimated_output_tokens, self.generated(entry, backend)
            )
            if left > 0:
                out.append(left)
        return sorted(out)

    def generated(self, entry: Entry, backend: BackendState) -> float:
        """Tokens `entry` has likely generated over all its runs (its earlier runs' as
        estimated when they were paused)."""
        prompt = entry.job.estimated_prompt_tokens + int(entry.generated)
        return entry.generated + backend.costs.generated(prompt, self.now - entry.dispatched_at)

    def pause_seconds(self, entry: Entry, backend: BackendState) -> float | None:
        """What pausing `entry` now costs its engine; None where the engine's costs are
        unknown."""
        if not backend.costs.known:
            return None
        return backend.costs.pause_seconds(
            entry.job.estimated_prompt_tokens, self.generated(entry, backend)
        )

    def pays(
        self, head: Entry, victim: Entry, backend: BackendState, natural: float | None
    ) -> bool:
        """Whether evicting `victim` for the waiting job `head` beats waiting `natural` seconds
        for a slot (None: no completion can be foreseen). Counted and logged once per waiting
        job and outcome."""
        pause = self.pause_seconds(victim, backend)
        if pause is not None and natural is not None and natural <= pause:
            self.plan.look_again(self.now + natural)  # when that job should have ended
            if head.held_for != WAIT_FOR_COMPLETION:
                self.plan.decisions.append(Decision(WAIT_FOR_COMPLETION, head))
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
        self.plan.decisions.append(Decision(reason, head))
        log.debug(
            "preemption: %s evicted on %s for %s (%s): next completion in %s, pause costs %s",
            victim.job.id,
            backend.name,
            head.job.id,
            reason,
            "unknown" if natural is None else f"{natural:.3f} s",
            "unknown" if pause is None else f"{pause:.3f} s",
        )
        return True

    def recall(self, pool: Sequence[BackendState], waiters: Sequence[Lane]) -> None:
        """Each waiter calls back the jobs of ours waiting in one preempting engine's own queue
        that it should go before (of a lower band, or of its band with more service), on a
        backend it may use: there, FIFO, that job would take the next slot that frees,
        whatever the waiter evicts. It had not started, so calling it back costs nothing (the
        relay stops a stream that waits for its first chunk at once) and is no eviction: not
        counted against the backend's bounds, not holding back the waiter's own eviction. Like
        an evicted job it yields to the waiter until the waiter's lane is dispatched, or the two
        would trade the place for as long as the waiter cannot take it. A waiter with a call
        back under way asks for no other."""
        calling = {e.yield_to for e in self.entries if e.recalled and e.evicting}
        for waiter in waiters:
            head = waiter.queue.peek()
            if head is None or waiter in calling:
                continue
            for state in pool:
                held = [e for e in self.queued.get(state.name, []) if self.behind(e, waiter)]
                if held and head.may_use(state.name):
                    for entry in held:
                        self.stop(entry, state, waiter, recall=True)
                    break

    def behind(self, held: Entry, waiter: Lane) -> bool:
        """Whether `waiter` should go before `held`, a job of ours in an engine's queue."""
        lane = held.lane
        if lane is None or lane is waiter or self.evicting(held):
            return False
        if not held.job.policy.preemptible:
            return False
        return lane.band > waiter.band or (
            lane.band == waiter.band and lane.service - held.charged > waiter.service
        )

    def waiters(self, heap: BandHeap) -> Iterator[Lane]:
        """Lanes whose head job may preempt now, least served first (the order of `victim`'s
        own test: a waiter with more service has no victim that one with less lacks, its own
        jobs included, so once one finds none no later one can); notes when one may later."""
        for lane in sorted(heap.lanes(), key=lambda x: x.service):
            head = lane.queue.peek()
            busy = self.principals[lane.principal].in_flight
            if head is None or busy >= head.job.policy.max_concurrent:
                continue
            if self.due(head):
                yield lane

    def victim(self, waiter: Lane, pool: Mapping[str, BackendState]) -> Entry | None:
        """The job to evict for `waiter`'s head: of the lowest band below the waiter's if any
        runs, else of its own band and model where the job started ahead of the waiter's turn
        by more than `preempt_slack` times its charge. A job's start is bounded above by its
        principal's service less its charge (what dispatch ordered it by); among candidates,
        the one whose pause costs its engine least (the least prompt and text to prefill
        again), then of the principal with the most service, then the newest. Under fair
        share a backlogged principal is never more than one job's charge ahead of another (the
        least served is dispatched next), so backlogged equals never evict each other: what
        dispatch gives, preemption does not take back. A waiter in an engine's queue is
        weighed with its own charge on its account, as dispatch left it: it was its turn then,
        and nobody's dispatch since can have put another ahead of it."""
        c, now = self.config, self.now
        names = {
            s.name
            for s in pool.values()
            if s.config.preemption and not self.evicting_on(s) and self.allowance(s) > 0
        }
        best: tuple[int, float, float, int] | None = None
        chosen: Entry | None = None
        for entry in self.entries:
            lane = entry.lane
            if (
                entry.state != DISPATCHED
                or self.evicting(entry)
                or entry in self.in_engine
                or not entry.job.policy.preemptible
                or entry.backend not in names
                or lane is None
                or entry.evictions >= c.preempt_max_per_job
                or (
                    entry.resumed_at is not None
                    and now - entry.resumed_at < c.preempt_protect_seconds
                )
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
            pause = self.pause_seconds(entry, pool[entry.backend or ""]) or 0.0
            rank = (lane.band, -pause, lane.service, entry.sent)
            if best is None or rank > best:
                best, chosen = rank, entry
        return chosen

    def allowance(self, backend: BackendState) -> int:
        """How many more evictions its per-second bound allows now; at none, notes when it
        allows one again."""
        left = self.config.preempt_max_per_backend_second
        left -= backend.evictions_in_last_second(self.now)
        if left <= 0:
            self.plan.look_again(backend.evicted_at[0] + 1.0)
        return left
