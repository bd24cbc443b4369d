"""Tracing: OpenTelemetry spans for each request, off unless OpenTelemetry's own `OTEL_*`
variables name an exporter.

The pipeline reports its steps to one small interface, `RequestTrace`: admission, the queue,
each dispatch to a backend (whose headers carry the trace to the engine), the first token, the
relay and the accounting. This module holds that interface and its no-op; the `OTEL_*`
variables are read by the settings (`llmserver.env.traces_exporters`, into `GatewaySettings`).
Off, every request shares one no-op trace and nothing of OpenTelemetry is imported;
`llmserver.runtime.otel`, the implementation over the SDK, is imported only when an exporter is
configured (`llmserver.runtime.telemetry.gateway_tracing`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmserver.backends.upstream import UpstreamClient
    from llmserver.runtime.keys import KeyInfo
    from llmserver.runtime.usage import UsageDraft
    from llmserver.wire.validation import CompletionRequest


class RequestTrace:
    """One request's spans, as the pipeline reports its steps. This base records nothing: it is
    the trace of every request while tracing is off (`NO_TRACE`, one object for all)."""

    def admitting(self) -> None:
        """Admission begins: rate windows, the route, budgets and quota, the prompt's keys."""

    def queued(self, band: int) -> None:
        """Admitted in `band` and queued: the wait for a slot begins."""

    def dispatched(
        self, backend: str, upstream_model: str, client: UpstreamClient, resumed: bool
    ) -> Mapping[str, str] | None:
        """One upstream request to `backend` begins (`resumed`: it continues a stream the
        client has begun). Returns the headers that carry the trace to the engine (None: none)."""
        return None

    def first_token(self) -> None:
        """The first token went to the client: from here the answer is relayed."""

    def preempted(self, kind: str) -> None:
        """The scheduler took this upstream request's slot (`kind`: before the first token, or
        a stream that will be resumed)."""

    def upstream_failed(self, kind: str, message: str) -> None:
        """This upstream request failed (`kind`: "transport" or "http_5xx" and so on)."""

    def forwarded(self) -> None:
        """The upstream request ended, however it ended."""

    def settling(self) -> None:
        """Accounting begins: the slot, the fair-share account, the metrics, the usage row."""

    def finish(self, draft: UsageDraft) -> None:
        """The request's one ending: its status and the tokens billed."""


NO_TRACE = RequestTrace()


class Tracing:
    """The gateway's tracer. This base is tracing off: no spans, no OpenTelemetry objects."""

    enabled = False

    def request(
        self,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> RequestTrace:
        """The trace of one request; `client_headers` may carry the client's own trace
        (`traceparent`, `tracestate`), which the request's span then continues."""
        return NO_TRACE

    async def flush(self) -> bool:
        """Export every span ended so far; whether all went."""
        return True

    async def aclose(self) -> None:
        """Export what is left and stop the exporters (at the gateway's stop)."""
