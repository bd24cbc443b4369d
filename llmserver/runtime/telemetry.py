"""What the gateway tells the outside about itself: Prometheus metrics (`/metrics`), traces (off
unless OTEL_* names an exporter) and the dashboard's snapshots. One value, so a step that reports
an event reports it to all three in one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from llmserver.runtime.observability import GatewayMetrics
from llmserver.runtime.snapshots import SnapshotPublisher
from llmserver.runtime.tracing import Tracing

if TYPE_CHECKING:
    from llmserver.conf import GatewaySettings


@dataclass(frozen=True, slots=True)
class Telemetry:
    metrics: GatewayMetrics
    tracing: Tracing
    publisher: SnapshotPublisher

    def first_token(self, band: int, seconds: float) -> None:
        """A stream's first token, `seconds` after it arrived: the histogram and the dashboard."""
        self.metrics.ttft.labels(str(band)).observe(seconds)
        self.publisher.first_token(band, seconds)

    async def aclose(self) -> None:
        await self.tracing.aclose()


def gateway_tracing(conf: GatewaySettings) -> Tracing:
    """Tracing as `conf` says: off (the default) or over OpenTelemetry's SDK, imported only
    then."""
    if not conf.traces_exporters:
        return Tracing()
    from llmserver.runtime.otel import OtelTracing

    return OtelTracing(conf)
