"""The simulator behaves like vLLM under load: batching, a FIFO queue, aborts, priorities."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.processes import Simulator, start_simulator

BODY = {"model": "demo-llama", "messages": [{"role": "user", "content": "hello there"}]}


@pytest.fixture(scope="module")
def two_seqs() -> Iterator[Simulator]:
    sim = start_simulator("--max-num-seqs", "2", "--speed", "4")
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def one_seq_priority() -> Iterator[Simulator]:
    sim = start_simulator("--max-num-seqs", "1", "--scheduling-policy", "priority", "--speed", "4")
    yield sim
    sim.stop()


def metric(sim: Simulator, name: str, **labels: str) -> float:
    text = httpx.get(sim.url + "/metrics").text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


async def wait_until(check, timeout: float = 5.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


async def test_a_third_request_waits_when_two_sequences_run(two_seqs):
    async with httpx.AsyncClient(base_url=two_seqs.url, timeout=30) as client:
        long = {**BODY, "max_tokens": 200, "stream": True}
        streams = [client.stream("POST", "/v1/chat/completions", json=long) for _ in range(3)]
        responses = [await s.__aenter__() for s in streams[:2]]
        third = asyncio.ensure_future(streams[2].__aenter__())
        await wait_until(lambda: metric(two_seqs, "vllm:num_requests_waiting") == 1)
        assert metric(two_seqs, "vllm:num_requests_running") == 2
        for s, r in zip(streams[:2], responses, strict=True):
            await s.__aexit__(None, None, None)
            assert r.status_code == 200
        assert (await third).status_code == 200
        await streams[2].__aexit__(None, None, None)
    await wait_until(lambda: metric(two_seqs, "vllm:num_requests_running") == 0)


async def test_a_client_that_disconnects_aborts_its_sequence(two_seqs):
    aborted = metric(two_seqs, "vllm:request_success_total", finished_reason="abort")
    async with (
        httpx.AsyncClient(base_url=two_seqs.url, timeout=30) as client,
        client.stream(
            "POST", "/v1/chat/completions", json={**BODY, "max_tokens": 500, "stream": True}
        ) as r,
    ):
        lines = r.aiter_lines()
        assert (await anext(lines)).startswith("data: ")
    await wait_until(lambda: metric(two_seqs, "vllm:num_requests_running") == 0)
    assert metric(two_seqs, "vllm:request_success_total", finished_reason="abort") == aborted + 1


async def test_priority_mode_serves_a_lower_priority_value_first(one_seq_priority):
    async with httpx.AsyncClient(base_url=one_seq_priority.url, timeout=30) as client:
        blocker = client.stream(
            "POST", "/v1/chat/completions", json={**BODY, "max_tokens": 2000, "stream": True}
        )
        await blocker.__aenter__()
        order: list[str] = []

        async def ask(name: str, priority: int) -> None:
            r = await client.post(
                "/v1/chat/completions", json={**BODY, "max_tokens": 2, "priority": priority}
            )
            assert r.status_code == 200
            order.append(name)

        late_low = asyncio.ensure_future(ask("priority 5", 5))
        await wait_until(lambda: metric(one_seq_priority, "vllm:num_requests_waiting") == 1)
        urgent = asyncio.ensure_future(ask("priority 0", 0))
        await wait_until(lambda: metric(one_seq_priority, "vllm:num_requests_waiting") == 2)
        await blocker.__aexit__(None, None, None)
        await asyncio.gather(late_low, urgent)
    assert order == ["priority 0", "priority 5"]


def test_a_non_streaming_completion_reports_usage(two_seqs):
    r = httpx.post(
        two_seqs.url + "/v1/completions",
        json={"model": "demo-llama", "prompt": "abcd" * 10, "max_tokens": 3},
    )
    usage = r.json()["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"]) == (10, 3)


def test_a_repeated_prompt_prefix_hits_the_prefix_cache(two_seqs):
    prompt = "The same long system prompt. " * 40
    hits = metric(two_seqs, "vllm:prefix_cache_hits_total")
    for _ in range(2):
        httpx.post(
            two_seqs.url + "/v1/completions",
            json={"model": "demo-llama", "prompt": prompt, "max_tokens": 1},
            timeout=30,
        )
    assert metric(two_seqs, "vllm:prefix_cache_hits_total") > hits


def test_errors_have_vllms_shape_with_an_integer_code(two_seqs):
    r = httpx.post(two_seqs.url + "/v1/chat/completions", json={**BODY, "model": "other"})
    assert r.status_code == 404 and r.json()["error"]["code"] == 404
    r = httpx.post(two_seqs.url + "/v1/chat/completions", content=b"{nope")
    assert r.status_code == 400 and isinstance(r.json()["error"]["message"], str)


def test_models_and_health_answer(two_seqs):
    assert httpx.get(two_seqs.url + "/health").status_code == 200
    assert [m["id"] for m in httpx.get(two_seqs.url + "/v1/models").json()["data"]] == [
        "demo-llama"
    ]


@pytest.mark.parametrize(
    ("fmt", "names"),
    [
        (
            "tgi",
            {
                "tgi_queue_size",
                "tgi_batch_current_size",
                "tgi_request_mean_time_per_token_duration",
            },
        ),
        (
            "sglang",
            {
                "sglang:num_queue_reqs",
                "sglang:num_running_reqs",
                "sglang:token_usage",
                "sglang:inter_token_latency_seconds",
            },
        ),
    ],
)
def test_other_formats_expose_their_servers_metric_names(fmt, names):
    sim = start_simulator("--format", fmt, "--speed", "10")
    try:
        httpx.post(sim.url + "/v1/chat/completions", json={**BODY, "max_tokens": 3}, timeout=30)
        families = {
            f.name for f in text_string_to_metric_families(httpx.get(sim.url + "/metrics").text)
        }
        assert names <= families
    finally:
        sim.stop()


def test_streamed_chunks_follow_openais_format(two_seqs):
    with httpx.stream(
        "POST",
        two_seqs.url + "/v1/chat/completions",
        json={**BODY, "max_tokens": 2, "stream": True, "stream_options": {"include_usage": True}},
        timeout=30,
    ) as r:
        events = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2
