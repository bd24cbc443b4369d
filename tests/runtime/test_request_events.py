"""A request's events (`llmserver/runtime/events.py`): each step reported once reaches every
listener; the metrics are one listener, and count what they counted when the steps were reported
to them apart."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping

import pytest
from django.utils import timezone

from llmserver.backends.spec import BackendSpec
from llmserver.backends.upstream import UpstreamClient
from llmserver.runtime.events import Broadcast, RequestEvents
from llmserver.runtime.observability import GatewayMetrics
from llmserver.runtime.request_metrics import RequestMetrics
from llmserver.runtime.snapshots import SnapshotPublisher
from llmserver.runtime.usage import UsageDraft, UsageWriter
from scheduling import SchedulerConfig, SchedulerService
from tenants.models import UsageStatus


class Heard(RequestEvents):
    """The steps heard, by name; its dispatches answer with `headers`."""

    def __init__(self, headers: Mapping[str, str] | None = None) -> None:
        self.steps: list[str] = []
        self.headers = headers

    def queued(self, band: int) -> None:
        self.steps.append("queued")

    def dispatched(
        self,
        backend: str,
        upstream_model: str,
        client: UpstreamClient,
        resumed: bool,
        queue_wait: float | None,
    ) -> Mapping[str, str] | None:
        self.steps.append("dispatched")
        return self.headers

    def finish(self, draft: UsageDraft, model_label: str, seconds: float) -> None:
        self.steps.append("finish")


@pytest.fixture
async def client() -> AsyncIterator[UpstreamClient]:
    upstream = UpstreamClient(BackendSpec("b1", "vllm", "http://127.0.0.1:9"))
    yield upstream
    await upstream.aclose()


@pytest.fixture
def metrics() -> GatewayMetrics:
    return GatewayMetrics(SchedulerService(SchedulerConfig(), ()).snapshot, UsageWriter())


@pytest.fixture
def publisher() -> SnapshotPublisher:
    return SnapshotPublisher(SchedulerService(SchedulerConfig(), ()).snapshot, lambda: False)


@pytest.fixture
def heard(metrics: GatewayMetrics, publisher: SnapshotPublisher) -> RequestMetrics:
    """The metrics' part of a request of acme's whose key is in band 1."""
    return RequestMetrics(metrics, publisher, "acme", band=1)


def draft(band: int = 2) -> UsageDraft:
    return UsageDraft(
        request_id="r1",
        tenant_id=1,
        tenant_slug="acme",
        api_key_id=1,
        user="alice",
        model="demo",
        tier="standard",
        band=band,
        queued_at=timezone.now(),
        prompt_tokens=7,
        completion_tokens=3,
        status=UsageStatus.OK,
    )


async def test_every_listener_hears_each_event_once_in_order(client: UpstreamClient) -> None:
    first, second = Heard(), Heard()
    events = Broadcast(first, second)

    events.queued(2)
    events.dispatched("b1", "sim-model", client, False, 0.5)
    events.finish(draft(), "demo", 1.0)

    assert first.steps == second.steps == ["queued", "dispatched", "finish"]


async def test_a_dispatch_carries_the_trace_headers_of_the_listener_that_gives_them(
    client: UpstreamClient,
) -> None:
    events = Broadcast(Heard(), Heard({"traceparent": "00-abc-def-01"}))

    headers = events.dispatched("b1", "sim-model", client, False, None)

    assert headers == {"traceparent": "00-abc-def-01"}


async def test_the_metrics_count_a_served_request_in_the_band_it_was_queued_in(
    heard: RequestMetrics,
    metrics: GatewayMetrics,
    publisher: SnapshotPublisher,
    client: UpstreamClient,
) -> None:
    heard.queued(2)
    heard.dispatched("b1", "sim-model", client, False, 0.5)
    heard.first_token(0.7)
    heard.finish(draft(band=2), "demo", 1.0)

    sample = metrics.registry.get_sample_value
    assert sample("llmserver_queue_wait_seconds_count", {"band": "2"}) == 1
    assert sample("llmserver_tenant_queue_wait_seconds_count", {"tenant": "acme"}) == 1
    assert sample("llmserver_time_to_first_token_seconds_count", {"band": "2"}) == 1
    assert sample("llmserver_request_duration_seconds_count", {"band": "2", "model": "demo"}) == 1
    assert sample("llmserver_requests_total", {"model": "demo", "band": "2", "status": "ok"}) == 1
    assert sample("llmserver_tokens_total", {"tenant": "acme", "kind": "completion"}) == 3
    assert list(publisher.recent_ttft) == [(2, 0.7)]


async def test_only_a_request_s_first_dispatch_is_queue_time(
    heard: RequestMetrics, metrics: GatewayMetrics, client: UpstreamClient
) -> None:
    heard.dispatched("b1", "sim-model", client, False, 0.5)
    heard.dispatched("b2", "sim-model", client, False, None)  # requeued after b1 failed

    assert (
        metrics.registry.get_sample_value("llmserver_queue_wait_seconds_count", {"band": "1"}) == 1
    )


async def test_an_upstream_failure_is_counted_for_the_backend_it_was_sent_to(
    heard: RequestMetrics, metrics: GatewayMetrics, client: UpstreamClient
) -> None:
    heard.dispatched("b1", "sim-model", client, False, 0.5)
    heard.upstream_failed("http_5xx", "boom")

    errors = {"backend": "b1", "kind": "http_5xx"}
    assert metrics.registry.get_sample_value("llmserver_upstream_errors_total", errors) == 1
