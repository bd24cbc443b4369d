"""Whether a backend is full, as its client asks before reading a probe's silence as a hang: by
that one backend's state, every slot taken or work waiting in its own queue."""

from __future__ import annotations

from scheduling import (
    BackendConfig,
    BackendMetrics,
    Job,
    Principal,
    SchedulerConfig,
    SchedulerService,
)

BACKEND = BackendConfig("b1", frozenset({"m"}), max_in_flight=1, has_metrics=False)


def service() -> SchedulerService:
    return SchedulerService(SchedulerConfig(), [BACKEND], clock=lambda: 0.0)


def test_a_backend_with_a_free_slot_and_an_empty_queue_is_not_full() -> None:
    assert service().backend_full("b1") is False


def test_a_backend_whose_every_slot_is_taken_is_full() -> None:
    s = service()
    s.core.submit(Job("j1", Principal("acme", "alice"), "m", band=1), 0.0)
    s.core.select(0.0)
    assert s.backend_full("b1") is True


def test_a_backend_with_work_waiting_in_its_own_queue_is_full() -> None:
    s = service()
    s.update_metrics("b1", BackendMetrics(waiting=2, running=0, healthy=True, scraped_at=0.0))
    assert s.backend_full("b1") is True


def test_a_backend_not_configured_is_not_full() -> None:
    assert service().backend_full("gone") is False
