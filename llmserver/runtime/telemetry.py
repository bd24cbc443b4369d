"""What the gateway tells the outside about itself: Prometheus metrics (`/metrics`), traces (off
unless OTEL_* names an exporter) and the dashboard's snapshots. A request reports each step once,
to its events (`request`), which the metrics and the span writer both hear."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmserver.runtime.events import Broadcast, RequestEvents
from llmserver.runtime.observability import GatewayMetrics
from llmserver.runtime.request_metrics import RequestMetrics
from llmserver.runtime.snapshots import SnapshotPublisher
from llmserver.runtime.tracing import NO_TRACE, Tracing

if TYPE_CHECKING:
    from llmserver.conf import GatewaySettings
    from llmserver.runtime.keys import KeyInfo
    from llmserver.wire.validation import CompletionRequest


@dataclass(frozen=True, slots=True)
class Telemetry:
    metrics: GatewayMetrics
    tracing: Tracing
    publisher: SnapshotPublisher

    def request(
        self,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> RequestEvents:
        """One request's events: its metrics and, with tracing on, its spans (which continue
        the client's trace where `client_headers` carry one)."""
        metrics = RequestMetrics(self.metrics, self.publisher, key.tenant_slug, key.band)
        trace = self.tracing.request(request_id, key, req, client_headers)
        return metrics if trace is NO_TRACE else Broadcast(metrics, trace)

    def render(self) -> bytes:
        """The metrics' exposition, for /metrics."""
        return self.metrics.render()

    async def aclose(self) -> None:
        await self.tracing.aclose()


def gateway_tracing(conf: GatewaySettings) -> Tracing:
    """Tracing as `conf` says: off (the default) or over OpenTelemetry's SDK, imported only
    then."""
    if not conf.traces_exporters:
        return Tracing()
    from llmserver.runtime.otel import OtelTracing

    return OtelTracing(conf)
