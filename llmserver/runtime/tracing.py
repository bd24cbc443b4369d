"""Tracing: OpenTelemetry spans for each request, off unless OpenTelemetry's own `OTEL_*`
variables name an exporter.

The span writer is a listener of a request's events (`llmserver/runtime/events.py`): admission,
the queue, each dispatch to a backend (whose headers carry the trace to the engine), the first
token, the relay and the accounting. This module holds the tracer's interface; the `OTEL_*`
variables are read by the settings (`llmserver.env.traces_exporters`, into `GatewaySettings`).
Off, every request shares one listener that hears nothing and nothing of OpenTelemetry is
imported; `llmserver.runtime.otel`, the span writer over the SDK, is imported only when an
exporter is configured (`llmserver.runtime.telemetry.gateway_tracing`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from llmserver.runtime.events import RequestEvents

if TYPE_CHECKING:
    from llmserver.runtime.keys import KeyInfo
    from llmserver.wire.validation import CompletionRequest


# The trace of every request while tracing is off: one listener for all, hearing nothing.
NO_TRACE = RequestEvents()


class Tracing:
    """The gateway's tracer. This base is tracing off: no spans, no OpenTelemetry objects."""

    enabled = False

    def request(
        self,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> RequestEvents:
        """The span writer of one request; `client_headers` may carry the client's own trace
        (`traceparent`, `tracestate`), which the request's span then continues."""
        return NO_TRACE

    async def flush(self) -> bool:
        """Export every span ended so far; whether all went."""
        return True

    async def aclose(self) -> None:
        """Export what is left and stop the exporters (at the gateway's stop)."""
