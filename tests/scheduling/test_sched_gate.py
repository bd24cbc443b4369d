"""The gate rule, condition by condition, including the article's example thresholds."""

from __future__ import annotations

from sched_helpers import fresh, metered, plain

from scheduling import BackendConfig, BackendState, GateThresholds, gate_open, is_saturated
from scheduling.config import article_gates

INTERACTIVE = article_gates()[0]
BATCH = article_gates()[2]


def state(config: BackendConfig | None = None, metrics=None, in_flight: int = 0) -> BackendState:
    s = BackendState(config or metered())
    if metrics is not None:
        s.record_scrape(metrics)
    s.in_flight = in_flight
    return s


def test_it_closes_for_an_unknown_backend() -> None:
    assert gate_open(None, INTERACTIVE, 0.0, 2.0).reason == "disabled"


def test_it_closes_for_a_disabled_backend() -> None:
    cfg = BackendConfig("b", frozenset({"m"}), has_metrics=False, enabled=False)
    assert gate_open(state(cfg), INTERACTIVE, 0.0, 2.0).reason == "disabled"


def test_it_closes_at_max_in_flight_without_metrics() -> None:
    s = state(plain(max_in_flight=2), in_flight=2)
    assert gate_open(s, INTERACTIVE, 0.0, 2.0).reason == "max_in_flight"


def test_it_opens_below_max_in_flight_without_metrics() -> None:
    assert gate_open(state(plain(max_in_flight=2), in_flight=1), INTERACTIVE, 0.0, 2.0).open


def test_it_closes_at_max_in_flight_even_with_fresh_metrics() -> None:
    s = state(metered(max_in_flight=1), fresh(), in_flight=1)
    assert gate_open(s, INTERACTIVE, 0.0, 2.0).reason == "max_in_flight"


def test_it_closes_when_no_metrics_were_scraped_yet() -> None:
    assert gate_open(state(), INTERACTIVE, 0.0, 2.0).reason == "no_metrics"


def test_it_closes_when_the_backend_reports_unhealthy() -> None:
    s = state(metrics=fresh().__class__(waiting=0, healthy=False, scraped_at=0.0))
    assert gate_open(s, INTERACTIVE, 0.0, 2.0).reason == "unhealthy"


def test_it_closes_when_metrics_are_stale() -> None:
    s = state(metrics=fresh(now=10.0))
    assert gate_open(s, INTERACTIVE, 12.0, 2.0).open
    assert gate_open(s, INTERACTIVE, 12.01, 2.0).reason == "stale"


def test_it_opens_interactive_below_three_waiting() -> None:
    assert gate_open(state(metrics=fresh(waiting=2)), INTERACTIVE, 0.0, 2.0).open


def test_it_closes_interactive_at_three_waiting() -> None:
    assert gate_open(state(metrics=fresh(waiting=3)), INTERACTIVE, 0.0, 2.0).reason == "waiting"


def test_it_opens_batch_only_on_an_empty_backend_queue() -> None:
    assert gate_open(state(metrics=fresh(waiting=0)), BATCH, 0.0, 2.0).open
    assert gate_open(state(metrics=fresh(waiting=1)), BATCH, 0.0, 2.0).reason == "waiting"


def test_it_treats_max_waiting_one_like_zero() -> None:
    one = GateThresholds(max_waiting=1, max_tpot_seconds=None)
    assert gate_open(state(metrics=fresh(waiting=0)), one, 0.0, 2.0).open
    assert not gate_open(state(metrics=fresh(waiting=1)), one, 0.0, 2.0).open


def test_it_closes_at_the_150ms_tpot_ceiling() -> None:
    assert gate_open(state(metrics=fresh(tpot=0.149)), INTERACTIVE, 0.0, 2.0).open
    assert gate_open(state(metrics=fresh(tpot=0.150)), INTERACTIVE, 0.0, 2.0).reason == "tpot"


def test_it_ignores_a_tpot_the_backend_does_not_expose() -> None:
    assert gate_open(state(metrics=fresh(tpot=None)), INTERACTIVE, 0.0, 2.0).open


def test_it_closes_at_the_kv_cache_ceiling() -> None:
    kv = GateThresholds(max_waiting=None, max_tpot_seconds=None, max_kv_cache_usage=0.9)
    assert gate_open(state(metrics=fresh(kv_cache_usage=0.89)), kv, 0.0, 2.0).open
    assert gate_open(state(metrics=fresh(kv_cache_usage=0.9)), kv, 0.0, 2.0).reason == "kv_cache"


def test_it_counts_dispatches_since_the_last_scrape() -> None:
    s = state(metrics=fresh(waiting=1))
    s.record_dispatch()
    assert gate_open(s, INTERACTIVE, 0.0, 2.0).open
    s.record_dispatch()
    assert gate_open(s, INTERACTIVE, 0.0, 2.0).reason == "waiting"


def test_it_subtracts_completions_since_the_last_scrape() -> None:
    s = state(metrics=fresh(waiting=3))
    s.record_release()
    assert gate_open(s, INTERACTIVE, 0.0, 2.0).open


def test_it_resets_the_since_scrape_counters_on_a_new_scrape() -> None:
    s = state(metrics=fresh(waiting=0))
    for _ in range(3):
        s.record_dispatch()
    s.record_scrape(fresh(waiting=0))
    assert s.estimated_waiting() == 0
    assert s.in_flight == 3


def test_it_applies_no_thresholds_to_a_band_without_gate() -> None:
    s = state(metrics=fresh(waiting=100, tpot=5.0))
    assert gate_open(s, None, 0.0, 2.0).open


def test_it_still_requires_fresh_metrics_for_a_band_without_gate() -> None:
    assert gate_open(state(metrics=fresh(now=0.0)), None, 5.0, 2.0).reason == "stale"


def test_it_names_the_inverse_is_saturated() -> None:
    assert is_saturated(state(metrics=fresh(waiting=3)), INTERACTIVE, 0.0, 2.0)
    assert not is_saturated(state(metrics=fresh(waiting=0)), INTERACTIVE, 0.0, 2.0)


def preempting(capacity: int | None) -> BackendConfig:
    return BackendConfig("b1", frozenset({"m"}), capacity=capacity, preemption=True)


def test_a_backend_with_preemption_and_a_known_capacity_is_never_made_to_queue() -> None:
    full = state(preempting(4), fresh(waiting=0, running=0), in_flight=4)
    assert gate_open(full, INTERACTIVE, 0.0, 2.0).reason == "waiting"
    assert gate_open(state(preempting(4), fresh(), in_flight=3), INTERACTIVE, 0.0, 2.0).open


def test_a_learned_capacity_closes_the_gate_as_a_configured_one_does() -> None:
    learned = state(preempting(None), fresh(now=0.0, waiting=2, running=4), in_flight=6)
    learned.record_scrape(fresh(now=0.1, waiting=2, running=4))
    assert learned.capacity == 4
    learned.in_flight = 4
    assert gate_open(learned, INTERACTIVE, 0.1, 2.0).reason == "waiting"


def test_without_preemption_the_bands_threshold_lets_the_engine_queue() -> None:
    config = BackendConfig("b1", frozenset({"m"}), capacity=4, preemption=False)
    assert gate_open(state(config, fresh(), in_flight=5), INTERACTIVE, 0.0, 2.0).open


def test_before_its_capacity_is_known_a_preempting_backend_keeps_the_bands_threshold() -> None:
    unknown = state(preempting(None), fresh(waiting=2, running=4), in_flight=6)
    assert gate_open(unknown, INTERACTIVE, 0.0, 2.0).open
