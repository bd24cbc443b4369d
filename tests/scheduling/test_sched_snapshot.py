"""The snapshot keeps the shape the dashboard and /metrics consume, and turns into JSON."""

from __future__ import annotations

import json
from dataclasses import asdict

from sched_helpers import ALICE, BOB, fresh, job, metered, plain, scheduler

from scheduling import build_snapshot


def test_it_is_json_serialisable_with_the_agreed_keys() -> None:
    s = scheduler(metered("b1"), plain("b2"))
    s.update_metrics("b1", fresh())
    s.submit(job(ALICE), 0.0)
    snap = json.loads(json.dumps(asdict(build_snapshot(s, 1.0))))
    assert set(snap) == {"at", "queues", "backends", "totals"}
    assert set(snap["queues"][0]) == {
        "model",
        "band",
        "tenant",
        "user",
        "depth",
        "in_flight",
        "service",
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
