"""Starvation-freedom with preemption on, at the shipped defaults (hypothesis): random shapes,
weights and bands on a simulated clock, jobs that run for their length and confirm evictions a
tick later, as the gateway's relays do. No principal with work queued waits unserved past a
bound; evictions stay few per completed job and never exceed their per-job and per-backend
bounds; backlogged principals of one band never evict each other."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling import (
    BackendConfig,
    BackendMetrics,
    Job,
    Principal,
    Scheduler,
    SchedulerConfig,
    TierPolicy,
)
from scheduling.lanes import EntryState

TICK = 0.05  # the engine's step, and how often the relays report
PREEMPT_AFTER = 0.05  # the interactive tier's default
TOKENS_PER_SECOND = 40.0  # one sequence's decode rate
SLOW = settings(max_examples=25, deadline=None)


@dataclass(frozen=True)
class Shape:
    """One principal's load: its requests' prompt and answer lengths, weight and band, and
    whether it keeps `depth` requests outstanding (backlogged) or sends one every `gap` s."""

    prompt: int
    answer: int
    weight: float
    band: int
    depth: int
    gap: float


shapes = st.builds(
    Shape,
    prompt=st.integers(10, 800),
    answer=st.integers(5, 200),
    weight=st.sampled_from([1.0, 2.0]),
    band=st.sampled_from([0, 0, 1]),
    depth=st.sampled_from([0, 4, 24]),
    gap=st.floats(0.5, 4.0),
)


@dataclass
class Engine:
    """The scheduler against a simulated engine: `capacity` slots per backend, each running
    job finishing after answer / TOKENS_PER_SECOND seconds of running; the jobs sent beyond
    them wait in the engine's queue, first come first served (a job stopped there is called
    back, not evicted)."""

    shapes: list[Shape]
    backends: int
    capacity: int
    s: Scheduler = field(init=False)
    now: float = 0.0
    left: dict[str, float] = field(default_factory=dict)  # running job -> seconds still to run
    evicting: set[str] = field(default_factory=set)  # evicted jobs, confirmed next tick
    submitted: int = 0
    completed: int = 0
    evictions_by_job: dict[str, int] = field(default_factory=dict)
    evictions_at: dict[str, list[float]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)  # dispatched jobs, in the order sent
    dispatches: dict[int, int] = field(default_factory=dict)  # principal -> dispatches so far
    waiting_since: dict[int, float | None] = field(default_factory=dict)  # principal -> since
    seen_dispatches: dict[int, int] = field(default_factory=dict)  # principal -> at `since`
    longest_wait: dict[int, float] = field(default_factory=dict)
    next_send: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        configs = [
            BackendConfig(f"b{i}", frozenset({"m"}), capacity=self.capacity, preemption=True)
            for i in range(self.backends)
        ]
        self.s = Scheduler(SchedulerConfig(), configs)
        self.scrape()
        for p, shape in enumerate(self.shapes):
            self.waiting_since[p] = None
            self.longest_wait[p] = 0.0
            self.next_send[p] = 0.0
            for _ in range(shape.depth):
                self.send(p)

    def send(self, p: int) -> None:
        shape = self.shapes[p]
        self.submitted += 1
        job = Job(
            f"p{p}-{self.submitted}",
            Principal("t", f"u{p}"),
            "m",
            shape.band,
            TierPolicy(
                weight=shape.weight,
                max_queued=10_000,
                max_concurrent=10_000,
                preemptible=True,
                preempt_after=PREEMPT_AFTER,
            ),
            estimated_cost=cost(shape),
        )
        self.s.submit(job, self.now)
        self.left[job.id] = duration(shape)

    @property
    def evictions(self) -> int:
        return sum(self.evictions_by_job.values())

    def running(self) -> set[str]:
        """The jobs the engines run: on each backend, the first `capacity` dispatched there."""
        out: set[str] = set()
        for name in self.s.backends:
            mine = [
                job_id
                for job_id in self.order
                if (e := self.s.entries.get(job_id)) is not None
                and e.state is EntryState.DISPATCHED
                and e.backend == name
            ]
            out.update(mine[: self.capacity])
        return out

    def scrape(self) -> None:
        for name, state in self.s.backends.items():
            running = min(state.in_flight, self.capacity)
            self.s.update_metrics(
                name,
                BackendMetrics(
                    waiting=state.in_flight - running,
                    running=running,
                    tpot_seconds=0.02,
                    healthy=True,
                    scraped_at=self.now,
                ),
            )

    def tick(self) -> None:
        for job_id in self.evicting:
            shape = self.shapes[principal_of(job_id)]
            ran = duration(shape) - self.left[job_id]
            self.s.preempted(job_id, shape.prompt + 4.0 * ran * TOKENS_PER_SECOND, self.now)
        self.evicting.clear()
        step = self.s.dispatch_once(self.now)
        for d in step.dispatched:
            p = principal_of(d.job.id)
            self.dispatches[p] = self.dispatches.get(p, 0) + 1
            if d.job.id in self.order:
                self.order.remove(d.job.id)
            self.order.append(d.job.id)
        running = self.running()
        for e in step.evicted:
            self.evicting.add(e.job_id)
            if e.job_id in running:
                self.evictions_by_job[e.job_id] = self.evictions_by_job.get(e.job_id, 0) + 1
                self.evictions_at.setdefault(e.backend, []).append(self.now)
        self.watch_waits()
        self.now += TICK
        for job_id in running:
            if job_id not in self.evicting and job_id in self.s.entries:
                self.left[job_id] -= TICK
                if self.left[job_id] <= 1e-9:
                    self.s.complete(job_id)
                    self.order.remove(job_id)
                    self.completed += 1
                    p = principal_of(job_id)
                    if self.shapes[p].depth:
                        self.send(p)  # closed loop: the answer comes, the next request goes
        for p, shape in enumerate(self.shapes):
            if not shape.depth and self.now >= self.next_send[p]:
                self.send(p)
                self.next_send[p] = self.now + shape.gap
        self.scrape()

    def watch_waits(self) -> None:
        """How long each principal of the top band with work has gone without a dispatch."""
        top = min(shape.band for shape in self.shapes)
        for p, shape in enumerate(self.shapes):
            queued = any(
                lane.live for lane in self.s.lanes.values() if lane.principal.user == f"u{p}"
            )
            if shape.band != top or not queued:
                self.waiting_since[p] = None
                continue
            dispatches = self.dispatches.get(p, 0)
            since = self.waiting_since.get(p)
            if since is None or dispatches != self.seen_dispatches.get(p):
                self.waiting_since[p] = self.now
                self.seen_dispatches[p] = dispatches
            else:
                self.longest_wait[p] = max(self.longest_wait[p], self.now - since)


def cost(shape: Shape) -> float:
    """One of its jobs in the tokens unit at the default weights (w_in 1, w_out 4)."""
    return shape.prompt + 4.0 * shape.answer


def charge(shape: Shape) -> float:
    """What one of its jobs adds to its principal's account."""
    return cost(shape) / shape.weight


def principal_of(job_id: str) -> int:
    """The index of the principal a job id ("p<index>-<n>") belongs to."""
    return int(job_id[1:].split("-")[0])


def duration(shape: Shape) -> float:
    return shape.answer / TOKENS_PER_SECOND


def run(shapes: list[Shape], backends: int, capacity: int, seconds: float) -> Engine:
    engine = Engine(shapes, backends, capacity)
    for _ in range(int(seconds / TICK)):
        engine.tick()
    return engine


@SLOW
@given(st.lists(shapes, min_size=2, max_size=5), st.integers(1, 2), st.integers(2, 8))
def test_no_principal_of_the_top_band_waits_unserved_past_a_bound(
    load: list[Shape], backends: int, capacity: int
) -> None:
    engine = run(load, backends, capacity, 30.0)
    # Bound: every slot turns over within the longest job; the least served goes next; a
    # principal is at most one job's charge ahead of the others, which each make up at their
    # own rate (charge per second of one slot), so that lead is gone within the slowest's time.
    longest_job = max(duration(shape) for shape in load)
    lead = max(charge(shape) for shape in load) / min(charge(s) / duration(s) for s in load)
    bound = len(load) * (longest_job + lead) + 1.0
    assert max(engine.longest_wait.values()) <= bound


@SLOW
@given(st.lists(shapes, min_size=2, max_size=5), st.integers(1, 2), st.integers(2, 8))
def test_evictions_stay_within_their_bounds(
    load: list[Shape], backends: int, capacity: int
) -> None:
    engine = run(load, backends, capacity, 30.0)
    config = engine.s.config
    assert max(engine.evictions_by_job.values(), default=0) <= config.preempt_max_per_job
    for times in engine.evictions_at.values():
        for i, t in enumerate(times):
            within = [u for u in times[i:] if u < t + 1.0]
            assert len(within) <= config.preempt_max_per_backend_second
    assert engine.evictions <= 0.5 * max(engine.completed, 1) + len(load)


@SLOW
@given(
    st.lists(shapes.map(lambda s: Shape(s.prompt, s.answer, s.weight, 0, 24, 0.0)), min_size=2,
             max_size=4),
    st.integers(1, 2),
    st.integers(2, 8),
)  # fmt: skip
def test_backlogged_principals_of_one_band_never_evict_each_other(
    load: list[Shape], backends: int, capacity: int
) -> None:
    engine = run(load, backends, capacity, 20.0)
    assert engine.evictions == 0
    assert all(engine.dispatches.get(p, 0) > 0 for p in range(len(load)))
