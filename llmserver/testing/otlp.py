"""An OTLP/HTTP trace receiver on loopback, for tests and benchmarks: what a collector is to the
gateway's exporter, and no more.

OTLP over HTTP is one request, `POST /v1/traces` with an `ExportTraceServiceRequest` in protobuf
(gzip when the exporter compresses); the receiver answers it as a collector does and keeps the
spans, decoded, for a test to read. It serves on its own threads, so a test may flush the
gateway's exporter (which blocks until the POST is answered) from anywhere. As a process
(`python -m llmserver.testing.otlp --port N`, for the benchmarks) it keeps only a count,
which `GET /count` reads.
"""

from __future__ import annotations

import argparse
import gzip
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanMessage

PATH = "/v1/traces"


@dataclass(frozen=True, slots=True)
class ReceivedSpan:
    """One exported span, its ids in hex as `traceparent` writes them ("" for no parent)."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: str  # "SERVER", "CLIENT", "INTERNAL"...
    start_ns: int
    end_ns: int
    status: str  # "UNSET", "OK", "ERROR"
    attributes: dict[str, Any] = field(default_factory=dict)
    service: str = ""


def _value(value: AnyValue) -> Any:
    which = value.WhichOneof("value")
    if which == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, which) if which else None


def decode(payload: bytes) -> list[ReceivedSpan]:
    request = ExportTraceServiceRequest.FromString(payload)
    spans = []
    for resource_spans in request.resource_spans:
        resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                spans.append(
                    ReceivedSpan(
                        name=span.name,
                        trace_id=span.trace_id.hex(),
                        span_id=span.span_id.hex(),
                        parent_id=span.parent_span_id.hex(),
                        kind=SpanMessage.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
                        start_ns=span.start_time_unix_nano,
                        end_ns=span.end_time_unix_nano,
                        status=span.status.StatusCode.Name(span.status.code).removeprefix(
                            "STATUS_CODE_"
                        ),
                        attributes={a.key: _value(a.value) for a in span.attributes},
                        service=str(resource.get("service.name", "")),
                    )
                )
    return spans


class OtlpReceiver:
    """`start()`, point the exporter at `url`, read `spans`; `stop()` at the end. With
    `keep=False` only `count` grows (a benchmark's sink)."""

    def __init__(self, port: int = 0, keep: bool = True) -> None:
        self.keep = keep
        self.spans: list[ReceivedSpan] = []
        self.count = 0
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}{PATH}"

    def start(self) -> OtlpReceiver:
        """Serve on a thread of its own."""
        self._thread.start()
        return self

    def serve(self) -> None:
        """Serve on this thread until the process ends."""
        self._server.serve_forever()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def take(self, payload: bytes) -> None:
        spans = decode(payload)
        with self._lock:
            self.count += len(spans)
            if self.keep:
                self.spans.extend(spans)

    def received(self) -> list[ReceivedSpan]:
        with self._lock:
            return list(self.spans)


def _handler(receiver: OtlpReceiver) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            payload = self.rfile.read(int(self.headers.get("content-length") or 0))
            if self.headers.get("content-encoding") == "gzip":
                payload = gzip.decompress(payload)
            if self.path != PATH:
                self._answer(404, b"", "text/plain")
                return
            receiver.take(payload)
            body = ExportTraceServiceResponse().SerializeToString()
            self._answer(200, body, "application/x-protobuf")

        def do_GET(self) -> None:
            if self.path != "/count":
                self._answer(404, b"", "text/plain")
                return
            body = json.dumps({"spans": receiver.count}).encode()
            self._answer(200, body, "application/json")

        def _answer(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("content-type", content_type)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: a request a line would bury a test's output."""

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description="An OTLP/HTTP trace sink that counts spans.")
    parser.add_argument("--port", type=int, required=True)
    receiver = OtlpReceiver(parser.parse_args().port, keep=False)
    receiver.serve()  # until the benchmark ends it


if __name__ == "__main__":
    main()
