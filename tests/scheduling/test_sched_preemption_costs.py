"""Preemption pays for itself: with the engine's costs learned from its metrics, a waiter
evicts a running job only where the next natural completion is further off than pausing and
resuming that job costs the engine; the victim is the one cheapest to resume. Every decision is
counted by reason."""

from __future__ import annotations

import logging
from typing import Any

from sched_helpers import ALICE, BOB, CHARLIE, fresh, job, scheduler

from scheduling import BackendConfig, GateThresholds, Job, Scheduler

GATES = {b: GateThresholds(max_waiting=1, max_tpot_seconds=None) for b in (0, 1)}
STEP, PREFILL = 0.08, 0.004  # the real vLLM's CPU build under the flood (docs/BENCHMARKS.md)


def pool(learned: bool = True) -> Scheduler:
    backend = BackendConfig("b1", frozenset({"m"}), capacity=2, preemption=True)
    s = scheduler(backend, gates=GATES)
    scrape(s, 0.0, learned)
    return s


def scrape(s: Scheduler, now: float, learned: bool = True) -> None:
    costs: dict[str, Any] = {"tpot": STEP, "prefill_seconds_per_token": PREFILL}
    s.update_metrics("b1", fresh(now, **(costs if learned else {"tpot": None})))


def running(s: Scheduler, *prompts: int, output: int = 64) -> list[Job]:
    jobs = []
    for i, prompt in enumerate(prompts):
        j = job(ALICE, preemptible=True, max_concurrent=64, estimated_prompt_tokens=prompt,
                estimated_output_tokens=output)  # fmt: skip
        s.submit(j, 0.0)
        s.select(i * 0.001)
        jobs.append(j)
    return jobs


def waiter(s: Scheduler, at: float) -> Job:
    """A job of a higher band: any running job of the flood is a candidate."""
    j = job(BOB, band=0, preempt_after=0.0, estimated_prompt_tokens=40, estimated_output_tokens=16)
    s.submit(j, at)
    return j


def test_a_waiter_waits_for_a_job_that_ends_sooner_than_a_pause_would_cost():
    s = pool()
    running(s, 40, 40)
    # At 5.0 s each has about 60 of its 64 tokens: it ends in about 0.3 s, and pausing one
    # would cost a step and the prefill of 100 tokens (about 0.5 s).
    scrape(s, 5.0)
    waiter(s, 5.0)
    assert s.dispatch_once(5.0).evicted == []
    assert s.decisions == {"wait_for_completion": 1}


def test_a_waiter_looks_again_when_the_job_it_waits_for_should_have_ended():
    s = pool()
    running(s, 40, 40)
    scrape(s, 5.0)
    waiter(s, 5.0)
    s.dispatch_once(5.0)
    assert 5.0 < s.next_wakeup() < 5.5


def test_a_wait_is_counted_once_however_often_the_scheduler_looks():
    s = pool()
    running(s, 40, 40)
    waiter(s, 5.0)
    for now in (5.0, 5.01, 5.02):
        scrape(s, now)
        s.dispatch_once(now)
    assert s.decisions["wait_for_completion"] == 1


def test_a_waiter_evicts_where_the_next_completion_is_further_off_than_the_pause():
    s = pool()
    flood = running(s, 40, 40)
    scrape(s, 1.0)
    waiter(s, 1.0)
    # About 10 tokens each: 54 to go (over 4 s) against a pause of about 0.3 s.
    assert [e.job_id for e in s.dispatch_once(1.0).evicted] == [flood[-1].id]
    assert s.decisions == {"evict_pays": 1}


def test_the_victim_is_the_job_cheapest_to_resume():
    s = pool()
    short, _long = running(s, 10, 1000, output=2000)
    scrape(s, 6.0)
    waiter(s, 6.0)
    assert [e.job_id for e in s.dispatch_once(6.0).evicted] == [short.id]


def test_before_the_costs_are_learned_a_waiter_evicts_by_the_bounds_alone():
    s = pool(learned=False)
    flood = running(s, 40, 40)
    scrape(s, 5.0, learned=False)
    waiter(s, 5.0)
    assert [e.job_id for e in s.dispatch_once(5.0).evicted] == [flood[-1].id]
    assert s.decisions == {"evict_costs_unknown": 1}


def test_the_costs_are_learned_from_the_scrapes_smoothed():
    s = pool()
    for now in (0.25, 0.5, 0.75):
        s.update_metrics("b1", fresh(now, tpot=0.2, prefill_seconds_per_token=0.01))
    costs = s.backends["b1"].costs
    assert STEP < costs.step_seconds < 0.2
    assert PREFILL < costs.prefill_seconds_per_token < 0.01


def test_each_decision_is_explained_in_one_debug_line(caplog):
    s = pool()
    running(s, 40, 40)
    waiter(s, 5.0)
    with caplog.at_level(logging.DEBUG, logger="scheduling.preemption"):
        for now in (5.0, 5.01):
            scrape(s, now)
            s.dispatch_once(now)
    (line,) = caplog.messages
    assert "waits on b1" in line and "a slot frees in about" in line


def test_a_second_waiter_evicts_where_only_the_first_has_a_completion_coming_soon():
    """The first waiter takes the next completion; the second's is the one after it."""
    s = pool()
    ending = job(ALICE, preemptible=True, max_concurrent=64, estimated_prompt_tokens=100,
                 estimated_output_tokens=62)  # fmt: skip
    s.submit(ending, 0.0)
    s.select(0.0)
    scrape(s, 4.5)
    fresh_start = job(ALICE, preemptible=True, max_concurrent=64, estimated_prompt_tokens=100,
                      estimated_output_tokens=64)  # fmt: skip
    s.submit(fresh_start, 4.5)
    s.select(4.5)
    scrape(s, 5.0)
    waiter(s, 5.0)
    s.submit(job(CHARLIE, band=0, preempt_after=0.0, estimated_output_tokens=16), 5.0)
    # The first ends in about 0.36 s, sooner than a pause (about 0.49 s): the first waiter
    # waits for it; the other ends in about 5 s: the second waiter evicts it.
    assert [e.job_id for e in s.dispatch_once(5.0).evicted] == [fresh_start.id]
    assert s.decisions == {"wait_for_completion": 1, "evict_pays": 1}
