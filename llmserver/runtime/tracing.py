"""Tracing: OpenTelemetry spans for each request, off unless OpenTelemetry's own `OTEL_*`
variables name an exporter.

The span writer is a listener of a request's events (`llmserver/runtime/events.py`): admission,
the queue, each dispatch to a backend (whose headers carry the trace to the engine), the first
token, the relay and the accounting. This module holds the tracer's interface, the reading of
the `OTEL_*` variables (into `GatewaySettings`) and the factory. Off, every request shares one
listener that hears nothing and nothing of OpenTelemetry is imported; `llmserver.runtime.otel`,
the span writer over the SDK, is imported only when an exporter is configured.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

from llmserver.env import env_bool, env_list, env_str
from llmserver.runtime.events import RequestEvents

if TYPE_CHECKING:
    from llmserver.conf import GatewaySettings
    from llmserver.runtime.keys import KeyInfo
    from llmserver.wire.validation import CompletionRequest

# OTEL_TRACES_EXPORTER's values that the gateway can export to ("none" is off).
EXPORTERS = ("otlp", "console")
# The only OTLP protocol the installed exporter speaks; every collector takes it (port 4318).
OTLP_PROTOCOL = "http/protobuf"


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


def gateway_tracing(conf: GatewaySettings) -> Tracing:
    """Tracing as `conf` says: off (the default) or over OpenTelemetry's SDK."""
    if not conf.traces_exporters:
        return Tracing()
    from llmserver.runtime.otel import OtelTracing

    return OtelTracing(conf)


# Settings, read from OpenTelemetry's variables (llmserver/settings.py) ---------------------


def traces_exporters() -> tuple[str, ...]:
    """The exporters spans go to; empty is off. `OTEL_TRACES_EXPORTER` names them ("none" is
    off); unset, "otlp" where an OTLP endpoint is set, else off: unlike OpenTelemetry's own
    default ("otlp" to localhost), a gateway traces only when asked. `OTEL_SDK_DISABLED=true`
    turns everything off."""
    if env_bool("OTEL_SDK_DISABLED", False):
        return ()
    names = [name.lower() for name in env_list("OTEL_TRACES_EXPORTER", [])]
    if not names:
        endpoint = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env_str(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        names = ["otlp"] if endpoint else []
    chosen = tuple(dict.fromkeys(name for name in names if name != "none"))
    unknown = [name for name in chosen if name not in EXPORTERS]
    if unknown:
        raise ImproperlyConfigured(
            f"OTEL_TRACES_EXPORTER must list {', '.join(EXPORTERS)} or none; got {unknown[0]!r}"
        )
    if "otlp" in chosen:
        protocol = env_str("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env_str(
            "OTEL_EXPORTER_OTLP_PROTOCOL", OTLP_PROTOCOL
        )
        if protocol != OTLP_PROTOCOL:
            raise ImproperlyConfigured(
                f"OTEL_EXPORTER_OTLP_PROTOCOL must be {OTLP_PROTOCOL} (the collector's port "
                f"4318); got {protocol!r}"
            )
    return chosen


def otlp_traces_endpoint(default: str) -> str:
    """The URL spans are posted to, as OpenTelemetry reads it: the traces endpoint as it is,
    else the general endpoint with `/v1/traces` added, else `default`."""
    traces = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + "/v1/traces" if base else default
