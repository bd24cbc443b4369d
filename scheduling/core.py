"""The synchronous scheduler: queues, fair share, priority bands, gates and backend choice.

Pure and clock-free: every call takes `now`. The asyncio service (`scheduling.service`) owns
waiting and waking; this class owns every decision, so tests and benchmarks drive it directly.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace

from scheduling import preemption
from scheduling.backend_state import BackendMetrics, BackendState
from scheduling.batching import pull_forward
from scheduling.config import BackendConfig, SchedulerConfig
from scheduling.engine_cache import CacheEvent, EngineCacheMirror
from scheduling.errors import NoBackend, QueueFull
from scheduling.fairshare import BandHeap
from scheduling.gate import gate_open
from scheduling.jobs import Dispatch, Eviction, Job, Principal, WithinPrincipal
from scheduling.lanes import (
    DISPATCHED,
    DONE,
    QUEUED,
    Entry,
    Lane,
    PrincipalState,
    create_principal_queue,
)
from scheduling.prefix_index import PrefixIndex, choose_backend

# How long a backend found unreachable stays closed without a healthy scrape (one without
# metrics is then tried again by the next job).
UNREACHABLE_SECONDS = 2.0
IDLE_SWEEP_SECONDS = 1.0
TOTAL_KEYS = ("dispatched", "completed", "cancelled", "expired", "rejected", "evicted", "preempted")


@dataclass(slots=True)
class Step:
    """What one `dispatch_once` decided."""

    dispatched: list[Dispatch] = field(default_factory=list)
    expired: list[Job] = field(default_factory=list)
    evicted: list[Eviction] = field(default_factory=list)


class Scheduler:
    """All scheduling state of one process, behind plain synchronous methods."""

    def __init__(self, config: SchedulerConfig, backends: Iterable[BackendConfig]) -> None:
        self.config = config
        self.backends: dict[str, BackendState] = {}
        self.pools: dict[str, list[BackendState]] = {}
        # Per model: the models whose pools share a backend with its pool (itself included).
        # Their lanes compete for the same slots, so their accounts are compared.
        self._neighbours: dict[str, frozenset[str]] = {}
        self.lanes: dict[tuple[str, int, Principal], Lane] = {}
        self.principals: dict[Principal, PrincipalState] = {}
        self.entries: dict[str, Entry] = {}
        self.heaps: dict[tuple[str, int], BandHeap] = {}
        # Lanes with jobs queued or in flight, per (pool, band): who shares the backend's slots.
        self._active: dict[tuple[str, int], set[Lane]] = {}
        # Lanes that went idle, kept until their accounts no longer matter (`_sweep_idle`).
        self._idle: dict[tuple[str, int, Principal], Lane] = {}
        self._next_sweep = 0.0
        self._deadlines: list[tuple[float, int, Entry]] = []
        self._aging: list[tuple[float, int, int, Entry]] = []
        self.prefixes = PrefixIndex(config.prefix_index_blocks, config.prefix_ttl_seconds)
        self.engine_caches = EngineCacheMirror()
        self._seq = itertools.count()
        self._sent = itertools.count()
        self.preempt_due: float | None = None
        # Per (pool, band): the backend and prompt blocks of the last dispatch, for batching.
        self._last: dict[tuple[str, int], tuple[BackendState, tuple[int, ...]]] = {}
        self.totals = dict.fromkeys(TOTAL_KEYS, 0)
        # Per backend: jobs this `select` holds back to wait for it (their prefix is cached there).
        self._held: Counter[str] = Counter()
        self.batched = 0  # jobs batching pulled forward (outside `totals`: the snapshot's keys)
        # Preemption's decisions by reason (`scheduling.preemption`).
        self.decisions: Counter[str] = Counter()
        self.queued_jobs = 0  # every lane's queued jobs together
        self.configure(config, backends)

    # configuration -------------------------------------------------------------------------

    def configure(
        self, config: SchedulerConfig | None = None, backends: Iterable[BackendConfig] | None = None
    ) -> None:
        """Replace policy and/or backends; queued jobs, accounts and in-flight counts survive."""
        old_policy = self.config.within_principal
        old_aging = self.config.aging_seconds
        if config is not None:
            create_principal_queue(config.within_principal)  # validate before changing anything
            self.config = config
            self.prefixes.block_budget = config.prefix_index_blocks
            self.prefixes.ttl = config.prefix_ttl_seconds
        if backends is not None:
            fresh: dict[str, BackendState] = {}
            for bc in backends:
                state = self.backends.get(bc.name) or BackendState(bc)
                state.config = bc
                fresh[bc.name] = state
            self.backends = fresh
            self.prefixes.forget(set(fresh))
            self.engine_caches.forget(set(fresh))
        self.pools = {}
        for state in self.backends.values():
            if state.config.enabled:
                for model in state.config.models:
                    self.pools.setdefault(model, []).append(state)
        self._neighbours = {
            model: frozenset(
                other for other, others in self.pools.items() if any(b in others for b in pool)
            )
            for model, pool in self.pools.items()
        }
        if self.config.within_principal != old_policy or not self.lanes:
            self._rebuild_lane_queues()
        if self.config.aging_seconds != old_aging:
            self._rebuild_aging()

    def _rebuild_lane_queues(self) -> None:
        by_lane: dict[int, list[Entry]] = {}
        for entry in self.entries.values():
            if entry.state == QUEUED and entry.lane is not None:
                by_lane.setdefault(id(entry.lane), []).append(entry)
        for lane in self.lanes.values():
            lane.queue = create_principal_queue(lane.policy or self.config.within_principal)
            for entry in sorted(by_lane.get(id(lane), ()), key=lambda e: e.seq):
                lane.queue.push(entry)

    def _rebuild_aging(self) -> None:
        self._aging = []
        for entry in self.entries.values():
            if entry.state == QUEUED:
                self._schedule_aging(entry)

    def _schedule_aging(self, entry: Entry) -> None:
        own = entry.job.policy.aging_seconds
        period = self.config.aging_seconds if own is None else (own or None)
        lane = entry.lane
        if period is None or lane is None or lane.band <= 0 or entry.job.enqueued_at is None:
            return
        steps = entry.job.band - lane.band + 1
        due = entry.job.enqueued_at + period * steps
        heapq.heappush(self._aging, (due, entry.seq, lane.band, entry))

    # intake ---------------------------------------------------------------------------------

    def submit(self, job: Job, now: float) -> None:
        """Queue `job`. Raises NoBackend if no enabled backend serves its model, QueueFull if
        its principal already has `max_queued` jobs waiting."""
        if job.id in self.entries:
            raise ValueError(f"job id {job.id!r} is already live")
        pool = self.pools.get(job.model, ())
        if not any(job.backends is None or s.name in job.backends for s in pool):
            self.totals["rejected"] += 1
            raise NoBackend(f"no backend serves model {job.model!r}")
        pstate = self.principals.setdefault(job.principal, PrincipalState())
        if pstate.queued >= job.policy.max_queued:
            self.totals["rejected"] += 1
            raise QueueFull(self.config.queue_full_retry_after)
        job.enqueued_at = now
        entry = Entry(job=job, seq=next(self._seq))
        self.entries[job.id] = entry
        lane = self._lane(job.model, job.band, job.principal, job.policy.within_principal)
        self._enqueue(entry, lane, front=False)
        self._schedule_expiry(entry)
        self._schedule_aging(entry)

    def taken_over(self, job_id: str, now: float) -> None:
        """A queued job adopted from a scheduler now gone, which knew when its principal's
        queue last moved: the take-over counts as a move, so its patience starts again."""
        entry = self.entries[job_id]
        moved = self.principals[entry.job.principal].moved_at
        moved[entry.job.model] = max(moved.get(entry.job.model, now), now)
        self._schedule_expiry(entry)

    def _lane(
        self, model: str, band: int, principal: Principal, policy: WithinPrincipal | None = None
    ) -> Lane:
        """The lane, made with `policy` (None: the scheduler's) if it does not exist yet."""
        key = (model, band, principal)
        lane = self.lanes.get(key)
        if lane is None:
            queue = create_principal_queue(policy or self.config.within_principal)
            lane = Lane(model, band, principal, queue, policy=policy)
            self.lanes[key] = lane
        return lane

    def _heap(self, model: str, band: int) -> BandHeap:
        heap = self.heaps.get((model, band))
        if heap is None:
            heap = self.heaps[(model, band)] = BandHeap()
        return heap

    def _enqueue(self, entry: Entry, lane: Lane, front: bool, lift: bool = True) -> None:
        heap = self._heap(lane.model, lane.band)
        if lane.live == 0 and lift:
            # Returning from idle: no banked credit, start level with what the least served
            # backlogged principal of every pool sharing a backend with its own (their accounts
            # are compared) has been served so far, its work in flight not counted as served.
            floor = self._floor(lane.model, lane.band)
            if floor is not None and floor > lane.service:
                lane.service = floor
        entry.state = QUEUED
        entry.lane = lane
        if front:
            lane.queue.push_front(entry)
        else:
            lane.queue.push(entry)
        lane.live += 1
        self._active.setdefault((lane.model, lane.band), set()).add(lane)
        self.principals[lane.principal].queued += 1
        self.queued_jobs += 1
        if lane.live == 1 or lane.token is None:
            heap.push(lane)

    def _floor(self, model: str, band: int) -> float | None:
        """The service a lane returning from idle starts with: the least that a principal with
        work queued or in flight in the band has been served (SFQ's virtual time, every job in
        flight counted as still to be served). Starting there, a returning light user is behind
        a flood by the flood's work in flight, so it may preempt; no further: it banked nothing
        while idle. O(active lanes), paid only by a lane returning from idle."""
        served = [
            lane.service - lane.running
            for other in self._neighbours.get(model, (model,))
            for lane in self._active.get((other, band), ())
        ]
        return min(served, default=None)

    def _unqueue(self, entry: Entry) -> Lane:
        lane = entry.lane
        assert lane is not None
        entry.where = None
        lane.live -= 1
        self._forget_if_idle(lane)
        self.principals[lane.principal].queued -= 1
        self.queued_jobs -= 1
        return lane

    # decisions ------------------------------------------------------------------------------

    def dispatch_once(self, now: float) -> Step:
        """One scheduling step: expire, age, dispatch all that the gates allow, then make room
        where a job has waited past its `preempt_after` with every slot busy."""
        for state in self.backends.values():
            if state.unreachable_until is not None and state.unreachable_until <= now:
                state.unreachable_until = None  # spent: it must not stay a wake-up time
        if now >= self._next_sweep:
            self._sweep_idle()
            self._next_sweep = now + IDLE_SWEEP_SECONDS
        expired = self.expire(now)
        dispatched = self.select(now)
        return Step(dispatched=dispatched, expired=expired, evicted=self.preempt(now))

    def expire(self, now: float) -> list[Job]:
        """Remove queued jobs past their deadline or their patience (`Job`); they are never
        dispatched. One whose principal's queue moved meanwhile is looked at again later."""
        out: list[Job] = []
        while self._deadlines and self._deadlines[0][0] <= now:
            entry = heapq.heappop(self._deadlines)[2]
            if entry.state != QUEUED or entry.where is None or entry.preempted:
                continue
            if (at := self._expiry(entry)) is not None and at > now:
                heapq.heappush(self._deadlines, (at, entry.seq, entry))
                continue
            self._unqueue(entry)
            self._finish(entry, "expired")
            out.append(entry.job)
        return out

    def _expiry(self, entry: Entry) -> float | None:
        """When a queued job expires: at its deadline, or once its principal's queue for its
        model has moved for the last time `patience` seconds before, whichever comes first."""
        job = entry.job
        moved = self.principals[job.principal].moved_at.get(job.model, 0.0)
        return job.expires_at(max(job.enqueued_at or 0.0, moved))

    def _schedule_expiry(self, entry: Entry) -> None:
        if (at := self._expiry(entry)) is not None:
            heapq.heappush(self._deadlines, (at, entry.seq, entry))

    def _age(self, now: float) -> None:
        while self._aging and self._aging[0][0] <= now:
            _, _, from_band, entry = heapq.heappop(self._aging)
            lane = entry.lane
            if entry.state != QUEUED or entry.where is None or lane is None:
                continue
            if lane.band != from_band or lane.band <= 0:
                continue  # a duplicate left by a requeue, or already promoted
            self._unqueue(entry)
            promoted = self._lane(lane.model, lane.band - 1, lane.principal, lane.policy)
            self._enqueue(entry, promoted, False)
            self._schedule_aging(entry)

    def select(self, now: float) -> list[Dispatch]:
        """Dispatch while gates allow: bands in strict order; inside a band, the pool whose
        least-served principal has the least service (pools that share a backend compete by
        account, so a principal on an expensive model uses its share faster; pools on
        different backends do not compete, each dispatches while its gates allow); the
        least-served principal inside a pool and band."""
        self._age(now)
        self._held.clear()
        out: list[Dispatch] = []
        deferred: list[Lane] = []
        bands = sorted({band for (_, band), heap in self.heaps.items() if heap})
        for band in bands:
            pools = [m for (m, b), heap in self.heaps.items() if b == band and heap]
            while pools:
                model = min(pools, key=lambda m: self.heaps[(m, band)].min_service() or 0.0)
                dispatch = self._dispatch_one(model, band, now, deferred)
                if dispatch is None:
                    pools.remove(model)
                else:
                    out.append(dispatch)
        for lane in deferred:
            if lane.live > 0 and lane.token is None:
                self._heap(lane.model, lane.band).push(lane)
        return out

    def _dispatch_one(
        self, model: str, band: int, now: float, deferred: list[Lane]
    ) -> Dispatch | None:
        thresholds = self.config.gates.get(band)
        stale_after = self.config.stale_after
        gates = [(s, gate_open(s, thresholds, now, stale_after)) for s in self.pools.get(model, ())]
        open_backends = [s for s, g in gates if g.open]
        full = [s for s, g in gates if g.reason in preemption.FULL]
        if not open_backends:
            return None
        heap = self._heap(model, band)
        while True:
            lane = heap.pop()
            if lane is None:
                return None
            lane, batched_to = self._batch(model, band, lane, open_backends)
            entry = lane.queue.peek()
            if entry is None:
                continue
            pstate = self.principals[lane.principal]
            if pstate.in_flight >= entry.job.policy.max_concurrent:
                pstate.blocked.append(lane)  # back in the heap when one of its jobs finishes
                continue
            if entry.yields():
                deferred.append(lane)
                continue
            candidates = [s for s in open_backends if entry.may_use(s.name)]
            if not candidates:
                deferred.append(lane)
                continue
            homes = [s for s in full if entry.may_use(s.name)]
            backend = batched_to or choose_backend(
                self.prefixes,
                entry.job.prefix_blocks,
                candidates,
                homes,
                now,
                self.config.affinity_slack,
                self._held,
            )
            if backend not in candidates:  # worth waiting for: its backend holds its prefix
                self._held[backend.name] += 1
                deferred.append(lane)
                continue
            lane.queue.pop()
            self._unqueue(entry)
            entry.dispatched_at = now
            if entry.preempted:
                entry.resumed_at = now
            self.principals[lane.principal].moved_at[model] = now
            self._take_slot(entry, lane, backend)
            self.totals["dispatched"] += 1
            self.prefixes.record(backend.name, entry.job.prefix_blocks, now)
            self._last[(model, band)] = (backend, entry.job.prefix_blocks)
            if lane.live > 0:
                heap.push(lane)
            return Dispatch(entry.job, backend.name, lane.band, self._priority(lane, backend))

    def _batch(
        self, model: str, band: int, least: Lane, open_backends: list[BackendState]
    ) -> tuple[Lane, BackendState | None]:
        """The lane to serve instead of `least` (the least served), and the backend to send it
        to, when batching pulls a similar job forward (see `scheduling.batching`)."""
        c = self.config
        last = self._last.get((model, band))
        if c.batch_slack <= 0 or last is None or last[0] not in open_backends:
            return least, None
        heap = self._heap(model, band)
        pulled = pull_forward(least, heap.lanes(), last[1], c.batch_slack, c.batch_min_blocks)
        head = pulled.queue.peek() if pulled is not None else None
        if pulled is None or head is None or not head.may_use(last[0].name):
            return least, None
        heap.push(least)
        pulled.token = None  # its heap entry goes stale: it is being dispatched
        self.batched += 1
        return pulled, last[0]

    def _take_slot(self, entry: Entry, lane: Lane, backend: BackendState) -> None:
        """Mark `entry` running on `backend`: its charge on the lane's account, its slot counted
        on the lane, the principal and the backend."""
        entry.state = DISPATCHED
        entry.backend = backend.name
        entry.sent = next(self._sent)
        entry.recalled = False
        entry.charged = entry.job.estimated_cost / max(entry.job.policy.weight, 1e-9)
        entry.billed += entry.charged
        lane.service += entry.charged
        lane.running += entry.charged
        lane.dispatches += 1
        lane.in_flight += 1
        self.principals[lane.principal].in_flight += 1
        self._active.setdefault((lane.model, lane.band), set()).add(lane)
        backend.record_dispatch()

    def adopt(self, job: Job, backend: str, now: float, resumed_ago: float | None = None) -> None:
        """Take over a job already running on `backend` (dispatched by a scheduler that is gone):
        its slot and its charge are counted as if this scheduler had dispatched it, so a new
        leader rebuilds in-flight counts and accounts from what the relays hold. A job resumed
        `resumed_ago` seconds ago keeps what is left of its protection from another eviction.
        Raises KeyError for an unknown backend and ValueError for a job id already live."""
        if job.id in self.entries:
            raise ValueError(f"job id {job.id!r} is already live")
        state = self.backends[backend]
        self.principals.setdefault(job.principal, PrincipalState())
        if job.enqueued_at is None:
            job.enqueued_at = now
        entry = Entry(job=job, seq=next(self._seq))
        lane = self._lane(job.model, job.band, job.principal, job.policy.within_principal)
        entry.lane = lane
        entry.dispatched_at = now
        if resumed_ago is not None:
            entry.resumed_at = now - resumed_ago
        self.entries[job.id] = entry
        self._take_slot(entry, lane, state)

    def adopt_paused(self, job: Job, now: float) -> None:
        """Take over a job that a scheduler now gone paused to make room and had not resumed:
        as `preempted` left it, at the head of its lane, never expiring (its client has had
        part of its answer). Raises NoBackend if no backend serves its model any more and
        ValueError for a job id already live."""
        if job.id in self.entries:
            raise ValueError(f"job id {job.id!r} is already live")
        if not self.pools.get(job.model):
            raise NoBackend(f"no backend serves model {job.model!r}")
        self.principals.setdefault(job.principal, PrincipalState())
        if job.enqueued_at is None:
            job.enqueued_at = now
        entry = Entry(job=job, seq=next(self._seq))
        entry.preempted = True
        self.entries[job.id] = entry
        lane = self._lane(job.model, job.band, job.principal, job.policy.within_principal)
        self._enqueue(entry, lane, front=True, lift=False)

    # outcomes -------------------------------------------------------------------------------

    def complete(self, job_id: str, real_cost: float | None = None) -> None:
        """The job finished: free its slot and correct its principal's account to the real cost."""
        entry = self._dispatched(job_id)
        self._release(entry)
        lane = entry.lane
        assert lane is not None
        if real_cost is not None:
            delta = real_cost / max(entry.job.policy.weight, 1e-9) - entry.billed
            if delta:
                lane.service += delta
                if lane.token is not None:
                    self._heap(lane.model, lane.band).push(lane)
        self._finish(entry, "completed")

    def cancel(self, job_id: str, real_cost: float | None = None) -> bool:
        """Client gone. Queued: removed at once, returns True. Dispatched: released as if
        completed (at the estimate unless `real_cost` is given), returns False."""
        entry = self.entries.get(job_id)
        if entry is None:
            return False
        if entry.state == QUEUED:
            self._unqueue(entry)
            self._finish(entry, "cancelled")
            return True
        self.complete(job_id, real_cost)
        return False

    def requeue(
        self, job_id: str, failed_backend: str, unreachable_at: float | None = None
    ) -> None:
        """The backend failed before the first token: release it, refund the charge, put the job
        back at the head of its principal's lane, and never choose `failed_backend` for it again.
        Raises NoBackend (and drops the job as rejected) when no other backend is left.

        `unreachable_at`: the backend could not be reached at all (at that time). It is closed
        to every job for `UNREACHABLE_SECONDS` or until a healthy scrape, and this job is not
        barred from it: it waits, within its deadline, for the backend to come back, or goes
        to another of the pool."""
        entry = self._dispatched(job_id)
        self._release(entry)
        lane = entry.lane
        assert lane is not None
        lane.service -= entry.charged
        entry.billed -= entry.charged
        if unreachable_at is None:
            entry.excluded.add(failed_backend)
        elif (state := self.backends.get(failed_backend)) is not None:
            state.unreachable_until = unreachable_at + UNREACHABLE_SECONDS
        if not any(entry.may_use(s.name) for s in self.pools.get(lane.model, ())):
            self._finish(entry, "rejected")
            raise NoBackend(f"no backend left for model {lane.model!r}")
        entry.backend = None
        self._enqueue(entry, lane, front=True, lift=False)
        self._schedule_expiry(entry)
        self._schedule_aging(entry)

    # preemption ------------------------------------------------------------------------------

    def preempt(self, now: float) -> list[Eviction]:
        """The evictions to make now, as `scheduling.preemption.decide` plans them: each
        victim marked evicting (and, where it makes room for a waiter, yielding to it and
        counted against its backend's per-second bound), each decision counted, and the time
        to look again noted."""
        plan = preemption.decide(
            now, self.config, self.heaps, self.pools, self.entries.values(), self.principals
        )
        self.preempt_due = plan.due
        for decision in plan.decisions:
            self.decisions[decision.reason] += 1
            if decision.head is not None:
                decision.head.held_for = decision.reason
        return [self._evict(victim, now) for victim in plan.victims]

    def _evict(self, victim: preemption.Victim, now: float) -> Eviction:
        entry, backend, waiter = victim.entry, victim.backend, victim.waiter
        entry.evicting = True
        entry.yield_to = waiter
        entry.yield_mark = waiter.dispatches
        if victim.recall:
            entry.recalled = True  # it had not started: nothing else of an eviction applies
        else:
            if victim.generated is not None:
                entry.generated = victim.generated
            entry.evictions += 1
            backend.evicting += 1
            backend.evicted_at.append(now)
        self.totals["evicted"] += 1
        return Eviction(entry.job.id, backend.name, victim.recall)

    def preempted(self, job_id: str, real_cost: float, now: float) -> None:
        """The relay stopped the evicted job, which had generated `real_cost` worth so far: free
        its slot and put it back at the head of its lane, behind the lane it made room for, to
        be resumed (it never expires there). Its account keeps the charge (corrected to the real
        total when it ends); the resumed run is charged the estimate of what is left. A job
        called back from the engine's queue goes back to the head of its lane as it was."""
        entry = self._dispatched(job_id)
        recalled = entry.recalled
        self._release(entry)
        lane = entry.lane
        assert lane is not None
        entry.job.estimated_cost = max(0.0, entry.job.estimated_cost - real_cost)
        # Called back before it started: queued again as it was, not a paused job to resume.
        entry.preempted = entry.preempted or not recalled
        entry.backend = None
        self.totals["preempted"] += 1
        self._enqueue(entry, lane, front=True, lift=False)
        if recalled and not entry.preempted:
            self._schedule_expiry(entry)

    def keep_running(self, job_id: str) -> None:
        """The relay cannot stop this job without harm (it cannot be resumed): the eviction is
        dropped and the job is never chosen again."""
        entry = self._dispatched(job_id)
        backend = self.backends.get(entry.backend or "")
        if entry.evicting and not entry.recalled and backend is not None:
            backend.evicting -= 1
        entry.evicting = entry.recalled = False
        entry.job.policy = replace(entry.job.policy, preemptible=False)

    def _forget_if_idle(self, lane: Lane) -> None:
        if lane.live == 0 and lane.in_flight == 0:
            self._active.get((lane.model, lane.band), set()).discard(lane)
            self._idle[(lane.model, lane.band, lane.principal)] = lane

    def _sweep_idle(self) -> None:
        """Forget idle lanes whose accounts no longer matter, and their principals' counters
        once those are zero; without this every principal ever seen stays in memory. An idle
        lane's account matters only while it is above the floor a returning lane is lifted to
        (its debt from the work it was served); at or below it, or with nobody active to be
        compared with, a new lane starts where it would. O(idle lanes), once a second."""
        floors: dict[tuple[str, int], float | None] = {}
        for key, lane in list(self._idle.items()):
            if lane.live or lane.in_flight:
                del self._idle[key]  # active again
                continue
            group = (lane.model, lane.band)
            if group not in floors:
                floors[group] = self._floor(*group)
            floor = floors[group]
            if floor is not None and lane.service > floor:
                continue
            del self._idle[key]
            if self.lanes.get(key) is lane:
                del self.lanes[key]
            pstate = self.principals.get(lane.principal)
            if pstate is not None and pstate.queued == 0 and pstate.in_flight == 0:
                del self.principals[lane.principal]

    def active_lanes(self) -> Iterator[Lane]:
        """Every lane with work queued or in flight, in no order."""
        for lanes in self._active.values():
            yield from lanes

    def _priority(self, lane: Lane, backend: BackendState) -> int:
        """The coarse priority handed to a backend that schedules by priority (lower first):
        two steps per band, the second for a principal over its fair share of the backend's
        slots (its in-flight jobs beyond capacity / principals active in the band), so a light
        user's request that does reach the backend's queue goes ahead of the flood's."""
        sharing = len(self._active.get((lane.model, lane.band), ())) or 1
        slots = backend.capacity or backend.config.max_in_flight
        over = lane.in_flight > max(1.0, slots / sharing)
        return 2 * lane.band + int(over)

    def _dispatched(self, job_id: str) -> Entry:
        entry = self.entries.get(job_id)
        if entry is None or entry.state != DISPATCHED:
            raise KeyError(f"job {job_id!r} is not dispatched")
        return entry

    def _release(self, entry: Entry) -> None:
        lane = entry.lane
        assert lane is not None
        backend = self.backends.get(entry.backend or "")
        if backend is not None:
            backend.record_release()
            if entry.evicting and not entry.recalled:
                backend.evicting -= 1
        entry.evicting = False
        lane.in_flight -= 1
        lane.running = max(0.0, lane.running - entry.charged)
        self._forget_if_idle(lane)
        pstate = self.principals[lane.principal]
        pstate.in_flight -= 1
        blocked, pstate.blocked = pstate.blocked, []
        for b in blocked:
            if b.live > 0 and b.token is None:
                self._heap(b.model, b.band).push(b)

    def _finish(self, entry: Entry, outcome: str) -> None:
        entry.state = DONE
        self.totals[outcome] += 1
        del self.entries[entry.job.id]

    # backend state --------------------------------------------------------------------------

    def update_metrics(self, backend: str, metrics: BackendMetrics) -> None:
        state = self.backends.get(backend)
        if state is not None:
            state.record_scrape(metrics)

    def apply_cache_events(self, backend: str, events: Iterable[CacheEvent]) -> None:
        """What the backend's prefix cache stored and evicted, as it published (KV events)."""
        if backend in self.backends:
            self.engine_caches.apply(backend, events, self.prefixes)

    def next_wakeup(self) -> float | None:
        """The next time a clock-driven change (expiry, aging, a waiter's `preempt_after`) can
        happen, or None."""
        times = [t[0] for t in (self._deadlines[:1] + self._aging[:1])]
        if self.preempt_due is not None:
            times.append(self.preempt_due)
        times += [s.unreachable_until for s in self.backends.values() if s.unreachable_until]
        return min(times) if times else None
