"""Through the gateway under load: the real vLLM's own metrics show what the gateway did, and
what the gateway read from them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time

import httpx
import pytest

from llmserver.testing.processes import GatewayProcess
from llmserver.testing.vllm_server import SERVED_NAME, VllmServer
from tests.real_engines import new_key, series, wait_idle
from tests.vllm.conftest import MODEL, SLOTS, gateway_for

pytestmark = pytest.mark.vllm
STORY = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
HANG_UP_SECONDS = 2.0  # a 400-token stream runs for minutes; 0.15 s was seen, on a quiet machine
GATE_OPEN = 'llmserver_gate_open{backend="vllm",band="0"}'
KV_USAGE = 'llmserver_backend_metric{backend="vllm",name="kv_cache_usage"}'


def chat(max_tokens: int, **extra: object) -> dict:
    return {
        "model": MODEL,
        "messages": STORY,
        "max_tokens": max_tokens,
        "stream": True,
        "temperature": 0,
        **extra,
    }


async def stream_all(http: httpx.AsyncClient, url: str, key: str, body: dict) -> dict:
    """One stream to its end: status, text, ids, usage, how many events carried text."""
    out: dict = {"text": "", "ids": set(), "usage": None, "text_events": 0}
    headers = {"authorization": f"Bearer {key}"}
    async with http.stream("POST", url + "/v1/chat/completions", json=body, headers=headers) as r:
        out["status"] = r.status_code
        async for line in r.aiter_lines():
            if not line.startswith("data: {"):
                continue
            event = json.loads(line[6:])
            out["ids"].add(event.get("id"))
            if event.get("usage"):
                out["usage"] = event["usage"]
            for choice in event.get("choices", []):
                piece = (choice.get("delta") or {}).get("content")
                if piece:
                    out["text"] += piece
                    out["text_events"] += 1
    return out


def gateway_values(gateway: GatewayProcess) -> dict[str, float]:
    return series(gateway.url)


async def running(vllm: VllmServer, value: float, within: float) -> float:
    """Seconds until the engine reports `value` requests running (asserted within `within`)."""
    start = time.monotonic()
    while vllm.metrics()["vllm:num_requests_running"] != value:
        assert time.monotonic() - start < within, f"not {value} running within {within} s"
        await asyncio.sleep(0.02)
    return time.monotonic() - start


async def test_a_client_that_hangs_up_frees_the_engines_slot_at_once(gateway, vllm):
    """The gateway cancels its upstream request as soon as its client goes, and vLLM aborts it
    at its next step: the engine reports it gone within seconds (0.15 s was seen straight at
    the engine), not when its 400 tokens would have ended."""
    await wait_idle(vllm)
    key = new_key(gateway, "hangup")
    async with httpx.AsyncClient(timeout=120) as http:
        headers = {"authorization": f"Bearer {key}"}
        body = chat(400, ignore_eos=True)  # minutes of tokens: only an abort ends it soon
        async with http.stream(
            "POST", gateway.url + "/v1/chat/completions", json=body, headers=headers
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {") and '"content"' in line:
                    break  # running at the engine: hang up
            await running(vllm, 1, within=5)
    assert await running(vllm, 0, within=HANG_UP_SECONDS) < HANG_UP_SECONDS


async def test_the_gate_reads_the_engines_own_metrics(gateway, vllm):
    """Waiting, running, KV cache usage and the latency histograms, from vLLM's /metrics."""
    await wait_idle(vllm)
    key = new_key(gateway, "gate-reads")
    async with httpx.AsyncClient(timeout=300) as http:
        streams = [
            asyncio.create_task(stream_all(http, gateway.url, key, chat(60))) for _ in range(3)
        ]
        seen: dict[str, float] = {}
        while not all(t.done() for t in streams):
            for name, value in gateway_values(gateway).items():
                if name.startswith("llmserver_backend_metric{") and 'backend="vllm"' in name:
                    field = name.split('name="')[1].split('"')[0]
                    seen[field] = max(seen.get(field, 0.0), value)
            await asyncio.sleep(0.2)
        results = await asyncio.gather(*streams)
    assert [r["status"] for r in results] == [200] * 3
    assert seen["healthy"] == 1.0 and seen["running"] >= 1
    assert 0 < seen["kv_cache_usage"] <= 1
    assert seen["tpot_seconds"] > 0 and seen["ttft_seconds"] > 0
    assert "waiting" in seen


async def test_the_gateway_learns_the_engines_capacity_and_then_keeps_its_queue_empty(
    vllm, tmp_path
):
    """No capacity configured: the gateway lets the engine queue (gate_max_waiting 3) until two
    scrapes show it full with a queue; from then on it holds the excess itself."""
    await wait_idle(vllm)
    tiers = {"interactive": {"gate_max_waiting": 3, "max_concurrent_per_user": 16}}
    gateway = gateway_for(vllm, tmp_path, tiers=tiers)
    try:
        key = new_key(gateway, "learn")
        async with httpx.AsyncClient(timeout=300) as http:
            streams = [
                asyncio.create_task(stream_all(http, gateway.url, key, chat(120)))
                for _ in range(SLOTS + 3)
            ]
            deadline = time.monotonic() + 60
            while gateway_values(gateway).get('llmserver_backend_capacity{backend="vllm"}') is None:
                assert time.monotonic() < deadline, "no capacity learned"
                await asyncio.sleep(0.2)
            assert gateway_values(gateway)['llmserver_backend_capacity{backend="vllm"}'] == SLOTS
            results = await asyncio.gather(*streams)
        assert [r["status"] for r in results] == [200] * (SLOTS + 3)
    finally:
        gateway.stop()
        gateway.database.drop()  # type: ignore[attr-defined]


def queued(values: dict[str, float]) -> float:
    """Requests waiting in the gateway."""
    return sum(v for k, v in values.items() if k.startswith("llmserver_queue_depth{"))


def kv_gate_closed(values: dict[str, float]) -> bool:
    """The gateway's last scrape saw the engine's KV cache in use, and the gate is closed (at
    start-up it is closed too, for want of a scrape: not this)."""
    return values.get(KV_USAGE, 0.0) > 0 and values.get(GATE_OPEN) == 0.0


async def test_the_gate_holds_requests_while_the_engines_own_kv_usage_is_over_the_tier_limit(
    vllm, tmp_path
):
    """A KV-cache limit any running request passes: what the gateway cannot count itself. While
    the engine reports one request's blocks in use, the gate is closed and later requests wait
    in the gateway (none in the engine); once it reports them free, the gate lets them through."""
    await wait_idle(vllm)
    tiers = {"interactive": {"gate_max_kv_cache_usage": 0.0001, "max_concurrent_per_user": 8}}
    gateway = gateway_for(vllm, tmp_path, tiers=tiers, backend={"preemption": False})
    try:
        key = new_key(gateway, "kv-gate")
        async with httpx.AsyncClient(timeout=300) as http:
            first = asyncio.create_task(
                stream_all(http, gateway.url, key, chat(200, ignore_eos=True))
            )
            deadline = time.monotonic() + 30
            while not kv_gate_closed(gateway_values(gateway)):
                assert time.monotonic() < deadline, "the gate never closed on KV usage"
                await asyncio.sleep(0.1)
            held = [
                asyncio.create_task(stream_all(http, gateway.url, key, chat(4))) for _ in range(2)
            ]
            deadline = time.monotonic() + 10
            while (waiting := queued(gateway_values(gateway))) != 2:
                assert time.monotonic() < deadline, f"{waiting} queued, not 2"
                await asyncio.sleep(0.05)
            for _ in range(8):  # 2 s: eight scrapes of the engine
                engine = vllm.metrics()
                in_engine = engine["vllm:num_requests_running"], engine["vllm:num_requests_waiting"]
                assert in_engine == (1, 0) and queued(gateway_values(gateway)) == 2
                await asyncio.sleep(0.25)
            assert not first.done()
            results = [await first, *await asyncio.gather(*held)]
        assert [r["status"] for r in results] == [200] * 3
        assert queued(gateway_values(gateway)) == 0
    finally:
        gateway.stop()
        gateway.database.drop()  # type: ignore[attr-defined]


def preemptions(gateway: GatewayProcess) -> float:
    """Streams paused after their first token (to be continued), so far."""
    values = gateway_values(gateway)
    return sum(
        v
        for k, v in values.items()
        if k.startswith("llmserver_preemptions_total{") and 'kind="resumable"' in k
    )


async def test_a_paused_stream_continues_token_for_token_as_its_unpaused_twin(vllm, tmp_path):
    """Every slot busy with one user's streams (capacity set, as an operator would): a light
    user's request pauses one, which the gateway continues with `continue_final_message`.
    Greedy decoding: each power stream must read exactly as the same request run alone, with
    the same usage, and its client sees one stream with one id."""
    await wait_idle(vllm)
    tiers = {"interactive": {"max_concurrent_per_user": 16}}
    gateway = gateway_for(vllm, tmp_path, "--capacity", str(SLOTS), tiers=tiers)
    try:
        power, light = new_key(gateway, "pause-power"), new_key(gateway, "pause-light")
        body = chat(120, stream_options={"include_usage": True})
        async with httpx.AsyncClient(timeout=300) as http:
            twin = await stream_all(http, gateway.url, power, body)
            streams = [
                asyncio.create_task(stream_all(http, gateway.url, power, body))
                for _ in range(SLOTS)
            ]
            await asyncio.sleep(3.0)
            small = {**chat(8), "messages": [{"role": "user", "content": "Hi"}]}
            lighter = await stream_all(http, gateway.url, light, small)
            results = await asyncio.gather(*streams)
        assert lighter["status"] == 200 and preemptions(gateway) >= 1
        for result in results:
            assert result["status"] == 200 and len(result["ids"]) == 1
            assert result["text"] == twin["text"]
            assert result["usage"] == twin["usage"]
    finally:
        gateway.stop()
        gateway.database.drop()  # type: ignore[attr-defined]


async def test_a_stream_queued_in_the_engine_has_its_headers_and_no_event_until_it_runs(vllm):
    """vLLM answers a stream's headers at once and sends its first event (the role chunk) with
    the request's first output, so a request waiting in its queue is silent: what the gateway's
    first-byte timeout must allow for on a full engine, and what the simulator does."""
    await wait_idle(vllm)
    body = {**chat(400, ignore_eos=True), "model": SERVED_NAME}  # minutes of tokens each
    async with (
        httpx.AsyncClient(base_url=vllm.url, timeout=120) as http,
        contextlib.AsyncExitStack() as streams,
    ):
        readers = []  # kept: a dropped reader closes its stream
        for _ in range(SLOTS):
            response = await streams.enter_async_context(
                http.stream("POST", "/v1/chat/completions", json=body)
            )
            readers.append(response.aiter_bytes())
            await anext(readers[-1])  # running
        async with asyncio.timeout(10):  # the headers come at once, not when a slot frees
            queued = await streams.enter_async_context(
                http.stream("POST", "/v1/chat/completions", json=body)
            )
        assert queued.status_code == 200
        deadline = time.monotonic() + 10
        while vllm.metrics()["vllm:num_requests_waiting"] != 1:
            assert time.monotonic() < deadline, "the fifth stream is not waiting"
            await asyncio.sleep(0.05)
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(2):
                await anext(queued.aiter_bytes())
