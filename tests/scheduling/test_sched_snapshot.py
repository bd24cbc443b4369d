"""The snapshot keeps the shape the dashboard and /metrics consume, and turns into JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from sched_helpers import ALICE, BOB, fresh, job, metered, plain, scheduler

from scheduling import GateThresholds, Scheduler, build_snapshot


def test_it_is_json_serialisable_with_the_agreed_keys() -> None:
    s = scheduler(metered("b1"), plain("b2"))
    s.update_metrics("b1", fresh())
    s.submit(job(ALICE), 0.0)
    snap = json.loads(json.dumps(asdict(build_snapshot(s, 1.0))))
    assert set(snap) == {"at", "queues", "backends", "totals", "preemption"}
    assert set(snap["queues"][0]) == {
        "model",
        "band",
        "tenant",
        "user",
        "depth",
        "in_flight",
        "service",
        "waiting_reason",
    }
    b1 = snap["backends"][0]
    assert {
        "name",
        "models",
        "in_flight",
        "max_in_flight",
        "has_metrics",
        "stale",
        "usable",
        "metrics",
        "gates",
        "step_seconds",
        "prefill_seconds_per_token",
    } <= set(b1)
    assert set(b1["metrics"]) == {
        "waiting",
        "running",
        "kv_cache_usage",
        "tpot_seconds",
        "ttft_seconds",
        "healthy",
        "scraped_at",
        "capacity",
        "prefill_seconds_per_token",
    }
    assert set(snap["totals"]) == {
        "queued",
        "in_flight",
        "dispatched",
        "completed",
        "cancelled",
        "expired",
        "rejected",
        "evicted",
        "preempted",
    }


def test_it_reports_depth_and_in_flight_per_principal() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(ALICE), 0.0)
    s.submit(job(ALICE), 0.0)
    s.submit(job(BOB), 0.0)
    s.select(0.0)
    rows = {q.user: (q.depth, q.in_flight) for q in build_snapshot(s, 0.0).queues}
    assert rows == {"alice": (1, 1), "bob": (1, 0)}


def test_it_reports_a_closed_gate_with_its_reason() -> None:
    s = scheduler(metered())
    (b,) = build_snapshot(s, 0.0).backends
    assert b.metrics is None and b.stale is True and b.usable is False
    assert {g.reason for g in b.gates} == {"no_metrics"}


def test_it_calls_a_fresh_backend_usable_even_while_its_gates_are_closed() -> None:
    s = scheduler(metered(max_in_flight=1))
    s.update_metrics("b1", fresh())
    s.submit(job(ALICE), 0.0)
    s.select(0.0)
    (b,) = build_snapshot(s, 0.0).backends
    assert b.usable is True and {g.reason for g in b.gates} == {"max_in_flight"}


def test_it_counts_totals() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(a := job(), 0.0)
    s.submit(b := job(), 0.0)
    s.select(0.0)
    s.cancel(b.id)
    s.complete(a.id, 1.0)
    t = build_snapshot(s, 0.0).totals
    assert (t["dispatched"], t["completed"], t["cancelled"], t["queued"]) == (1, 1, 1, 0)


def _reason(s: Scheduler, user: str, band: int = 1, now: float = 0.0) -> str:
    (q,) = [q for q in build_snapshot(s, now).queues if q.user == user and q.band == band]
    return q.waiting_reason


def test_a_principal_at_its_concurrency_cap_is_said_to_wait_for_its_cap() -> None:
    s = scheduler(plain(max_in_flight=8))
    s.submit(job(ALICE, max_concurrent=1), 0.0)
    s.submit(job(ALICE, max_concurrent=1), 0.0)
    s.select(0.0)
    assert _reason(s, "alice") == "per-user concurrency cap (1 of 1 in flight)"


def test_a_closed_gate_is_named_with_the_threshold_that_closed_it() -> None:
    s = scheduler(metered(), gates={1: GateThresholds(max_waiting=3, max_tpot_seconds=0.1)})
    s.update_metrics("b1", fresh(tpot=0.2))
    s.submit(job(ALICE), 0.0)
    s.select(0.0)
    assert _reason(s, "alice") == "gate closed: b1 tpot >= 0.1 s"


def test_a_lower_band_waits_behind_the_higher_band_queued_ahead() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(BOB, band=0), 0.0)
    s.submit(job(BOB, band=0), 0.0)
    s.submit(job(ALICE, band=2), 0.0)
    s.select(0.0)
    assert "behind a higher band (1 queued)" in _reason(s, "alice", band=2)


def test_a_job_demoted_for_its_budget_says_so() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(BOB), 0.0)
    s.submit(job(ALICE, band=2, demoted=True), 0.0)
    s.select(0.0)
    assert _reason(s, "alice", band=2).endswith("demoted to this band: over budget")


def test_a_full_backend_closes_the_gate_on_max_in_flight() -> None:
    s = scheduler(plain(max_in_flight=1))
    s.submit(job(BOB), 0.0)
    s.submit(job(ALICE), 0.0)
    s.select(0.0)
    assert _reason(s, "alice") == "gate closed: b1 max_in_flight"


def test_a_principal_held_by_nothing_else_waits_its_fair_share_turn() -> None:
    s = scheduler(plain(max_in_flight=4))
    s.submit(job(ALICE), 0.0)
    assert _reason(s, "alice") == "waiting its fair-share turn"


def test_a_lane_with_nothing_queued_has_no_reason() -> None:
    s = scheduler(plain())
    s.submit(job(ALICE), 0.0)
    s.select(0.0)
    assert _reason(s, "alice") == ""
