"""Tracing over OpenTelemetry's SDK; imported only when an exporter is configured
(`llmserver.runtime.tracing`).

A request is one SERVER span named as the GenAI conventions name an inference (`chat
demo-llama`), with the steps as its children: `admission`, `queue`, one CLIENT `dispatch` per
upstream request (its context goes to the engine as `traceparent`, so vLLM's own span is its
child) holding `first_token` and `relay`, and `accounting`. Spans are made with their parent
given, never through OpenTelemetry's current-context variable: a request's steps run in more
than one task, and nothing else in the process reads that context. The provider is the
gateway's own, not the global one, so a gateway that stops takes its exporters with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from opentelemetry.context import Context
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from llmserver.runtime.events import RequestEvents
from llmserver.runtime.tracing import Tracing
from tenants.endpoints import Endpoint
from tenants.models import UsageStatus

if TYPE_CHECKING:
    from llmserver.backends.upstream import UpstreamClient
    from llmserver.conf import GatewaySettings
    from llmserver.runtime.keys import KeyInfo
    from llmserver.runtime.usage import UsageDraft
    from llmserver.wire.validation import CompletionRequest

# gen_ai.operation.name per endpoint: the Responses and Messages APIs are chats.
OPERATIONS = {
    Endpoint.CHAT: "chat",
    Endpoint.COMPLETIONS: "text_completion",
    Endpoint.EMBEDDINGS: "embeddings",
    Endpoint.RESPONSES: "chat",
    Endpoint.MESSAGES: "chat",
    # No well-known operation names these two; the conventions allow a system's own.
    Endpoint.RERANK: "rerank",
    Endpoint.SCORE: "score",
}
_TRACE_HEADERS = (b"traceparent", b"tracestate")
# The request's maximum answer as each API names it.
_MAX_TOKENS = ("max_completion_tokens", "max_tokens", "max_output_tokens")
# The most the gateway's stop waits for its last spans to go: a collector that is away would
# hold the exit for the exporter's retries (up to OTEL_EXPORTER_OTLP_TIMEOUT, 10 s), and one
# that answers takes milliseconds.
SHUTDOWN_SECONDS = 3.0


def _exporter(name: str, conf: GatewaySettings) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    # Headers, timeout, compression and certificates: from OTEL_EXPORTER_OTLP_* as the SDK reads.
    return OTLPSpanExporter(endpoint=conf.otlp_traces_endpoint)


class OtelTracing(Tracing):
    """Tracing on: the gateway's own provider, a batch processor for each exporter."""

    enabled = True

    def __init__(self, conf: GatewaySettings) -> None:
        # The sampler is the SDK's, from OTEL_TRACES_SAMPLER (default: parentbased_always_on);
        # OTEL_RESOURCE_ATTRIBUTES and OTEL_BSP_* are read by the SDK too.
        resource = Resource.create({SERVICE_NAME: conf.service_name})
        # Stopped by the gateway (`aclose`), not at the interpreter's exit.
        self.provider = TracerProvider(resource=resource, shutdown_on_exit=False)
        for name in conf.traces_exporters:
            self.provider.add_span_processor(BatchSpanProcessor(_exporter(name, conf)))
        self.tracer = self.provider.get_tracer("llmserver")
        self.propagator = TraceContextTextMapPropagator()

    def request(
        self,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> RequestEvents:
        trace = SpanWriter(self, request_id, key, req, client_headers)
        if trace.root.is_recording():
            return trace
        # Not sampled (OTEL_TRACES_SAMPLER): its steps would be spans nobody records; only the
        # trace context goes on, so that the engine samples it as this gateway did.
        return Unsampled(self, trace.root)

    async def flush(self) -> bool:
        # Blocking (an HTTP POST per batch): on a worker thread, never the event loop's.
        return await asyncio.to_thread(self.provider.force_flush)

    async def aclose(self) -> None:
        """The last spans, on a thread that may outlive the wait (a daemon, unlike the event
        loop's executor's, which the interpreter joins at its exit)."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = loop.create_future()

        def finished() -> None:
            if not done.done():
                done.set_result(None)

        def shutdown() -> None:
            try:
                self.provider.shutdown()
            finally:
                with contextlib.suppress(RuntimeError):  # the loop has closed: nobody waits
                    loop.call_soon_threadsafe(finished)

        threading.Thread(target=shutdown, name="otel-shutdown", daemon=True).start()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done, SHUTDOWN_SECONDS)


class SpanWriter(RequestEvents):
    """One request's spans, written as its events are heard."""

    def __init__(
        self,
        tracing: OtelTracing,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> None:
        self._tracer, self._propagator = tracing.tracer, tracing.propagator
        self._operation = OPERATIONS[req.kind]
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": self._operation,
            "gen_ai.request.model": req.model,
            "llmserver.request_id": request_id,
            "llmserver.endpoint": str(req.kind),
            "llmserver.tenant": key.tenant_slug,
            "llmserver.tier": key.tier_name,
            "llmserver.band": key.band,
        }
        most = next((req.body[name] for name in _MAX_TOKENS if name in req.body), None)
        if isinstance(most, int):
            attributes["gen_ai.request.max_tokens"] = most
        if req.n > 1:
            attributes["gen_ai.request.choice.count"] = req.n
        self.root = self._tracer.start_span(
            f"{self._operation} {req.model}",
            context=self._propagator.extract(_client_context(client_headers)),
            kind=SpanKind.SERVER,
            attributes=attributes,
        )
        self._root = set_span_in_context(self.root)
        self._step: Span | None = None  # admission, then accounting
        self._dispatch: Span | None = None
        self._leg: Span | None = None  # first_token, then relay
        self._dispatches = 0
        # Since when it has waited for a slot: at `queued`, and again after each upstream
        # request (one that went back to the queue is dispatched again).
        self._waiting_since: int | None = None

    def _child(self, name: str, parent: Context | None = None, start: int | None = None) -> Span:
        return self._tracer.start_span(name, context=parent or self._root, start_time=start)

    def admitting(self) -> None:
        self._step = self._child("admission")

    def queued(self, band: int) -> None:
        if self._step is not None:
            self._step.set_attribute("llmserver.band", band)
        self._end_step()
        self.root.set_attribute("llmserver.band", band)
        self._waiting_since = time.time_ns()

    def _record_wait(self) -> None:
        """The wait since `_waiting_since`, as a `queue` span that ends now."""
        if self._waiting_since is None:
            return
        span = self._child("queue", start=self._waiting_since)
        if self._dispatches:
            span.set_attribute("llmserver.requeued", True)
        span.end()
        self._waiting_since = None

    def dispatched(
        self,
        backend: str,
        upstream_model: str,
        client: UpstreamClient,
        resumed: bool,
        queue_wait: float | None,
    ) -> Mapping[str, str] | None:
        self._record_wait()
        self._dispatches += 1
        where = urlsplit(client.base_url)
        server: dict[str, AttributeValue] = {
            "llmserver.backend": backend,
            "gen_ai.response.model": upstream_model,
            "server.address": where.hostname or "",
            "server.port": where.port or (443 if where.scheme == "https" else 80),
        }
        self.root.set_attributes(server)
        attributes: dict[str, AttributeValue] = {
            **server,
            "gen_ai.operation.name": self._operation,
            "gen_ai.request.model": upstream_model,
            "gen_ai.provider.name": client.kind,
        }
        if resumed:
            attributes["llmserver.resumed"] = True
        self._dispatch = self._tracer.start_span(
            "dispatch", context=self._root, kind=SpanKind.CLIENT, attributes=attributes
        )
        context = set_span_in_context(self._dispatch)
        self._leg = self._child("relay" if resumed else "first_token", context)
        headers: dict[str, str] = {}
        self._propagator.inject(headers, context)
        return headers

    def first_token(self, seconds: float) -> None:
        if self._leg is None or self._dispatch is None:
            return
        self._leg.end()
        self._leg = self._child("relay", set_span_in_context(self._dispatch))

    def preempted(self, kind: str) -> None:
        if self._dispatch is not None:
            self._dispatch.set_attribute("llmserver.preempted", kind)

    def upstream_failed(self, kind: str, message: str) -> None:
        if self._dispatch is not None:
            self._dispatch.set_attribute("error.type", kind)
            self._dispatch.set_status(Status(StatusCode.ERROR, message))

    def forwarded(self) -> None:
        if self._leg is not None:
            self._leg.end()
            self._leg = None
        if self._dispatch is not None:
            self._dispatch.end()
            self._dispatch = None
            self._waiting_since = time.time_ns()

    def settling(self) -> None:
        self._end_step()
        self.forwarded()
        if self._dispatches == 0:
            self._record_wait()  # refused, expired or cancelled before any dispatch
        self._waiting_since = None
        self._step = self._child("accounting")

    def finish(self, draft: UsageDraft, model_label: str, seconds: float) -> None:
        self._end_step()
        root = self.root
        root.set_attributes(
            {
                "gen_ai.usage.input_tokens": draft.prompt_tokens,
                "gen_ai.usage.output_tokens": draft.completion_tokens,
                "llmserver.band": draft.band,
                "llmserver.status": str(draft.status),
            }
        )
        if draft.error_type:
            root.set_attribute("error.type", draft.error_type)
        if draft.status == UsageStatus.ERROR:
            # A refusal (a rate limit, a budget, an unknown model) is the client's and leaves
            # the status unset, as a 4xx does on an HTTP server span.
            root.set_status(Status(StatusCode.ERROR, draft.error_type))
        root.end()

    def _end_step(self) -> None:
        if self._step is not None:
            self._step.end()
            self._step = None


class Unsampled(RequestEvents):
    """A request the sampler left out: no span but its root (not recorded), whose context the
    engine receives, flags and all."""

    def __init__(self, tracing: OtelTracing, root: Span) -> None:
        self._headers: dict[str, str] = {}
        tracing.propagator.inject(self._headers, set_span_in_context(root))

    def dispatched(
        self,
        backend: str,
        upstream_model: str,
        client: UpstreamClient,
        resumed: bool,
        queue_wait: float | None,
    ) -> Mapping[str, str] | None:
        return self._headers


def _client_context(headers: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The client's W3C trace context among the request's headers (ASGI's lower-case names)."""
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in headers
        if name.lower() in _TRACE_HEADERS
    }
