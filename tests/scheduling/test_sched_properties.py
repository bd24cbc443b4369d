"""Invariants under random workloads (hypothesis): gates, exactly-once outcomes, band order,
bounded unfairness and weights."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st
from sched_helpers import metered, plain

from scheduling import (
    BackendMetrics,
    Dispatch,
    GateThresholds,
    Job,
    NoBackend,
    Principal,
    QueueFull,
    Scheduler,
    SchedulerConfig,
    TierPolicy,
    gate_open,
)
from scheduling.config import article_gates
from scheduling.lanes import EntryState

PRINCIPALS = [Principal("t", f"u{i}") for i in range(4)]
MODELS = ["m1", "m2"]
BACKENDS = [
    metered("b1", max_in_flight=4, models=["m1"]),
    metered("b2", max_in_flight=3, models=["m1", "m2"]),
    plain("b3", max_in_flight=2, models=["m2"]),
]
FAST = settings(max_examples=60, deadline=None)

submit_op = st.tuples(
    st.just("submit"),
    st.integers(0, 3),
    st.sampled_from(MODELS),
    st.integers(0, 2),
    st.floats(0.5, 5.0),
    st.one_of(st.none(), st.floats(0.1, 10.0)),
)
scrape_op = st.tuples(
    st.just("scrape"),
    st.sampled_from(["b1", "b2", "b3"]),
    st.integers(0, 4),
    st.floats(0.01, 0.2),
    st.sampled_from([True, True, True, False]),
)


@st.composite
def round_(draw: st.DrawFn) -> list[tuple]:
    """One round of load: some jobs arrive, some backends report, some work ends, time passes."""
    ops: list[tuple] = [draw(submit_op) for _ in range(draw(st.integers(0, 6)))]
    ops += [draw(scrape_op) for _ in range(draw(st.integers(0, 3)))]
    ops.append(("select",))
    ops += [
        draw(st.tuples(st.sampled_from(["complete", "cancel", "requeue"]), st.integers(0, 50), st.floats(0.0, 6.0)))
        for _ in range(draw(st.integers(0, 4)))
    ]  # fmt: skip
    ops.append(("tick", draw(st.floats(0.0, 1.5))))
    return ops


ops_strategy = st.lists(round_(), min_size=3, max_size=15).map(
    lambda rs: [o for r in rs for o in r]
)


@dataclass
class Run:
    """Drives a scheduler with random operations, checking every select against shadow state."""

    s: Scheduler = field(
        default_factory=lambda: Scheduler(SchedulerConfig(aging_seconds=None), BACKENDS)
    )
    max_concurrent: int = 3
    now: float = 0.0
    n: int = 0
    submitted: set[str] = field(default_factory=set)
    outcome: dict[str, str] = field(default_factory=dict)
    in_flight: list[str] = field(default_factory=list)
    closed_gate_dispatches: int = 0
    band_violations: int = 0
    double_outcomes: int = 0

    def settle(self, job_id: str, outcome: str) -> None:
        if job_id in self.outcome:
            self.double_outcomes += 1
        self.outcome[job_id] = outcome

    def apply(self, o: tuple) -> None:
        kind = o[0]
        if kind == "submit":
            _, p, model, band, cost, ttl = o
            self.n += 1
            job = Job(
                f"j{self.n}", PRINCIPALS[p], model, band, estimated_cost=cost,
                policy=TierPolicy(max_queued=6, max_concurrent=self.max_concurrent),
                deadline=None if ttl is None else self.now + ttl,
            )  # fmt: skip
            self.submitted.add(job.id)
            try:
                self.s.submit(job, self.now)
            except (QueueFull, NoBackend):
                self.settle(job.id, "rejected")
        elif kind == "scrape":
            _, name, waiting, tpot, healthy = o
            m = BackendMetrics(
                waiting=waiting, tpot_seconds=tpot, healthy=healthy, scraped_at=self.now
            )
            self.s.update_metrics(name, m)
        elif kind == "complete" and self.in_flight:
            self.s.complete(self.in_flight.pop(o[1] % len(self.in_flight)), o[2])
        elif kind == "cancel":
            queued = sorted(i for i, e in self.s.entries.items() if e.state is EntryState.QUEUED)
            if queued and self.s.cancel(queued[o[1] % len(queued)]):
                self.settle(queued[o[1] % len(queued)], "cancelled")
        elif kind == "requeue" and self.in_flight:
            job_id = self.in_flight.pop(o[1] % len(self.in_flight))
            backend = self.s.entries[job_id].backend or ""
            del self.outcome[job_id]
            try:
                self.s.requeue(job_id, backend)
            except NoBackend:
                self.settle(job_id, "rejected")
        elif kind == "tick":
            self.now += o[1]
        elif kind == "select":
            self.step()

    def step(self) -> list[Dispatch]:
        shadow = copy.deepcopy({k: (v.config, v.metrics, v.in_flight, v.dispatched_since_scrape,
                                    v.completed_since_scrape) for k, v in self.s.backends.items()})  # fmt: skip
        queued: dict[tuple[str, int], int] = {}
        for lane in self.s.lanes.values():
            queued[(lane.model, lane.band)] = queued.get((lane.model, lane.band), 0) + lane.live
        step = self.s.dispatch_once(self.now)
        for job in step.expired:
            queued[(job.model, job.band)] -= 1
            self.settle(job.id, "expired")
        states = {}
        for name, (cfg, m, inf, d, c) in shadow.items():
            st_ = self.s.backends[name].__class__(cfg, m, inf, d, c)
            states[name] = st_
        gates = self.s.config.gates
        for d in step.dispatched:
            pool = [b for b in states.values() if d.job.model in b.config.models]
            if not gate_open(states[d.backend], gates.get(d.band), self.now, 2.0).open:
                self.closed_gate_dispatches += 1
            for higher in range(d.band):
                if queued.get((d.job.model, higher), 0) and any(
                    gate_open(b, gates.get(higher), self.now, 2.0).open for b in pool
                ):
                    self.band_violations += 1
            states[d.backend].record_dispatch()
            queued[(d.job.model, d.band)] -= 1
            self.settle(d.job.id, "dispatched")
            self.in_flight.append(d.job.id)
        return step.dispatched

    def drain(self) -> None:
        """Open every gate and finish everything, so each job reaches an outcome."""
        self.s.configure(backends=[plain(b.name, 100, b.models) for b in BACKENDS])
        for _ in range(100):
            self.step()
            for job_id in self.in_flight:
                self.s.complete(job_id, 1.0)
            self.in_flight.clear()
            if not self.s.entries:
                break


@FAST
@given(ops_strategy)
def test_it_never_dispatches_through_a_closed_gate(ops: list[tuple]) -> None:
    run = Run()
    for o in ops:
        run.apply(o)
    run.step()
    assert run.closed_gate_dispatches == 0
    assert all(b.in_flight <= b.config.max_in_flight for b in run.s.backends.values())


@FAST
@given(ops_strategy)
def test_it_gives_every_submitted_job_exactly_one_outcome(ops: list[tuple]) -> None:
    run = Run()
    for o in ops:
        run.apply(o)
    run.drain()
    assert run.double_outcomes == 0
    assert set(run.outcome) == run.submitted
    assert not run.s.entries
    assert run.s.queued_jobs == 0


@FAST
@given(ops_strategy)
def test_it_dispatches_a_higher_band_first_whenever_its_gate_is_open(ops: list[tuple]) -> None:
    # Without the two rules that may rightly hold a higher-band job back: its principal's
    # concurrency limit, and a requeue that excluded the only open backend.
    run = Run(max_concurrent=10_000)
    for o in ops:
        if o[0] != "requeue":
            run.apply(o)
    run.step()
    assert run.band_violations == 0


def backlogged(weights: tuple[float, float], costs: list[float], slots: int) -> Scheduler:
    s = Scheduler(SchedulerConfig(), [plain("b", slots)])
    for i, c in enumerate(costs):
        for p, w in zip(PRINCIPALS[:2], weights, strict=True):
            s.submit(Job(f"{p.user}-{i}", p, "m", 1, estimated_cost=c,
                         policy=TierPolicy(w, max_queued=10_000, max_concurrent=slots)), 0.0)  # fmt: skip
    return s


@FAST
@given(
    st.lists(st.floats(0.5, 8.0), min_size=30, max_size=80),
    st.lists(st.floats(0.0, 8.0), min_size=30, max_size=80),
    st.integers(1, 4),
)
def test_it_keeps_two_backlogged_equal_principals_within_a_few_job_costs(
    costs: list[float], reals: list[float], slots: int
) -> None:
    s = backlogged((1.0, 1.0), costs, slots)
    a, b = (s.lanes[("m", 1, p)] for p in PRINCIPALS[:2])
    in_flight: list[str] = []
    worst = 0.0
    for real in reals:
        in_flight += [d.job.id for d in s.select(0.0)]
        if a.live == 0 or b.live == 0:
            break
        worst = max(worst, abs(a.service - b.service))
        s.complete(in_flight.pop(0), real)
    assert worst <= 3 * 8.0


@FAST
@given(st.lists(st.floats(0.5, 8.0), min_size=30, max_size=80), st.integers(1, 4))
def test_it_keeps_two_backlogged_equal_principals_within_one_job_cost_when_estimates_hold(
    costs: list[float], slots: int
) -> None:
    s = backlogged((1.0, 1.0), costs, slots)
    a, b = (s.lanes[("m", 1, p)] for p in PRINCIPALS[:2])
    in_flight: list[str] = []
    for _ in costs:
        in_flight += [d.job.id for d in s.select(0.0)]
        if a.live == 0 or b.live == 0:
            break
        assert abs(a.service - b.service) <= max(costs) + 1e-9
        s.complete(in_flight.pop(0))


@FAST
@given(st.sampled_from([(1.0, 2.0), (1.0, 3.0), (2.0, 3.0), (1.0, 1.0)]), st.integers(20, 60))
def test_it_honours_weights_in_proportion(weights: tuple[float, float], n: int) -> None:
    s = backlogged(weights, [1.0] * 200, 1)
    counts = {p: 0 for p in PRINCIPALS[:2]}
    for _ in range(n):
        (d,) = s.select(0.0)
        counts[d.job.principal] += 1
        s.complete(d.job.id, 1.0)
    a, b = (counts[p] / w for p, w in zip(PRINCIPALS[:2], weights, strict=True))
    assert abs(a - b) <= 1.0


def test_the_article_gates_are_the_default() -> None:
    assert SchedulerConfig().gates == article_gates()
    assert article_gates()[2] == GateThresholds(max_waiting=0, max_tpot_seconds=0.150)
