"""The metrics as a listener of a request's events (`llmserver/runtime/events.py`): the
histograms and counters of `GatewayMetrics`, and the first-token times the dashboard shows."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from llmserver.runtime.events import RequestEvents
from llmserver.runtime.observability import GatewayMetrics
from llmserver.runtime.snapshots import SnapshotPublisher
from tenants.models import UsageStatus

if TYPE_CHECKING:
    from llmserver.backends.upstream import UpstreamClient
    from llmserver.runtime.usage import UsageDraft


class RequestMetrics(RequestEvents):
    """One request's part of the metrics. Labelled by the band it was queued in (the key's
    until then) and the backend of its current upstream request."""

    def __init__(
        self, metrics: GatewayMetrics, publisher: SnapshotPublisher, tenant: str, band: int
    ) -> None:
        self.metrics, self.publisher, self.tenant = metrics, publisher, tenant
        self.band = band
        self.backend = ""

    def queued(self, band: int) -> None:
        self.band = band

    def dispatched(
        self,
        backend: str,
        upstream_model: str,
        client: UpstreamClient,
        resumed: bool,
        queue_wait: float | None,
    ) -> Mapping[str, str] | None:
        self.backend = backend
        if queue_wait is not None:
            self.metrics.queue_wait.labels(str(self.band)).observe(queue_wait)
            self.metrics.tenant_queue_wait.labels(self.tenant).observe(queue_wait)
        return None

    def first_token(self, seconds: float) -> None:
        self.metrics.ttft.labels(str(self.band)).observe(seconds)
        self.publisher.first_token(self.band, seconds)

    def preempted(self, kind: str) -> None:
        self.metrics.preemptions.labels(str(self.band), kind).inc()

    def upstream_failed(self, kind: str, message: str) -> None:
        self.metrics.upstream_errors.labels(self.backend, kind).inc()

    def finish(self, draft: UsageDraft, model_label: str, seconds: float) -> None:
        """Labels must not grow with what clients send: `model_label` is "unknown" for a model
        no route serves."""
        band = str(draft.band)
        self.metrics.duration.labels(band, model_label).observe(seconds)
        self.metrics.requests.labels(model_label, band, draft.status).inc()
        if draft.status != UsageStatus.REJECTED or draft.error_type:
            self.metrics.tokens.labels(draft.tenant_slug, "prompt").inc(draft.prompt_tokens)
            self.metrics.tokens.labels(draft.tenant_slug, "completion").inc(draft.completion_tokens)
