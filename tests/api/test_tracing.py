"""Tracing: a request's spans reach a real OTLP/HTTP receiver with its steps, the GenAI
attributes and its real token counts; its trace reaches the engine as `traceparent` and a
client's own trace is continued. Off (no OTEL_* variable), nothing of the SDK is made or even
imported.

The gateway runs in process against the simulator, which sits behind a small proxy that keeps
each request's headers (the simulator itself is not changed); its metrics are scraped directly.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asgiref.sync import sync_to_async

from llmserver.testing.otlp import OtlpReceiver, ReceivedSpan
from simulator.launcher import free_port, start_simulator
from tenants.models import Backend
from tests.api.conftest import (
    MODEL,
    chat_body,
    gate_open,
    read_all,
    start,
    usage_rows,
    wait_for,
)
from tests.api.test_preemption import (
    POWER_TOKENS,
    make_world,
    power_streams_running,
    rest_of,
    running_gateway,
)

ROOT = Path(__file__).resolve().parents[2]
# A client's own trace: W3C trace context, version 00, sampled.
CLIENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
CLIENT_SPAN = "00f067aa0ba902b7"


class HeaderProxy:
    """A proxy in front of the simulator that keeps the headers of each completion request, and
    drops the connection of the first `drop` of them (a backend that died under them)."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.seen: list[dict[str, str]] = []
        self.drop = 0
        self.port = free_port()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def _proxy(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.path.startswith("/v1/"):
            self.seen.append({k.lower(): v for k, v in request.headers.items()})
            if self.drop > 0:
                self.drop -= 1
                assert request.transport is not None
                request.transport.close()
                return web.Response()
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            data=body or None,
            headers=request.headers,
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            response.content_type = answer.content_type
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    async def __aenter__(self) -> HeaderProxy:
        self._session = aiohttp.ClientSession()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._proxy)
        self._runner = web.AppRunner(app)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._runner.cleanup()
        await self._session.close()


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver().start()
    yield receiver
    receiver.stop()


@pytest.fixture
async def proxy(world: dict[str, Any]) -> AsyncIterator[HeaderProxy]:
    sim = world["sim"]
    async with HeaderProxy(sim.url) as proxy:
        await sync_to_async(Backend.objects.filter(name="sim").update)(
            base_url=proxy.url, metrics_url=sim.metrics_url
        )
        yield proxy


async def running(world: dict[str, Any]) -> Any:
    from llmserver.process import get_gateway

    gw = await get_gateway()
    await wait_for(lambda: gate_open(gw), 5.0)
    return gw


async def exporting(world: dict[str, Any], settings: Any, receiver: OtlpReceiver) -> Any:
    """The gateway exporting to the receiver, as OTEL_EXPORTER_OTLP_TRACES_ENDPOINT makes it."""
    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "TRACES_EXPORTERS": ("otlp",),
        "OTLP_TRACES_ENDPOINT": receiver.url,
    }
    return await running(world)


@pytest.fixture
async def traced(
    world: dict[str, Any], settings: Any, receiver: OtlpReceiver, proxy: HeaderProxy
) -> AsyncIterator[Any]:
    from llmserver.process import reset_gateway

    yield await exporting(world, settings, receiver)
    await reset_gateway()


@pytest.fixture
async def sampled_out(
    world: dict[str, Any],
    settings: Any,
    receiver: OtlpReceiver,
    proxy: HeaderProxy,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Any]:
    """Exporting, with a sampler that samples nothing (the SDK reads it at the gateway's start)."""
    from llmserver.process import reset_gateway

    monkeypatch.setenv("OTEL_TRACES_SAMPLER", "always_off")
    yield await exporting(world, settings, receiver)
    await reset_gateway()


@pytest.fixture
async def untraced(world: dict[str, Any], proxy: HeaderProxy) -> AsyncIterator[Any]:
    """The gateway as it starts with no OTEL_* variable."""
    from llmserver.process import reset_gateway

    yield await running(world)
    await reset_gateway()


async def complete(
    key: str, extra_headers: Any = (), model: str = MODEL
) -> tuple[int, dict[bytes, bytes], bytes]:
    body = chat_body(max_tokens=8, model=model)
    comm = await start(key, body, headers=extra_headers)
    return await read_all(comm)


async def trace_of(gw: Any, receiver: OtlpReceiver, request_id: str) -> list[ReceivedSpan]:
    """The request's spans once its own (the last to end) has been exported."""
    deadline = asyncio.get_running_loop().time() + 10
    while True:
        assert await gw.telemetry.tracing.flush()
        spans = receiver.received()
        root = [s for s in spans if s.attributes.get("llmserver.request_id") == request_id]
        if root:
            return [s for s in spans if s.trace_id == root[0].trace_id]
        assert asyncio.get_running_loop().time() < deadline, "the request's span never came"
        await asyncio.sleep(0.05)


def named(spans: list[ReceivedSpan], name: str) -> ReceivedSpan:
    (span,) = [s for s in spans if s.name == name]
    return span


async def traced_request(
    gw: Any, world: dict[str, Any], receiver: OtlpReceiver, headers: Any = ()
) -> tuple[list[ReceivedSpan], dict[bytes, bytes]]:
    status, response_headers, _ = await complete(world["alice"], headers)
    assert status == 200
    request_id = response_headers[b"x-request-id"].decode()
    return await trace_of(gw, receiver, request_id), response_headers


async def test_a_request_is_one_trace_of_its_steps(traced, world, receiver):
    spans, _ = await traced_request(traced, world, receiver)
    root = named(spans, f"chat {MODEL}")
    assert root.kind == "SERVER" and root.parent_id == ""
    assert root.service == "llm-server"
    dispatch = named(spans, "dispatch")
    assert dispatch.kind == "CLIENT"
    children = {s.name: s for s in spans if s.parent_id == root.span_id}
    assert set(children) == {"admission", "queue", "dispatch", "accounting"}
    assert {s.name for s in spans if s.parent_id == dispatch.span_id} == {"first_token", "relay"}
    assert len(spans) == 7
    order = [children["admission"], children["queue"], dispatch, children["accounting"]]
    assert all(a.end_ns <= b.start_ns for a, b in itertools.pairwise(order))
    first, relay = named(spans, "first_token"), named(spans, "relay")
    assert dispatch.start_ns <= first.start_ns <= first.end_ns <= relay.start_ns
    assert relay.end_ns <= dispatch.end_ns <= root.end_ns


async def test_the_request_span_has_the_genai_attributes_and_the_real_token_counts(
    traced, world, receiver
):
    spans, headers = await traced_request(traced, world, receiver)
    await wait_for(lambda: traced.usage.pending == 0, 5)
    (row,) = await usage_rows()
    assert row["completion_tokens"] == 8 and row["prompt_tokens"] > 0
    root = named(spans, f"chat {MODEL}")
    expected = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": MODEL,
        "gen_ai.response.model": MODEL,
        "gen_ai.request.max_tokens": 8,
        "gen_ai.usage.input_tokens": row["prompt_tokens"],
        "gen_ai.usage.output_tokens": 8,
        "llmserver.request_id": headers[b"x-request-id"].decode(),
        "llmserver.status": "ok",
        "server.address": "127.0.0.1",
    }
    assert {name: root.attributes.get(name) for name in expected} == expected
    dispatch = named(spans, "dispatch")
    assert dispatch.attributes["gen_ai.provider.name"] == "vllm"
    assert dispatch.attributes["server.port"] == root.attributes["server.port"] > 0


async def test_the_request_span_names_the_tenant_tier_band_and_backend(traced, world, receiver):
    spans, _ = await traced_request(traced, world, receiver)
    root = named(spans, f"chat {MODEL}")
    assert root.attributes["llmserver.tenant"] == "acme"
    assert root.attributes["llmserver.tier"] == "tight"
    assert root.attributes["llmserver.band"] == world["tier"].band
    assert root.attributes["llmserver.backend"] == "sim"


async def test_the_engine_receives_the_dispatch_span_as_its_traceparent(
    traced, world, receiver, proxy
):
    spans, _ = await traced_request(traced, world, receiver)
    (sent,) = proxy.seen
    version, trace_id, parent_id, flags = sent["traceparent"].split("-")
    dispatch = named(spans, "dispatch")
    assert (version, trace_id, parent_id) == ("00", dispatch.trace_id, dispatch.span_id)
    assert int(flags, 16) & 1  # sampled (the SDK may set level 2's "random" bit too)


async def test_a_client_traceparent_is_continued(traced, world, receiver, proxy):
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01".encode()
    spans, _ = await traced_request(traced, world, receiver, [(b"traceparent", traceparent)])
    root = named(spans, f"chat {MODEL}")
    assert (root.trace_id, root.parent_id) == (CLIENT_TRACE, CLIENT_SPAN)
    assert {s.trace_id for s in spans} == {CLIENT_TRACE}
    assert proxy.seen[0]["traceparent"].split("-")[1] == CLIENT_TRACE


async def traced_over_socket(
    gw: Any, key: str, receiver: OtlpReceiver, message: dict[str, Any], headers: Any = ()
) -> list[ReceivedSpan]:
    """One request over the completions WebSocket; the spans of the client's trace."""
    from channels.testing import WebsocketCommunicator

    from llmserver.asgi import application

    ws = WebsocketCommunicator(application, f"/ws/v1/chat/completions?api_key={key}", headers)
    assert (await ws.connect())[0]
    body = json.loads(chat_body(max_tokens=8))
    await ws.send_json_to({"type": "request", "id": "r", "body": body, **message})
    while (await ws.receive_json_from(10))["type"] not in ("done", "response", "error"):
        pass
    await ws.disconnect()
    deadline = asyncio.get_running_loop().time() + 10
    while not [s for s in receiver.received() if s.name == f"chat {MODEL}"]:
        assert await gw.telemetry.tracing.flush()
        assert asyncio.get_running_loop().time() < deadline, "the request's span never came"
        await asyncio.sleep(0.05)
    return [s for s in receiver.received() if s.trace_id == CLIENT_TRACE]


async def test_a_websocket_request_continues_the_traceparent_in_its_message(
    traced, world, receiver
):
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01"
    spans = await traced_over_socket(traced, world["alice"], receiver, {"traceparent": traceparent})
    assert named(spans, f"chat {MODEL}").parent_id == CLIENT_SPAN


async def test_a_websocket_request_without_one_continues_the_handshakes_traceparent(
    traced, world, receiver
):
    traceparent = f"00-{CLIENT_TRACE}-{CLIENT_SPAN}-01".encode()
    spans = await traced_over_socket(
        traced, world["alice"], receiver, {}, [(b"traceparent", traceparent)]
    )
    assert named(spans, f"chat {MODEL}").parent_id == CLIENT_SPAN


async def test_a_request_sent_again_after_a_backend_failure_has_a_dispatch_each_time(
    traced, world, receiver, proxy
):
    proxy.drop = 2  # the request and the upstream client's retry on a fresh connection
    spans, _ = await traced_request(traced, world, receiver)
    root = named(spans, f"chat {MODEL}")
    failed, served = sorted((s for s in spans if s.name == "dispatch"), key=lambda s: s.start_ns)
    assert (failed.status, failed.attributes["error.type"]) == ("ERROR", "transport")
    assert served.status == "UNSET"
    waits = sorted((s for s in spans if s.name == "queue"), key=lambda s: s.start_ns)
    assert [w.attributes.get("llmserver.requeued", False) for w in waits] == [False, True]
    assert failed.end_ns <= waits[1].start_ns and waits[1].end_ns <= served.start_ns
    assert {s.name for s in spans if s.parent_id == failed.span_id} == {"first_token"}
    assert {s.name for s in spans if s.parent_id == served.span_id} == {"first_token", "relay"}
    assert root.attributes["llmserver.status"] == "ok" and root.status == "UNSET"
    parents = [sent["traceparent"].split("-")[2] for sent in proxy.seen]
    assert parents == [failed.span_id, failed.span_id, served.span_id]


@pytest.fixture
def pausing_world(
    transactional_db: None, settings: Any, receiver: OtlpReceiver
) -> Iterator[tuple[str, str]]:
    """test_preemption's narrow vLLM backend (three slots, pauses after 50 ms), traced."""
    sim = start_simulator("--max-num-seqs", "3", "--model", MODEL, "--speed", "4")
    try:
        keys = make_world(sim, settings)
        settings.LLMSERVER = {
            **settings.LLMSERVER,
            "TRACES_EXPORTERS": ("otlp",),
            "OTLP_TRACES_ENDPOINT": receiver.url,
        }
        yield keys
    finally:
        sim.stop()


async def test_a_paused_and_resumed_stream_has_a_dispatch_for_each_leg(pausing_world, receiver):
    power_key, light_key = pausing_world
    async with running_gateway() as gw:
        await wait_for(lambda: gate_open(gw), 5)
        power = await power_streams_running(gw, power_key, 3)
        status, _, _ = await read_all(await start(light_key, chat_body(max_tokens=4)), 30)
        assert status == 200
        await asyncio.gather(*(rest_of(c) for c in power))
        assert gw.scheduler.core.totals["preempted"] >= 1
        await wait_for(lambda: gw.usage.pending == 0, 5)
        assert await gw.telemetry.tracing.flush()
    spans = receiver.received()
    paused = next(s for s in spans if s.attributes.get("llmserver.preempted") == "resumable")
    trace = [s for s in spans if s.trace_id == paused.trace_id]
    first, resumed = sorted((s for s in trace if s.name == "dispatch"), key=lambda s: s.start_ns)
    assert first is paused and resumed.attributes["llmserver.resumed"] is True
    assert {s.name for s in trace if s.parent_id == first.span_id} == {"first_token", "relay"}
    assert {s.name for s in trace if s.parent_id == resumed.span_id} == {"relay"}
    waits = [s for s in trace if s.name == "queue"]
    assert sorted(w.attributes.get("llmserver.requeued", False) for w in waits) == [False, True]
    root = named(trace, f"chat {MODEL}")
    assert root.attributes["gen_ai.usage.output_tokens"] == POWER_TOKENS


async def test_a_refused_request_is_traced_to_its_refusal_without_a_dispatch(
    traced, world, receiver
):
    status, headers, _ = await complete(world["alice"], model="no-such-model")
    assert status == 404
    spans = await trace_of(traced, receiver, headers[b"x-request-id"].decode())
    assert {s.name for s in spans} == {"chat no-such-model", "admission", "accounting"}
    root = named(spans, "chat no-such-model")
    assert root.attributes["error.type"] == "model_not_found"
    assert root.attributes["llmserver.status"] == "rejected"
    assert root.status == "UNSET"  # the client's mistake, not the gateway's failure


async def test_a_request_the_sampler_leaves_out_exports_nothing_but_tells_the_engine_so(
    sampled_out, world, receiver, proxy
):
    status, _, _ = await complete(world["alice"])
    assert status == 200
    assert await sampled_out.telemetry.tracing.flush()
    assert receiver.received() == []
    (sent,) = proxy.seen
    _, trace_id, _, flags = sent["traceparent"].split("-")
    assert int(trace_id, 16) and not int(flags, 16) & 1  # a trace, not sampled


async def test_with_no_otel_variable_a_request_makes_no_span_and_sends_no_traceparent(
    untraced, world, proxy
):
    from opentelemetry.trace import Span

    def spans() -> set[int]:
        # type(), not isinstance: a lazy object's __class__ would evaluate it.
        return {id(o) for o in gc.get_objects() if issubclass(type(o), Span)}

    before = spans()
    status, _, _ = await complete(world["alice"])
    assert status == 200
    assert not untraced.telemetry.tracing.enabled
    assert spans() - before == set()
    (sent,) = proxy.seen
    assert "traceparent" not in sent


def test_with_no_otel_variable_the_gateway_never_imports_the_tracing_sdk() -> None:
    """Its tracer, span processors and exporters, and the gateway's own tracing over them.
    (redis-py imports `opentelemetry.sdk.metrics` by itself, for metrics it records only when
    an application turns them on.)"""
    code = (
        "import sys, django; django.setup(); "
        "from llmserver.asgi import application; "
        "from llmserver.runtime.gateway import Gateway; "
        "import llmserver.pipeline.completion; "
        "gw = Gateway(); "
        "print(gw.telemetry.tracing.enabled, sorted(m for m in sys.modules if m.startswith(("
        "'opentelemetry.sdk.trace', 'opentelemetry.exporter', 'llmserver.runtime.otel'))))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env |= {"DJANGO_SETTINGS_MODULE": "llmserver.settings", "SECRET_KEY": "test"}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "False []"
