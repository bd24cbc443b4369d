"""A backend wrongly marked as running priority scheduling: where the engine refuses the priority
(vLLM's V0 engine), the client stops sending it and tries once more without it; where it ignores
it (vLLM's V1 engine, 0.32 included), the request is simply served."""

from __future__ import annotations

from llmserver.backends.spec import BackendSpec
from llmserver.backends.upstream import UpstreamClient

BODY = {"model": "demo-llama", "prompt": "hello", "max_tokens": 3}


async def test_a_refused_priority_is_dropped_and_the_request_succeeds(simulator):
    sim = simulator("--scheduling-policy", "fcfs", "--refuse-priority-under-fcfs")
    client = UpstreamClient(BackendSpec("sim", "vllm", sim.url, priority_scheduling=True))
    status, data = await client.complete("/v1/completions", BODY, priority=2)
    await client.aclose()
    assert status == 200 and data["usage"]["completion_tokens"] == 3
    assert client.sends_priority is False


async def test_a_refused_priority_on_a_stream_is_dropped_before_anything_is_relayed(simulator):
    sim = simulator("--scheduling-policy", "fcfs", "--refuse-priority-under-fcfs")
    client = UpstreamClient(BackendSpec("sim", "vllm", sim.url, priority_scheduling=True))
    chunks = [c async for c in client.stream_chat("/v1/completions", {**BODY, "stream": True}, 1)]
    await client.aclose()
    text = b"".join(chunks)
    assert b'"error"' not in text and text.rstrip().endswith(b"data: [DONE]")
    assert client.sends_priority is False


async def test_a_priority_scheduling_backend_takes_the_band_and_keeps_getting_it(simulator):
    sim = simulator("--scheduling-policy", "priority")
    client = UpstreamClient(BackendSpec("sim", "vllm", sim.url, priority_scheduling=True))
    status, _ = await client.complete("/v1/completions", BODY, priority=2)
    await client.aclose()
    assert status == 200 and client.sends_priority is True


async def test_an_fcfs_engine_that_ignores_the_priority_serves_it_as_sent(simulator):
    sim = simulator("--scheduling-policy", "fcfs")
    client = UpstreamClient(BackendSpec("sim", "vllm", sim.url, priority_scheduling=True))
    status, data = await client.complete("/v1/completions", BODY, priority=2)
    await client.aclose()
    assert status == 200 and data["usage"]["completion_tokens"] == 3
    assert client.sends_priority is True
