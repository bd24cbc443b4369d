"""The real vLLM continues the gateway's trace: started with `--otlp-traces-endpoint`, it reads
the `traceparent` the gateway sends with each upstream request (`vllm/tracing.py`, TRACE_HEADERS)
and its own request span, `llm_request`, is a child of the gateway's `dispatch` span, in the
trace of the client's request. Both export to one OTLP/HTTP receiver in this test."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmserver.testing.otlp import OtlpReceiver, ReceivedSpan
from llmserver.testing.processes import GatewayProcess
from llmserver.testing.vllm_server import VllmServer, missing, start_vllm
from tests.real_engines import new_key
from tests.vllm.conftest import MODEL, gateway_for

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture(scope="module")
def traced(
    receiver: OtlpReceiver, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[VllmServer, GatewayProcess]]:
    """vLLM and the gateway, both exporting to `receiver` (each reads OTEL_* at its start)."""
    reason = missing()
    if reason:
        pytest.skip(reason)
    with pytest.MonkeyPatch.context() as env:
        # vLLM exports over gRPC unless told; the gateway speaks OTLP/HTTP only.
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.url)
        engine = start_vllm(slots=2, options=["--otlp-traces-endpoint", receiver.url])
        try:
            gateway = gateway_for(engine, Path(tmp_path_factory.mktemp("vllm-tracing")))
        except Exception:
            engine.stop()
            raise
    yield engine, gateway
    gateway.stop()
    gateway.database.drop()  # type: ignore[attr-defined]
    engine.stop()


def spans_of(receiver: OtlpReceiver, request_id: str, engine_too: bool) -> list[ReceivedSpan]:
    """The request's trace once the gateway's spans (and the engine's) have come: each exports
    in batches, every 5 s."""
    deadline = time.monotonic() + 60
    while True:
        spans = receiver.received()
        roots = [s for s in spans if s.attributes.get("llmserver.request_id") == request_id]
        if roots:
            trace = [s for s in spans if s.trace_id == roots[0].trace_id]
            if not engine_too or any(s.name == "llm_request" for s in trace):
                return trace
        assert time.monotonic() < deadline, "the spans did not come"
        time.sleep(0.5)


def test_vllm_records_its_request_span_under_the_gateway_dispatch(
    traced: tuple[VllmServer, GatewayProcess], receiver: OtlpReceiver
) -> None:
    _, gateway = traced
    answer = httpx.post(
        gateway.url + "/v1/chat/completions",
        headers={"authorization": f"Bearer {new_key(gateway, 'traced')}"},
        json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
        timeout=120,
    )
    assert answer.status_code == 200
    trace = spans_of(receiver, answer.headers["x-request-id"], engine_too=True)
    (dispatch,) = [s for s in trace if s.name == "dispatch"]
    (engine_span,) = [s for s in trace if s.name == "llm_request"]
    assert engine_span.parent_id == dispatch.span_id
    assert engine_span.kind == "SERVER"
    root = next(s for s in trace if s.kind == "SERVER" and s.name != "llm_request")
    usage = answer.json()["usage"]
    assert root.attributes["gen_ai.usage.input_tokens"] == usage["prompt_tokens"]
    assert root.attributes["gen_ai.usage.output_tokens"] == usage["completion_tokens"]
