"""Strict priority between bands, and the article's example played through the scheduler."""

from __future__ import annotations

from sched_helpers import ALICE, BOB, fresh, ids, job, metered, plain, scheduler

from scheduling import BATCH, INTERACTIVE, STANDARD, BackendMetrics, GateThresholds


def test_it_dispatches_a_higher_band_first() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(ALICE, band=BATCH), 0.0)
    s.submit(job(ALICE, band=STANDARD), 0.0)
    s.submit(i := job(BOB, band=INTERACTIVE), 0.0)
    assert ids(s.select(0.0)) == [i.id]


def test_it_dispatches_a_lower_band_when_the_higher_one_is_empty() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(b := job(ALICE, band=BATCH), 0.0)
    assert ids(s.select(0.0)) == [b.id]


def test_it_dispatches_interactive_until_the_backend_queue_reaches_three() -> None:
    s = scheduler(metered())
    s.update_metrics("b1", fresh(waiting=1))
    for _ in range(5):
        s.submit(job(ALICE, band=INTERACTIVE), 0.0)
    assert len(s.select(0.0)) == 2  # 1 waiting + 2 dispatched = 3: closed


def test_it_holds_batch_while_the_backend_queue_is_not_empty() -> None:
    s = scheduler(metered())
    s.update_metrics("b1", fresh(waiting=1))
    s.submit(job(ALICE, band=BATCH), 0.0)
    assert s.select(0.0) == []


def test_it_dispatches_one_batch_job_on_an_empty_backend_queue() -> None:
    s = scheduler(metered())
    s.update_metrics("b1", fresh(waiting=0))
    for _ in range(3):
        s.submit(job(ALICE, band=BATCH), 0.0)
    assert len(s.select(0.0)) == 1


def test_it_holds_all_bands_when_tpot_exceeds_150ms() -> None:
    s = scheduler(metered())
    s.update_metrics("b1", fresh(waiting=0, tpot=0.2))
    s.submit(job(ALICE, band=INTERACTIVE), 0.0)
    s.submit(job(BOB, band=BATCH), 0.0)
    assert s.select(0.0) == []


def test_it_resumes_when_a_new_scrape_shows_the_queue_drained() -> None:
    s = scheduler(metered())
    s.update_metrics("b1", fresh(waiting=3))
    s.submit(j := job(ALICE, band=INTERACTIVE), 0.0)
    assert s.select(0.0) == []
    s.update_metrics("b1", fresh(now=1.0, waiting=0))
    assert ids(s.select(1.0)) == [j.id]


def test_it_holds_everything_on_stale_metrics() -> None:
    s = scheduler(metered(), stale_after=2.0)
    s.update_metrics("b1", fresh(now=0.0))
    s.submit(job(), 3.0)
    assert s.select(3.0) == []


def test_it_holds_everything_on_a_backend_with_metrics_before_the_first_scrape() -> None:
    s = scheduler(metered())
    s.submit(job(), 0.0)
    assert s.select(0.0) == []


def test_it_closes_batch_once_an_interactive_dispatch_fills_an_empty_queue() -> None:
    s = scheduler(metered())
    s.update_metrics("b1", BackendMetrics(waiting=0, healthy=True, scraped_at=0.0))
    s.submit(job(ALICE, band=INTERACTIVE), 0.0)
    s.submit(job(BOB, band=BATCH), 0.0)
    assert [d.band for d in s.select(0.0)] == [INTERACTIVE]


def test_it_lets_a_lower_band_through_when_only_the_higher_bands_gate_is_closed() -> None:
    gates = {
        INTERACTIVE: GateThresholds(max_waiting=3, max_kv_cache_usage=0.5),
        BATCH: GateThresholds(max_waiting=0),
    }
    s = scheduler(metered(), gates=gates)
    s.update_metrics("b1", fresh(waiting=0, kv_cache_usage=0.6))
    s.submit(job(ALICE, band=INTERACTIVE), 0.0)
    s.submit(job(BOB, band=BATCH), 0.0)
    assert [d.band for d in s.select(0.0)] == [BATCH]


def test_it_gates_a_backend_without_metrics_by_max_in_flight_only() -> None:
    s = scheduler(plain(max_in_flight=3))
    for _ in range(5):
        s.submit(job(ALICE, band=BATCH, max_concurrent=10), 0.0)
    assert len(s.select(0.0)) == 3
